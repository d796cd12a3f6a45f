"""Export: a manifest as pretty JSON, a bundle as a deterministic zip that import reads back."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping
from pathlib import PurePosixPath

from ..errors import Issue
from .entry_points import bundle_path_problem
from .model import SkillManifest, invalid_manifest
from .sources import MANIFEST_NAME


def manifest_json(manifest: SkillManifest) -> str:
    """The manifest as pretty JSON (normalized schemas, unknown keys kept)."""
    return json.dumps(manifest.to_dict(), indent=2, ensure_ascii=False) + "\n"


_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def bundle_zip(manifest: SkillManifest, files: Mapping[str, bytes | str] | None = None) -> bytes:
    """A deterministic zip: manifest.json plus ``files`` (names checked like on import)."""
    issues = [Issue("bundle", f"entry {name!r}: {problem}")
              for name in (files or {}) if (problem := bundle_path_problem(name)) is not None]
    if issues:
        raise invalid_manifest(issues)
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
