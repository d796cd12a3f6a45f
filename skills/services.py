"""Importing skills: every way in (browser, API, command, built-ins) ends in :func:`skill_import`.

The protocol core validates (:func:`delegations.protocol.manifest.load_bundle`), so the
browser, the API and the command line accept and refuse exactly the same manifests with
the same messages. This module adds what only the registry knows: the upload size limit,
what the database can store, and immutable versions (the same ``name@version`` again is a
no-op when identical and a conflict otherwise). A refused import writes nothing.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from delegations.protocol.errors import ErrorCode, Issue, ProtocolError
from delegations.protocol.manifest import (
    MANIFEST_NAME,
    EntryPointKind,
    SemVer,
    SkillBundle,
    load_bundle,
)

from .models import Skill, SkillCapability, SkillFile, SkillTag, extra_files

# Column sizes of the registry's tables (the protocol does not bound these).
_MAX_VERSION = 128
_MAX_LABEL = 100
_MAX_PATH = 255
_MAX_COMPONENT = 2**63 - 1

BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"


class RegistryErrorCode(StrEnum):
    CONFLICT = "conflict"      # same name@version, different content
    TOO_LARGE = "too_large"    # over HANDOFF_SKILL_UPLOAD_LIMIT_BYTES


class RegistryError(Exception):
    """An import the registry refuses although the manifest itself is valid (or could not
    be read because it is too big). Invalid manifests raise the protocol's ProtocolError."""

    def __init__(self, code: RegistryErrorCode, message: str, *,
                 existing: Skill | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.existing = existing


@dataclass(frozen=True, slots=True)
class ImportResult:
    skill: Skill
    created: bool                      # False: this exact version was already there
    warnings: list[str] = field(default_factory=list)


def upload_limit() -> int:
    return int(settings.HANDOFF_SKILL_UPLOAD_LIMIT_BYTES)


def _size_text(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB" if size >= 1024 * 1024 else f"{size / 1024:.0f} KB"


def check_upload_size(size: int, what: str = "the upload") -> None:
    """RegistryError(TOO_LARGE) when ``size`` bytes is over the upload limit."""
    limit = upload_limit()
    if size > limit:
        raise RegistryError(RegistryErrorCode.TOO_LARGE,
                            f"{what} is {_size_text(size)}; skills are at most {_size_text(limit)} "
                            "(HANDOFF_SKILL_UPLOAD_LIMIT_BYTES). Move large data out of the "
                            "bundle and reference it by path or URL instead.")


def _source_size(source: str | bytes | dict[str, Any] | Path) -> int | None:
    if isinstance(source, bytes | bytearray):
        return len(source)
    if isinstance(source, str):
        return len(source.encode("utf-8"))
    if isinstance(source, Path) and source.is_file():
        return source.stat().st_size
    return None  # dicts were already parsed; folders are limited by the protocol's bundle limits


def _raw_manifest(source: str | bytes | dict[str, Any] | Path, bundle: SkillBundle) -> str:
    """manifest.json as it was submitted, for the record and the admin."""
    if isinstance(source, str | bytes | bytearray) and MANIFEST_NAME not in bundle.files:
        return source if isinstance(source, str) else bytes(source).decode("utf-8-sig", "replace")
    if isinstance(source, dict):
        return json.dumps(source, indent=2, ensure_ascii=False)
    if isinstance(source, Path) and source.is_file() and not zipfile.is_zipfile(source):
        return source.read_text("utf-8-sig", errors="replace")
    return bundle.files.get(MANIFEST_NAME, b"").decode("utf-8-sig", errors="replace")


def _storage_issues(bundle: SkillBundle) -> list[Issue]:
    """What a valid manifest may still hold that the registry's columns cannot store."""
    manifest = bundle.manifest
    issues: list[Issue] = []
    if len(manifest.version) > _MAX_VERSION:
        issues.append(Issue("version", f"at most {_MAX_VERSION} characters"))
    semver = manifest.semver
    if max(semver.major, semver.minor, semver.patch) > _MAX_COMPONENT:
        issues.append(Issue("version", f"version numbers above {_MAX_COMPONENT} are not supported"))
    if len(manifest.entry_point) > _MAX_PATH:
        issues.append(Issue("entry_point", f"at most {_MAX_PATH} characters"))
    for list_name, values in (("capabilities", manifest.capabilities), ("tags", manifest.tags)):
        issues.extend(Issue(f"{list_name}[{index}]", f"at most {_MAX_LABEL} characters")
                      for index, value in enumerate(values) if len(value) > _MAX_LABEL)
    issues.extend(Issue("bundle", f"file name {path[:60]!r}… is longer than {_MAX_PATH} characters")
                  for path in extra_files(bundle) if len(path) > _MAX_PATH)
    return issues


def import_warnings(bundle: SkillBundle) -> list[str]:
    """The protocol's warnings, plus one when the instruction file was left behind: a bare
    manifest.json names its entry point's file but cannot carry it."""
    warnings = list(bundle.manifest.warnings)
    manifest = bundle.manifest
    if (manifest.entry.kind is EntryPointKind.INSTRUCTIONS and bundle.instructions is None
            and not manifest.instructions):
        warnings.append(f"{manifest.entry_point} was not part of this import (only manifest.json "
                        "was given), so the skill has no instruction text; import the bundle "
                        "(a .zip or folder with both files) under a new version to include it")
    return warnings


def next_version_hint(name: str, conflicting: str) -> str:
    """A version to suggest instead of ``conflicting``: the next patch after the highest
    version of ``name`` already in the registry."""
    versions = [SemVer.parse(row.version) for row in Skill.objects.versions_of(name)]
    highest = max([SemVer.parse(conflicting), *versions])
    return f"{highest.major}.{highest.minor}.{highest.patch + 1}"


def _conflict(existing: Skill) -> RegistryError:
    hint = next_version_hint(existing.name, existing.version)
    return RegistryError(
        RegistryErrorCode.CONFLICT,
        f"{existing.ref} is already in the registry with different content. Published versions "
        f"never change: give this one a new version (e.g. \"version\": \"{hint}\") and import "
        "it again.", existing=existing)


def skill_import(*, source: str | bytes | dict[str, Any] | Path, origin: str,
                 created_by: Any = None) -> ImportResult:
    """Validate and store a manifest or bundle: JSON text or bytes, a dict, a manifest.json
    path, a bundle folder, or a zip (path or bytes).

    Raises ProtocolError(ERR_INVALID_MANIFEST) listing every problem, or RegistryError
    (too large; same version with different content). Nothing is written unless all is well.
    """
    size = _source_size(source)
    if size is not None:
        check_upload_size(size)
    bundle = load_bundle(source, approval_required=settings.HANDOFF_APPROVAL_REQUIRED_CAPABILITIES,
                         python_allowlist=settings.HANDOFF_PYTHON_SKILL_ALLOWLIST)
    issues = _storage_issues(bundle)
    if issues:
        raise ProtocolError(ErrorCode.INVALID_MANIFEST,
                            f"the skill manifest cannot be stored: {issues[0].field}: "
                            f"{issues[0].message}", issues=issues)
    warnings = import_warnings(bundle)
    skill = Skill.from_bundle(bundle, raw_manifest=_raw_manifest(source, bundle), source=origin,
                              created_by=created_by if getattr(created_by, "pk", None) else None,
                              warnings=warnings)
    try:
        return _store(skill, bundle)
    except IntegrityError:
        # Someone stored the same name@version between our check and our insert.
        existing = Skill.objects.filter(name=skill.name, version=skill.version).first()
        if existing is None:
            raise
        if existing.content_hash == skill.content_hash:
            return ImportResult(existing, created=False, warnings=warnings)
        raise _conflict(existing) from None


def _store(skill: Skill, bundle: SkillBundle) -> ImportResult:
    warnings = list(skill.warnings)
    with transaction.atomic():
        existing = (Skill.objects.select_for_update()
                    .filter(name=skill.name, version=skill.version).first())
        if existing is not None:
            if existing.content_hash == skill.content_hash:
                return ImportResult(existing, created=False, warnings=warnings)
            raise _conflict(existing)
        skill.save()
        SkillFile.objects.bulk_create(
            SkillFile(skill=skill, path=path, content=data, size=len(data))
            for path, data in sorted(extra_files(bundle).items()))
        SkillCapability.objects.bulk_create(
            SkillCapability(skill=skill, name=name) for name in dict.fromkeys(skill.capabilities))
        SkillTag.objects.bulk_create(SkillTag(skill=skill, name=name)
                                     for name in dict.fromkeys(skill.tags))
        Skill.objects.refresh_latest(skill.name)
        skill.refresh_from_db(fields=["is_latest"])
    return ImportResult(skill, created=True, warnings=warnings)


def skill_delete(*, skill: Skill) -> None:
    """Remove one version; the skill's latest version is recomputed."""
    with transaction.atomic():
        name = skill.name
        skill.delete()
        Skill.objects.refresh_latest(name)


# -- many at once: the import_skills and load_builtin_skills commands ----------------------

@dataclass(slots=True)
class ImportReport:
    added: list[tuple[Path, Skill]] = field(default_factory=list)
    skipped: list[tuple[Path, Skill]] = field(default_factory=list)
    rejected: list[tuple[Path, list[str]]] = field(default_factory=list)
    # Same name@version already there with other content: refused like a rejection, but
    # the built-in loader only warns (the registry's copy is kept).
    conflicts: list[tuple[Path, str]] = field(default_factory=list)
    warnings: list[tuple[Path, str]] = field(default_factory=list)


def skill_sources_in(path: Path) -> list[Path]:
    """What to import from ``path``: itself when it is a manifest file, a zip or a bundle
    folder (one with manifest.json); otherwise every such thing inside it, recursively."""
    if path.is_file() or (path.is_dir() and (path / MANIFEST_NAME).is_file()):
        return [path]
    if not path.is_dir():
        return [path]  # reported as unreadable by the import itself
    found: list[Path] = []
    for child in sorted(path.iterdir()):
        if child.name.startswith("."):
            continue
        if child.is_dir():
            found.extend(skill_sources_in(child))
        elif child.suffix.lower() in (".json", ".zip"):
            found.append(child)
    return found


def _problems(error: ProtocolError) -> list[str]:
    if error.issues:
        return [f"{issue.field}: {issue.message}" for issue in error.issues]
    return [error.message]


def skill_import_paths(*, paths: Iterable[Path], origin: str, created_by: Any = None
                       ) -> ImportReport:
    """Import every manifest, bundle folder and zip under ``paths``; each one on its own
    (one bad file does not stop the others, and is never half-imported)."""
    report = ImportReport()
    for root in paths:
        sources = skill_sources_in(root)
        if not sources:
            report.rejected.append((root, ["no manifest.json, bundle folder or .zip found here"]))
        for source in sources:
            try:
                result = skill_import(source=source, origin=origin, created_by=created_by)
            except RegistryError as error:
                if error.code is RegistryErrorCode.CONFLICT:
                    report.conflicts.append((source, error.message))
                else:
                    report.rejected.append((source, [error.message]))
                continue
            except ProtocolError as error:
                report.rejected.append((source, _problems(error)))
                continue
            (report.added if result.created else report.skipped).append((source, result.skill))
            report.warnings.extend((source, warning) for warning in result.warnings)
    return report
