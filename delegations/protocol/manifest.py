"""Skill manifests and bundles (the hand-off protocol's skill packaging; docs/protocol.md).

A skill is a ``manifest.json``::

    {"skill_name": "SourceCodeAalyzer", "version": "1.2.0", "entry_point": "analyze.py",
     "input_schema": {"repo_path": "string", "strict_mode": "boolean"},
     "output_schema": {"vulnerabilities": "array", "sloc": "number"},
     "capabilities": ["fs_read", "ast_parsing", "subprocess_exec"]}

plus optional ``description``, ``subagent_type``, ``instructions``, ``requires_approval``
and ``tags``. Keys the protocol does not know are kept (so export gives them back) and
listed in :attr:`SkillManifest.warnings`.

Rules (every broken one is reported at once: ``ProtocolError(ERR_INVALID_MANIFEST,
issues=[Issue(field, message), ...])``):

- ``version`` is a semantic version 2.0.0 (:class:`SemVer` compares them, so "latest" is
  the highest precedence, not the newest upload).
- ``input_schema``/``output_schema``: the hand-off protocol's shorthand or JSON Schema, normalized to a
  valid draft 2020-12 JSON Schema (see :mod:`.schemas`).
- A capability in the approval-required set (default ``network_outbound``,
  ``file_delete``, ``financial_tx``; a setting) needs ``requires_approval: true``;
  otherwise the manifest is rejected with an issue naming the capability. Capabilities
  the protocol does not know are kept and listed in ``unknown_capabilities``/``warnings``.
- ``entry_point`` is one of: an instruction file (``.md``/``.txt``; inside a bundle it
  must exist, and its text becomes ``instructions``); ``python:module:callable`` for a
  deterministic skill, allowed only when the module (or a package containing it) is in
  ``python_allowlist``; or a script file name such as the protocol example's ``analyze.py``, which is
  accepted with a warning: Handoff never executes bundled scripts, so such a skill runs
  from its ``instructions``/``description``.

Bundles: a folder, or a zip (path or bytes), with ``manifest.json`` at its root (or inside
one top-level folder). Zips are checked before anything is extracted: at most
:data:`MAX_BUNDLE_FILES` files, :data:`MAX_FILE_BYTES` per file, :data:`MAX_BUNDLE_BYTES`
in total (uncompressed, counted while reading, so lying headers do not help), a
compression ratio of at most :data:`MAX_COMPRESSION_RATIO`, and no entry names with
``..``, absolute paths, backslashes, drive letters or symlinks. Nothing is written to disk.
"""

from __future__ import annotations

import io
import json
import re
import stat
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import total_ordering
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from .capabilities import APPROVAL_REQUIRED_CAPABILITIES, KNOWN_CAPABILITIES
from .errors import ErrorCode, Issue, ProtocolError
from .schemas import normalize_schema_issues

MAX_BUNDLE_FILES = 200
MAX_FILE_BYTES = 1 * 1024 * 1024
MAX_BUNDLE_BYTES = 5 * 1024 * 1024
MAX_ARCHIVE_BYTES = 5 * 1024 * 1024
MAX_COMPRESSION_RATIO = 100
MANIFEST_NAME = "manifest.json"
INSTRUCTION_SUFFIXES = (".md", ".txt")
SUBAGENT_TYPES = ("coder", "researcher", "reviewer", "executor", "planner", "critic", "verifier")
REQUIRED_FIELDS = ("skill_name", "version", "entry_point", "input_schema", "output_schema",
                   "capabilities")
_SKIPPED_DIRS = frozenset({".git", "__pycache__", ".hg", ".svn"})


# --- semantic versions --------------------------------------------------------------------

_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$")


@total_ordering
@dataclass(frozen=True, slots=True, eq=False)
class SemVer:
    """A semantic version 2.0.0; ordered by precedence (build metadata does not count)."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    build: str = ""

    @classmethod
    def parse(cls, text: str) -> SemVer:
        match = _SEMVER.match(text) if isinstance(text, str) else None
        if match is None:
            raise ValueError(f"{text!r} is not a semantic version (MAJOR.MINOR.PATCH such as "
                             "1.2.0, optionally -prerelease and +build)")
        major, minor, patch, pre, build = match.groups()
        return cls(int(major), int(minor), int(patch), tuple(pre.split(".")) if pre else (),
                   build or "")

    @property
    def precedence(self) -> tuple[Any, ...]:
        # A release outranks its prereleases; numeric identifiers rank below alphanumeric.
        pre: tuple[Any, ...] = tuple((0, int(part), "") if part.isdigit() else (1, 0, part)
                                     for part in self.prerelease)
        return (self.major, self.minor, self.patch, 1 if not pre else 0, pre)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SemVer):
            return NotImplemented
        return self.precedence == other.precedence and self.build == other.build

    def __hash__(self) -> int:
        return hash((self.precedence, self.build))

    def __lt__(self, other: SemVer) -> bool:
        if not isinstance(other, SemVer):
            return NotImplemented
        return (self.precedence, self.build) < (other.precedence, other.build)

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        return text + (f"+{self.build}" if self.build else "")


def latest_version(versions: Iterable[str], *, include_prerelease: bool = False) -> str | None:
    """The highest-precedence valid semver among ``versions`` (invalid ones are skipped).

    Like package managers' "latest", a release beats any prerelease; prereleases are only
    chosen when ``include_prerelease`` is set or when there is nothing else.
    """
    parsed: list[tuple[SemVer, str]] = []
    for text in versions:
        try:
            parsed.append((SemVer.parse(text), text))
        except ValueError:
            continue
    releases = [item for item in parsed if not item[0].prerelease]
    pool = parsed if include_prerelease or not releases else releases
    return max(pool, key=lambda item: item[0])[1] if pool else None


# --- entry points ---------------------------------------------------------------------------

class EntryPointKind(StrEnum):
    INSTRUCTIONS = "instructions"
    PYTHON = "python"
    SCRIPT = "script"


@dataclass(frozen=True, slots=True)
class EntryPoint:
    kind: EntryPointKind
    raw: str
    path: str | None = None        # instruction or script file, relative to the bundle root
    module: str | None = None
    attribute: str | None = None   # the callable's name in ``module``


_DOTTED = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")
_IDENT = re.compile(r"^[A-Za-z_]\w*$")
_FILE_NAME = re.compile(r"^[\w.@+~ -]+(?:/[\w.@+~ -]+)*\.[A-Za-z0-9]{1,10}$")


def bundle_path_problem(name: str) -> str | None:
    """Why ``name`` is not a safe relative path inside a bundle, or None when it is."""
    if not name or "\x00" in name:
        return "empty name or NUL byte"
    if "\\" in name:
        return "backslashes are not allowed (use '/')"
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return "absolute paths are not allowed"
    if any(part == ".." for part in name.split("/")):
        return "'..' would leave the bundle"
    return None


def parse_entry_point(raw: str) -> EntryPoint:
    """The entry point's form; ValueError says what forms exist."""
    text = raw.strip()
    if text.startswith("python:"):
        parts = text.split(":")
        if len(parts) != 3 or not _DOTTED.match(parts[1]) or not _IDENT.match(parts[2]):
            raise ValueError(f"{raw!r}: expected python:module:callable, e.g. "
                             "python:my_skills.pricing:run")
        return EntryPoint(EntryPointKind.PYTHON, text, module=parts[1], attribute=parts[2])
    problem = bundle_path_problem(text)
    if problem is not None:
        raise ValueError(f"{raw!r}: {problem}")
    if not _FILE_NAME.match(text):
        raise ValueError(f"{raw!r}: expected an instruction file (.md or .txt) in the bundle, "
                         "python:module:callable, or a script file name")
    kind = (EntryPointKind.INSTRUCTIONS if text.lower().endswith(INSTRUCTION_SUFFIXES)
            else EntryPointKind.SCRIPT)
    return EntryPoint(kind, text, path=text.removeprefix("./"))


def module_allowed(module: str, allowlist: Iterable[str]) -> bool:
    """Exact module or a package that contains it ("skills" allows "skills.pricing")."""
    return any(module == allowed or module.startswith(allowed + ".") for allowed in allowlist)


# --- field checks (shared by the model and by load_manifest's all-problems pass) ----------------

_SKILL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def _kind(value: object) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def _check_skill_name(value: object) -> str | None:
    if not isinstance(value, str):
        return f"expected a string; got {_kind(value)}"
    if not _SKILL_NAME.match(value):
        return ("expected 1-100 letters, digits, '_', '-' or '.', starting with a letter or digit "
                f"(no spaces, '@' or '/'); got {value!r}")
    return None


def _check_version(value: object) -> str | None:
    if not isinstance(value, str):
        return f"expected a semantic version string such as \"1.2.0\"; got {_kind(value)}"
    try:
        SemVer.parse(value)
    except ValueError as exc:
        return str(exc)
    return None


def _check_entry_point(value: object) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return f"expected an instruction file, python:module:callable or a script name; got {_kind(value)}"
    try:
        parse_entry_point(value)
    except ValueError as exc:
        return str(exc)
    return None


def _check_str_list(value: object, what: str) -> list[tuple[str, str]]:
    if not isinstance(value, list):
        return [("", f"expected a list of {what}; got {_kind(value)}")]
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            problems.append((f"[{index}]", f"expected a non-empty string; got {_kind(item)}"))
        elif item in seen:
            problems.append((f"[{index}]", f"{item!r} is listed twice"))
        else:
            seen.add(item)
    return problems


def _check_optional_str(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return None
    return f"expected a string; got {_kind(value)}"


def _check_subagent_type(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in SUBAGENT_TYPES:
        return f"expected one of {', '.join(SUBAGENT_TYPES)}; got {value!r}"
    return None


def _check_bool(value: object) -> str | None:
    if isinstance(value, bool):
        return None
    return f"expected true or false; got {_kind(value)} {value!r}"[:200]


# --- the model ------------------------------------------------------------------------------

class SkillManifest(BaseModel):
    """A validated manifest; schemas are normalized JSON Schema. Unknown keys are kept."""

    model_config = ConfigDict(extra="allow", frozen=True)

    skill_name: str
    version: str
    entry_point: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    capabilities: list[str] = Field(default_factory=list)
    description: str | None = None
    subagent_type: str | None = None
    instructions: str | None = None
    requires_approval: bool = False
    tags: list[str] = Field(default_factory=list)

    _notes: list[str] = PrivateAttr(default_factory=list)

    @field_validator("skill_name", mode="before")
    @classmethod
    def _valid_name(cls, value: object) -> object:
        return _raise_if(_check_skill_name(value), value)

    @field_validator("version", mode="before")
    @classmethod
    def _valid_version(cls, value: object) -> object:
        return _raise_if(_check_version(value), value)

    @field_validator("entry_point", mode="before")
    @classmethod
    def _valid_entry_point(cls, value: object) -> object:
        return _raise_if(_check_entry_point(value), value)

    @field_validator("input_schema", "output_schema", mode="before")
    @classmethod
    def _normalized(cls, value: object) -> object:
        normalized, issues = normalize_schema_issues(value, "schema")
        if issues:
            raise ValueError("; ".join(f"{issue.field}: {issue.message}" for issue in issues))
        return normalized

    @field_validator("capabilities", "tags", mode="before")
    @classmethod
    def _string_list(cls, value: object) -> object:
        problems = _check_str_list(value, "names")
        if problems:
            raise ValueError("; ".join(f"{where} {message}".strip() for where, message in problems))
        return value

    @field_validator("subagent_type", mode="before")
    @classmethod
    def _valid_subagent_type(cls, value: object) -> object:
        return _raise_if(_check_subagent_type(value), value)

    @field_validator("requires_approval", mode="before")
    @classmethod
    def _strict_bool(cls, value: object) -> object:
        return _raise_if(_check_bool(value), value)

    @property
    def ref(self) -> str:
        return f"{self.skill_name}@{self.version}"

    @property
    def semver(self) -> SemVer:
        return SemVer.parse(self.version)

    @property
    def entry(self) -> EntryPoint:
        return parse_entry_point(self.entry_point)

    @property
    def unknown_capabilities(self) -> list[str]:
        return [name for name in self.capabilities if name not in KNOWN_CAPABILITIES]

    @property
    def extra_keys(self) -> list[str]:
        return sorted(self.model_extra or {})

    @property
    def warnings(self) -> list[str]:
        out: list[str] = []
        for name in self.unknown_capabilities:
            out.append(f"capability {name!r} is not one Handoff knows; it is kept, but no tool "
                       "grants it")
        if self.entry.kind is EntryPointKind.SCRIPT:
            out.append(f"entry_point {self.entry_point!r} is a script; Handoff does not execute "
                       "bundled scripts, so this skill runs from its instructions/description "
                       "(use an .md instruction file or python:module:callable)")
        for key in self.extra_keys:
            out.append(f"unknown manifest key {key!r} is kept as is")
        return out + list(self._notes)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


def _raise_if(problem: str | None, value: object) -> object:
    if problem is not None:
        raise ValueError(problem)
    return value


@dataclass(frozen=True, slots=True)
class SkillBundle:
    """A loaded bundle: the manifest, every file in it (manifest.json included) and the
    instruction text from the entry point, when it is an instruction file."""

    manifest: SkillManifest
    files: dict[str, bytes] = field(default_factory=dict)
    instructions: str | None = None


# --- validation ---------------------------------------------------------------------------

def _invalid(issues: list[Issue]) -> ProtocolError:
    first = issues[0]
    more = f" (and {len(issues) - 1} more problem(s))" if len(issues) > 1 else ""
    return ProtocolError(ErrorCode.INVALID_MANIFEST,
                         f"the skill manifest is invalid: {first.field}: {first.message}{more}",
                         issues=issues)


def manifest_issues(data: Mapping[str, Any], *,
                    approval_required: Iterable[str] = APPROVAL_REQUIRED_CAPABILITIES,
                    python_allowlist: Iterable[str] = (),
                    bundle_files: Mapping[str, bytes] | None = None) -> list[Issue]:
    """Every problem with a manifest's data, in field order; empty when it is valid."""
    issues: list[Issue] = []
    for name in REQUIRED_FIELDS:
        if name not in data:
            issues.append(Issue(name, f"{name} is required in manifest.json"))
    checks = {"skill_name": _check_skill_name, "version": _check_version,
              "entry_point": _check_entry_point, "description": _check_optional_str,
              "instructions": _check_optional_str, "subagent_type": _check_subagent_type,
              "requires_approval": _check_bool}
    for name, check in checks.items():
        if name in data and (problem := check(data[name])) is not None:
            issues.append(Issue(name, problem))
    for name in ("input_schema", "output_schema"):
        if name in data:
            issues.extend(normalize_schema_issues(data[name], name)[1])
    for name in ("capabilities", "tags"):
        if name in data:
            issues.extend(Issue(f"{name}{where}", message)
                          for where, message in _check_str_list(data[name], "names"))
    capabilities = data.get("capabilities")
    if isinstance(capabilities, list) and data.get("requires_approval") is not True:
        needing = set(approval_required)
        for index, capability in enumerate(capabilities):
            if isinstance(capability, str) and capability in needing:
                issues.append(Issue(f"capabilities[{index}]",
                                    f"capability {capability!r} needs explicit approval: set "
                                    '"requires_approval": true in the manifest (the hand-off protocol\'s approval rules)'))
    issues.extend(_entry_point_issues(data.get("entry_point"), python_allowlist, bundle_files))
    return issues


def _entry_point_issues(raw: object, python_allowlist: Iterable[str],
                        bundle_files: Mapping[str, bytes] | None) -> list[Issue]:
    if not isinstance(raw, str):
        return []
    try:
        entry = parse_entry_point(raw)
    except ValueError:
        return []  # already reported by the field check
    if entry.kind is EntryPointKind.PYTHON:
        allowed = list(python_allowlist)
        if entry.module is not None and not module_allowed(entry.module, allowed):
            listed = ", ".join(allowed) or "none"
            return [Issue("entry_point", f"python module {entry.module!r} is not in the python "
                                         f"skill allowlist (HANDOFF_PYTHON_SKILL_ALLOWLIST; allowed: "
                                         f"{listed})")]
    elif entry.kind is EntryPointKind.INSTRUCTIONS and bundle_files is not None and entry.path:
        if entry.path not in bundle_files:
            return [Issue("entry_point", f"instruction file {entry.path!r} is not in the bundle")]
        try:
            bundle_files[entry.path].decode("utf-8")
        except UnicodeDecodeError:
            return [Issue("entry_point", f"instruction file {entry.path!r} is not UTF-8 text")]
    return []


def validate_manifest(data: object, *,
                      approval_required: Iterable[str] = APPROVAL_REQUIRED_CAPABILITIES,
                      python_allowlist: Iterable[str] = (),
                      bundle_files: Mapping[str, bytes] | None = None) -> SkillManifest:
    """A SkillManifest from parsed JSON data, or ProtocolError listing every problem."""
    if not isinstance(data, dict):
        raise _invalid([Issue("manifest", f"expected a JSON object; got {_kind(data)}")])
    issues = manifest_issues(data, approval_required=approval_required,
                             python_allowlist=python_allowlist, bundle_files=bundle_files)
    if issues:
        raise _invalid(issues)
    return SkillManifest.model_validate(data)


# --- sources --------------------------------------------------------------------------------

def _parse_json(text: str, where: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _invalid([Issue(where, f"invalid JSON at line {exc.lineno}, column {exc.colno}: "
                                     f"{exc.msg}")]) from None
    except RecursionError:
        raise _invalid([Issue(where, "invalid JSON: nested too deeply")]) from None


def _decode(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _invalid([Issue(where, f"not UTF-8 text (byte {exc.start})")]) from None


def _read_zip(data: bytes) -> dict[str, bytes]:
    """Every file of a zip bundle, checked against the limits before and while reading."""
    if len(data) > MAX_ARCHIVE_BYTES:
        raise _invalid([Issue("bundle", f"the zip is {len(data)} bytes; at most {MAX_ARCHIVE_BYTES} allowed")])
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise _invalid([Issue("bundle", f"not a readable zip file: {exc}")]) from None
    issues: list[Issue] = []
    entries = [info for info in infos if not info.is_dir()]
    if len(entries) > MAX_BUNDLE_FILES:
        issues.append(Issue("bundle", f"{len(entries)} files; a bundle holds at most {MAX_BUNDLE_FILES}"))
    declared_total = 0
    seen: set[str] = set()
    for info in entries:
        name = info.filename
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
        raise _invalid(issues)
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
            raise _invalid([Issue("bundle", f"entry {info.filename!r} cannot be read: {exc}")]) from None
        total += len(content)
        if len(content) > info.file_size or len(content) > MAX_FILE_BYTES or total > MAX_BUNDLE_BYTES:
            raise _invalid([Issue("bundle", f"entry {info.filename!r} holds more data than its header "
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
        if any(part in _SKIPPED_DIRS for part in relative.parts):
            continue
        if path.is_symlink():
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
        raise _invalid(issues)
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in paths}


def _bundle(files: dict[str, bytes], approval_required: Iterable[str],
            python_allowlist: Iterable[str]) -> SkillBundle:
    if MANIFEST_NAME not in files:
        listed = ", ".join(sorted(files)[:10]) or "no files"
        raise _invalid([Issue("bundle", f"no {MANIFEST_NAME} at the bundle's root (found {listed})")])
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
    raise _invalid([Issue("manifest", "expected JSON text, bytes, a dict or a path to a manifest, "
                                      f"folder or zip; got {_kind(source)}")])


def _from_text(text: str, approval: frozenset[str], allowlist: tuple[str, ...]) -> SkillBundle:
    data = _parse_json(text, MANIFEST_NAME)
    return SkillBundle(manifest=validate_manifest(data, approval_required=approval,
                                                  python_allowlist=allowlist))


def _from_path(path: Path, approval: frozenset[str], allowlist: tuple[str, ...]) -> SkillBundle:
    try:
        if path.is_dir():
            return _bundle(_read_folder(path), approval, allowlist)
        if not path.is_file():
            raise _invalid([Issue("manifest", f"{str(path)[:200]!r} is not JSON and no such file or "
                                              "folder exists")])
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = handle.read(4)
        if _is_zip(head) or path.suffix.lower() == ".zip":
            if size > MAX_ARCHIVE_BYTES:
                raise _invalid([Issue("bundle", f"the zip is {size} bytes; at most {MAX_ARCHIVE_BYTES} allowed")])
            return _bundle(_read_zip(path.read_bytes()), approval, allowlist)
        if size > MAX_FILE_BYTES:
            raise _invalid([Issue(MANIFEST_NAME, f"{size} bytes; a manifest is at most {MAX_FILE_BYTES}")])
        data = _parse_json(_decode(path.read_bytes(), MANIFEST_NAME), MANIFEST_NAME)
        files = _sibling_entry(path.parent, data)
        return SkillBundle(manifest=validate_manifest(
            data, approval_required=approval, python_allowlist=allowlist,
            bundle_files=files)) if files is None else _bundle(files, approval, allowlist)
    except OSError as exc:
        raise _invalid([Issue("manifest", f"cannot read {str(path)[:200]!r}: {exc.strerror or exc}")]) from None
    except ValueError as exc:  # e.g. a NUL byte in the path
        raise _invalid([Issue("manifest", f"not a usable path: {exc}")]) from None


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


# --- export ---------------------------------------------------------------------------------

def manifest_json(manifest: SkillManifest) -> str:
    """The manifest as pretty JSON (normalized schemas, unknown keys kept)."""
    return json.dumps(manifest.to_dict(), indent=2, ensure_ascii=False) + "\n"


_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def bundle_zip(manifest: SkillManifest, files: Mapping[str, bytes | str] | None = None) -> bytes:
    """A deterministic zip: manifest.json plus ``files`` (names checked like on import)."""
    issues = [Issue("bundle", f"entry {name!r}: {problem}")
              for name in (files or {}) if (problem := bundle_path_problem(name)) is not None]
    if issues:
        raise _invalid(issues)
    contents: dict[str, bytes] = {name: value.encode("utf-8") if isinstance(value, str) else value
                                  for name, value in (files or {}).items() if name != MANIFEST_NAME}
    contents[MANIFEST_NAME] = manifest_json(manifest).encode("utf-8")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(contents):
            info = zipfile.ZipInfo(str(PurePosixPath(name)), date_time=_ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, contents[name])
    return buffer.getvalue()
