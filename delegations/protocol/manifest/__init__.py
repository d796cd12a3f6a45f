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
  valid draft 2020-12 JSON Schema (see :mod:`delegations.protocol.schemas`).
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
``..``, ``.`` or empty parts, absolute paths, backslashes, drive letters, NUL or control
characters, version-control folders (``.git``...) or symlinks (one rule,
:func:`bundle_path_problem`, for zip entries, folder files and entry points; a bundle
folder's own ``.git`` is left out). Nothing is written to disk.

The modules, each importing only those listed before it: :mod:`.versions` (semver),
:mod:`.entry_points` (entry points and safe bundle paths), :mod:`.model` (the field checks,
the model and validation), :mod:`.sources` (reading bundles, with the limits above) and
:mod:`.export` (JSON and zip).
"""

from .entry_points import (
    INSTRUCTION_SUFFIXES,
    EntryPoint,
    EntryPointKind,
    bundle_path_problem,
    module_allowed,
    parse_entry_point,
)
from .export import bundle_zip, manifest_json
from .model import (
    REQUIRED_FIELDS,
    SUBAGENT_TYPES,
    SkillBundle,
    SkillManifest,
    manifest_issues,
    validate_manifest,
)
from .sources import (
    MANIFEST_NAME,
    MAX_ARCHIVE_BYTES,
    MAX_BUNDLE_BYTES,
    MAX_BUNDLE_FILES,
    MAX_COMPRESSION_RATIO,
    MAX_FILE_BYTES,
    load_bundle,
    load_manifest,
)
from .versions import SemVer, latest_version

__all__ = [
    "INSTRUCTION_SUFFIXES",
    "MANIFEST_NAME",
    "MAX_ARCHIVE_BYTES",
    "MAX_BUNDLE_BYTES",
    "MAX_BUNDLE_FILES",
    "MAX_COMPRESSION_RATIO",
    "MAX_FILE_BYTES",
    "REQUIRED_FIELDS",
    "SUBAGENT_TYPES",
    "EntryPoint",
    "EntryPointKind",
    "SemVer",
    "SkillBundle",
    "SkillManifest",
    "bundle_path_problem",
    "bundle_zip",
    "latest_version",
    "load_bundle",
    "load_manifest",
    "manifest_issues",
    "manifest_json",
    "module_allowed",
    "parse_entry_point",
    "validate_manifest",
]
