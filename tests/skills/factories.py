"""Manifests, bundles and stored skills for the registry's tests (skills, API, browser)."""

from __future__ import annotations

import copy
import io
import json
import zipfile
from typing import Any

from skills.models import Skill, SkillSource
from skills.services import skill_import

# The hand-off protocol's "Skill Packaging" manifest, verbatim (its skill_name spelling
# included), from the shared protocol examples; re-exported for the registry's tests.
from tests.protocol.protocol_examples import HANDOFF_MANIFEST

__all__ = ["HANDOFF_MANIFEST", "INSTRUCTIONS", "add_skill", "bundle", "manifest", "zip_bytes"]

INSTRUCTIONS = "# Price research\n\nFind the current price and its currency.\n"


def manifest(name: str = "price-check", version: str = "1.0.0", **overrides: Any) -> dict[str, Any]:
    """A valid manifest (the research skill of the hand-off protocol's example 1) with
    ``overrides`` applied; an override of None removes the key."""
    data: dict[str, Any] = {
        "skill_name": name,
        "version": version,
        "entry_point": "instructions.md",
        "description": "Looks up the current price of an asset and returns it with its currency.",
        "subagent_type": "researcher",
        "input_schema": {"query": "string", "sources": ["string"]},
        "output_schema": {"price": "number", "currency": "string"},
        "capabilities": ["search"],
        "requires_approval": False,
        "tags": ["finance", "market-data"],
    }
    for key, value in overrides.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = copy.deepcopy(value)
    return data


def zip_bytes(files: dict[str, bytes | str], *, compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def bundle(data: dict[str, Any] | None = None, instructions: str = INSTRUCTIONS,
           extra: dict[str, bytes | str] | None = None) -> bytes:
    """A zip bundle: manifest.json plus its instruction file (plus ``extra`` files)."""
    data = data or manifest()
    return zip_bytes({"manifest.json": json.dumps(data), data["entry_point"]: instructions,
                      **(extra or {})})


def add_skill(name: str = "price-check", version: str = "1.0.0", *, created_by: Any = None,
              source: str = SkillSource.API, **overrides: Any) -> Skill:
    """Store a skill through the real import path."""
    return skill_import(source=manifest(name, version, **overrides), origin=source,
                        created_by=created_by).skill
