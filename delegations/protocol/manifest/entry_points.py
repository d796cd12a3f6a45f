"""A skill's entry point (instruction file, ``python:module:callable`` or script name) and
the rule for safe paths inside a bundle, which entry points and zip entries share."""

from __future__ import annotations

import re
import unicodedata
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


# hidden version-control folders: a bundle unpacked into a checkout must not plant a hook
VCS_FOLDERS = frozenset({".git", ".hg", ".svn", ".bzr"})
# control characters, and the invisible ones that make a name read as another (U+202E)
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
BUNDLE_NAMES = ("a file name in a bundle is a relative path such as docs/notes.md, of ordinary "
                "characters with '/' between folders: no NUL or control characters, backslashes, "
                "leading '/', drive letters, '..', '.' or empty parts, or version-control folders "
                f"({', '.join(sorted(VCS_FOLDERS))}); rename the file or leave it out of the bundle")


def bundle_path_problem(name: str) -> str | None:
    """Why ``name`` is not a safe relative path inside a bundle, followed by what names are
    allowed; None when it is safe. The one rule for every name a bundle brings: zip entries,
    files of a bundle folder, entry points and exported files."""
    problem = _unsafe_name(name)
    return None if problem is None else f"{problem}; {BUNDLE_NAMES}"


def _unsafe_name(name: str) -> str | None:
    if not name:
        return "the name is empty"
    if "\x00" in name:
        return "it holds a NUL byte"
    unprintable = next((char for char in name if unicodedata.category(char) in _UNPRINTABLE), None)
    if unprintable is not None:
        return f"it holds the control character U+{ord(unprintable):04X}"
    if "\\" in name:
        return "backslashes are not allowed (use '/')"
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return "absolute paths are not allowed"
    parts = name.split("/")
    if ".." in parts:
        return "'..' would leave the bundle"
    if any(part in ("", ".") for part in parts):
        return "empty and '.' parts are not allowed"
    if any(part.lower() in VCS_FOLDERS for part in parts):
        return "version-control folders are not allowed"
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
    path = text.removeprefix("./")   # "./notes.md" names notes.md
    problem = bundle_path_problem(path)
    if problem is not None:
        raise ValueError(f"{raw!r}: {problem}")
    if not _FILE_NAME.match(text):
        raise ValueError(f"{raw!r}: expected an instruction file (.md or .txt) in the bundle, "
                         "python:module:callable, or a script file name")
    kind = (EntryPointKind.INSTRUCTIONS if text.lower().endswith(INSTRUCTION_SUFFIXES)
            else EntryPointKind.SCRIPT)
    return EntryPoint(kind, text, path=path)


def module_allowed(module: str, allowlist: Iterable[str]) -> bool:
    """Exact module or a package that contains it ("skills" allows "skills.pricing")."""
    return any(module == allowed or module.startswith(allowed + ".") for allowed in allowlist)
