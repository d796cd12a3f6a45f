"""A skill's entry point (instruction file, ``python:module:callable`` or script name) and
the rule for safe paths inside a bundle, which entry points and zip entries share."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

INSTRUCTION_SUFFIXES = (".md", ".txt")


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
