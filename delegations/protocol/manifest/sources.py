"""Bundles from JSON text, bytes, a dict, a ``manifest.json`` path, a folder or a zip.

Zips are checked against the limits before anything is extracted, and again while reading
(headers can lie); nothing is written to disk.
"""

from __future__ import annotations

import io
import json
import stat
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..capabilities import APPROVAL_REQUIRED_CAPABILITIES
from ..errors import Issue
from ..text_limits import parse, value_issue
from .entry_points import VCS_FOLDERS, EntryPointKind, bundle_path_problem, parse_entry_point
from .model import SkillBundle, SkillManifest, invalid_manifest, json_kind, validate_manifest

MAX_BUNDLE_FILES = 200
MAX_FILE_BYTES = 1 * 1024 * 1024
MAX_BUNDLE_BYTES = 5 * 1024 * 1024
MAX_ARCHIVE_BYTES = 5 * 1024 * 1024
MAX_COMPRESSION_RATIO = 100
MANIFEST_NAME = "manifest.json"
# left out of a bundle folder (a skill kept in a checkout), never read
_SKIPPED_DIRS = VCS_FOLDERS | {"__pycache__"}


def _parse_json(text: str, where: str) -> object:
    try:
        data = parse(text)
    except json.JSONDecodeError as exc:
        raise invalid_manifest([Issue(where, f"invalid JSON at line {exc.lineno}, column {exc.colno}: "
                                     f"{exc.msg}")]) from None
    except ValueError as exc:
        raise invalid_manifest([Issue(where, f"invalid JSON: {exc}")]) from None
    if (issue := value_issue(data)) is not None:
        raise invalid_manifest([Issue(issue.field or where, f"{issue.message} (in {where})")])
    return data


def _decode(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise invalid_manifest([Issue(where, f"not UTF-8 text (byte {exc.start})")]) from None


def _read_zip(data: bytes) -> dict[str, bytes]:
    """Every file of a zip bundle, checked against the limits before and while reading."""
    if len(data) > MAX_ARCHIVE_BYTES:
        raise invalid_manifest([Issue("bundle", f"the zip is {len(data)} bytes; at most {MAX_ARCHIVE_BYTES} allowed")])
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise invalid_manifest([Issue("bundle", f"not a readable zip file: {exc}")]) from None
    issues: list[Issue] = []
    entries = [info for info in infos if not info.is_dir()]
    if len(entries) > MAX_BUNDLE_FILES:
        issues.append(Issue("bundle", f"{len(entries)} files; a bundle holds at most {MAX_BUNDLE_FILES}"))
    declared_total = 0
    seen: set[str] = set()
    for info in entries:
        # as stored: zipfile cuts a name short at a NUL byte ("notes.md\x00.sh" reads as "notes.md")
        name = info.orig_filename
        problem = bundle_path_problem(name)
        if problem is not None:
            issues.append(Issue("bundle", f"entry {name!r}: {problem}"))
            continue
        if stat.S_ISLNK(info.external_attr >> 16):
            issues.append(Issue("bundle", f"entry {name!r}: symlinks are not allowed"))
        if name in seen:
            issues.append(Issue("bundle", f"entry {name!r} appears twice"))
        seen.add(name)
        if info.file_size > MAX_FILE_BYTES:
            issues.append(Issue("bundle", f"entry {name!r} is {info.file_size} bytes uncompressed; "
                                          f"at most {MAX_FILE_BYTES} per file"))
        if info.file_size > 1024 and info.file_size > MAX_COMPRESSION_RATIO * max(info.compress_size, 1):
            issues.append(Issue("bundle", f"entry {name!r} expands {info.file_size // max(info.compress_size, 1)}"
                                          f"x; more than {MAX_COMPRESSION_RATIO}x looks like a zip bomb"))
        declared_total += info.file_size
    if declared_total > MAX_BUNDLE_BYTES:
        issues.append(Issue("bundle", f"{declared_total} bytes uncompressed; a bundle holds at most "
                                      f"{MAX_BUNDLE_BYTES}"))
    if issues:
        raise invalid_manifest(issues)
    files: dict[str, bytes] = {}
    total = 0
    for info in entries:
        try:
            with archive.open(info) as stream:
                # Read one byte past the declared size: headers can lie about it.
                content = stream.read(min(info.file_size, MAX_FILE_BYTES) + 1)
        # zipfile signals an unsupported compression method with NotImplementedError and an
        # encrypted entry with RuntimeError; both are just unreadable bundles here.
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError,
                RuntimeError) as exc:
            raise invalid_manifest([Issue("bundle", f"entry {info.filename!r} cannot be read: {exc}")]) from None
        total += len(content)
        if len(content) > info.file_size or len(content) > MAX_FILE_BYTES or total > MAX_BUNDLE_BYTES:
            raise invalid_manifest([Issue("bundle", f"entry {info.filename!r} holds more data than its header "
                                            "declares or than the limits allow")])
        files[info.filename] = content
    return _strip_common_folder(files)


def _strip_common_folder(files: dict[str, bytes]) -> dict[str, bytes]:
    """A zip of a folder ("skill/manifest.json", ...) reads as that folder's contents."""
    if MANIFEST_NAME in files or not files:
        return files
    tops = {name.split("/", 1)[0] for name in files}
    if len(tops) == 1 and all("/" in name for name in files):
        prefix = tops.pop() + "/"
        return {name[len(prefix):]: content for name, content in files.items()}
    return files


def _read_folder(folder: Path) -> dict[str, bytes]:
    issues: list[Issue] = []
    paths: list[Path] = []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(part in _SKIPPED_DIRS for part in relative.parts) or (path.is_dir() and not path.is_symlink()):
            continue
        problem = bundle_path_problem(relative.as_posix())
        if problem is not None:
            issues.append(Issue("bundle", f"{relative.as_posix()!r}: {problem}"))
        elif path.is_symlink():
            issues.append(Issue("bundle", f"{relative.as_posix()!r}: symlinks are not allowed"))
        elif path.is_file():
            paths.append(path)
    if len(paths) > MAX_BUNDLE_FILES:
        issues.append(Issue("bundle", f"{len(paths)} files; a bundle holds at most {MAX_BUNDLE_FILES}"))
    total = 0
    for path in paths:
        size = path.stat().st_size
        total += size
        if size > MAX_FILE_BYTES:
            issues.append(Issue("bundle", f"{path.relative_to(folder).as_posix()!r} is {size} bytes; at "
                                          f"most {MAX_FILE_BYTES} per file"))
    if total > MAX_BUNDLE_BYTES:
        issues.append(Issue("bundle", f"{total} bytes; a bundle holds at most {MAX_BUNDLE_BYTES}"))
    if issues:
        raise invalid_manifest(issues)
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in paths}


def _bundle(files: dict[str, bytes], approval_required: Iterable[str],
            python_allowlist: Iterable[str]) -> SkillBundle:
    if MANIFEST_NAME not in files:
        listed = ", ".join(sorted(files)[:10]) or "no files"
        raise invalid_manifest([Issue("bundle", f"no {MANIFEST_NAME} at the bundle's root (found {listed})")])
    data = _parse_json(_decode(files[MANIFEST_NAME], MANIFEST_NAME), MANIFEST_NAME)
    manifest = validate_manifest(data, approval_required=approval_required,
                                 python_allowlist=python_allowlist, bundle_files=files)
    instructions: str | None = None
    entry = manifest.entry
    if entry.kind is EntryPointKind.INSTRUCTIONS and entry.path is not None:
        instructions = files[entry.path].decode("utf-8")
        notes = []
        if manifest.instructions and manifest.instructions.strip() != instructions.strip():
            notes.append(f"the manifest's instructions were replaced by {entry.path} (the entry point)")
        manifest = manifest.model_copy(update={"instructions": instructions})
        manifest._notes = notes
    return SkillBundle(manifest=manifest, files=files, instructions=instructions)


def _is_zip(data: bytes) -> bool:
    return data[:4] in (b"PK\x03\x04", b"PK\x05\x06")


def load_bundle(source: str | bytes | dict[str, Any] | Path, *,
                approval_required: Iterable[str] = APPROVAL_REQUIRED_CAPABILITIES,
                python_allowlist: Iterable[str] = ()) -> SkillBundle:
    """A manifest with its files from JSON text, bytes, a dict, a manifest.json path, a
    bundle folder or a zip (path or bytes). Raises ProtocolError(ERR_INVALID_MANIFEST)."""
    approval = frozenset(approval_required)
    allowlist = tuple(python_allowlist)
    if isinstance(source, dict):
        return SkillBundle(manifest=validate_manifest(source, approval_required=approval,
                                                      python_allowlist=allowlist))
    if isinstance(source, bytes | bytearray):
        raw = bytes(source)
        if _is_zip(raw):
            return _bundle(_read_zip(raw), approval, allowlist)
        return _from_text(_decode(raw, MANIFEST_NAME), approval, allowlist)
    if isinstance(source, str):
        if source.lstrip().startswith(("{", "[")) or "\n" in source:
            return _from_text(source, approval, allowlist)
        source = Path(source)
    if isinstance(source, Path):
        return _from_path(source, approval, allowlist)
    raise invalid_manifest([Issue("manifest", "expected JSON text, bytes, a dict or a path to a manifest, "
                                      f"folder or zip; got {json_kind(source)}")])


def _from_text(text: str, approval: frozenset[str], allowlist: tuple[str, ...]) -> SkillBundle:
    data = _parse_json(text, MANIFEST_NAME)
    return SkillBundle(manifest=validate_manifest(data, approval_required=approval,
                                                  python_allowlist=allowlist))


def _from_path(path: Path, approval: frozenset[str], allowlist: tuple[str, ...]) -> SkillBundle:
    try:
        if path.is_dir():
            return _bundle(_read_folder(path), approval, allowlist)
        if not path.is_file():
            raise invalid_manifest([Issue("manifest", f"{str(path)[:200]!r} is not JSON and no such file or "
                                              "folder exists")])
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = handle.read(4)
        if _is_zip(head) or path.suffix.lower() == ".zip":
            if size > MAX_ARCHIVE_BYTES:
                raise invalid_manifest([Issue("bundle", f"the zip is {size} bytes; at most {MAX_ARCHIVE_BYTES} allowed")])
            return _bundle(_read_zip(path.read_bytes()), approval, allowlist)
        if size > MAX_FILE_BYTES:
            raise invalid_manifest([Issue(MANIFEST_NAME, f"{size} bytes; a manifest is at most {MAX_FILE_BYTES}")])
        data = _parse_json(_decode(path.read_bytes(), MANIFEST_NAME), MANIFEST_NAME)
        files = _sibling_entry(path.parent, data)
        return SkillBundle(manifest=validate_manifest(
            data, approval_required=approval, python_allowlist=allowlist,
            bundle_files=files)) if files is None else _bundle(files, approval, allowlist)
    except OSError as exc:
        raise invalid_manifest([Issue("manifest", f"cannot read {str(path)[:200]!r}: {exc.strerror or exc}")]) from None
    except ValueError as exc:  # e.g. a NUL byte in the path
        raise invalid_manifest([Issue("manifest", f"not a usable path: {exc}")]) from None


def _sibling_entry(folder: Path, data: object) -> dict[str, bytes] | None:
    """For a manifest.json path: the manifest plus its instruction file, read from its folder."""
    if not isinstance(data, dict) or not isinstance(data.get("entry_point"), str):
        return None
    try:
        entry = parse_entry_point(data["entry_point"])
    except ValueError:
        return None
    if entry.kind is not EntryPointKind.INSTRUCTIONS or entry.path is None:
        return None
    files = {MANIFEST_NAME: json.dumps(data).encode("utf-8")}
    candidate = folder / entry.path
    if candidate.is_file() and not candidate.is_symlink() and candidate.stat().st_size <= MAX_FILE_BYTES:
        files[entry.path] = candidate.read_bytes()
    return files


def load_manifest(source: str | bytes | dict[str, Any] | Path, *,
                  approval_required: Iterable[str] = APPROVAL_REQUIRED_CAPABILITIES,
                  python_allowlist: Iterable[str] = ()) -> SkillManifest:
    """A validated SkillManifest from any source :func:`load_bundle` accepts."""
    return load_bundle(source, approval_required=approval_required,
                       python_allowlist=python_allowlist).manifest
