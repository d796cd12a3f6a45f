"""The hand-off protocol's file edit format: unified diffs and Targeted Replace Blocks, parsed and applied.

A subagent edits files by returning either a unified diff or one or more blocks::

    FILE: /abs/or/relative/path.py
    REPLACE_START
    <original snippet>
    REPLACE_WITH
    <new snippet>
    REPLACE_END

:func:`parse_edits` finds every diff and block in a text (prose and code fences around
them are ignored). :func:`apply_edits` applies them all or nothing: every new file content
is computed and checked in memory first, then written (each file atomically through a
temporary file and ``os.replace``); if a write fails part-way, the files already written
are restored. Paths must stay inside the workspace root, symlinks included.

Model-written diffs often have wrong line counts or stripped trailing whitespace, so the
parser takes hunk bodies as written when the counts disagree, hunks may sit at an offset
from their stated line, and context lines match ignoring trailing whitespace when an
exact match fails. A hunk or snippet that matches nowhere, or matches several places, is
refused with a message naming the path, the hunk or snippet, and the line.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .errors import ErrorCode, Issue, ProtocolError

DEV_NULL = "/dev/null"
NO_NEWLINE_MARKER = "\\ No newline at end of file"

_HUNK_HEADER = re.compile(r"^@@\s*-(\d+)(?:,(\d+))?\s+\+(\d+)(?:,(\d+))?\s*(?:@@(.*))?$")
_NUMBERED_HUNK = re.compile(r"^@@\s*-\d")
_FILE_LINE = re.compile(r"^\s*(?:\*\*)?FILE:(?:\*\*)?\s*(.*?)\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_BOM = "\ufeff"
_NEW_FILE_MODE = 0o644


# -- edits ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Hunk:
    """One ``@@`` hunk. ``old_start`` is ``None`` for a bare ``@@`` header (no line numbers):
    such a hunk is placed where its context matches, which must be exactly one place."""

    old_start: int | None
    old_count: int
    new_start: int | None
    new_count: int
    lines: tuple[tuple[str, str], ...]  # (" " | "-" | "+", text without the line ending)
    header: str
    old_no_newline: bool = False  # "\ No newline at end of file" after the last old-side line
    new_no_newline: bool = False  # ... after the last new-side line

    @property
    def old_lines(self) -> list[str]:
        return [text for op, text in self.lines if op != "+"]

    @property
    def new_lines(self) -> list[str]:
        return [text for op, text in self.lines if op != "-"]


@dataclass(frozen=True, slots=True)
class FileDiff:
    """The unified diff of one file. ``old_path``/``new_path`` are ``None`` for /dev/null."""

    old_path: str | None
    new_path: str | None
    hunks: tuple[Hunk, ...]
    kind: Literal["diff"] = "diff"

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""

    @property
    def creates(self) -> bool:
        return self.old_path is None

    @property
    def deletes(self) -> bool:
        return self.new_path is None


@dataclass(frozen=True, slots=True)
class ReplaceBlock:
    """A Targeted Replace Block (the hand-off protocol). An empty ``original`` creates a new file."""

    path: str
    original: str
    replacement: str
    kind: Literal["replace"] = "replace"


Edit = FileDiff | ReplaceBlock


@dataclass(frozen=True, slots=True)
class EditOutcome:
    """What applying the edits did (or, on a dry run, would do) to one file."""

    path: str      # relative to the workspace root, "/"-separated
    diff: str      # unified diff of the whole change to this file
    created: bool = False
    deleted: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.diff) or self.created or self.deleted

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "diff": self.diff, "created": self.created,
                "deleted": self.deleted}


def _invalid(message: str, issues: list[Issue] | None = None, **details: Any) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_EDIT, message, issues=issues, details=details)


def _show(line: str, limit: int = 80) -> str:
    return repr(line if len(line) <= limit else line[:limit] + "…")


# -- parsing ----------------------------------------------------------------------------

def parse_edits(text: str) -> list[Edit]:
    """Every unified diff file section and Targeted Replace Block in ``text``, in order.

    Text around them (prose, code fences) is ignored; a text with no edits gives ``[]``.
    Raises ``ProtocolError(ERR_INVALID_EDIT)`` for an edit that starts but is broken
    (a replace block without REPLACE_WITH/REPLACE_END, a hunk without file headers).
    """
    lines = text.replace("\r\n", "\n").split("\n")
    return _Parser(lines).parse()


@dataclass(slots=True)
class _Parser:
    lines: list[str]
    pos: int = 0
    edits: list[Edit] = field(default_factory=list)
    current_file: str | None = None

    def parse(self) -> list[Edit]:
        lines = self.lines
        while self.pos < len(lines):
            line = lines[self.pos]
            if self._at_file_header(self.pos):
                self.edits.append(self._file_diff())
            elif line.strip() == "REPLACE_START":
                self.edits.append(self._replace_block())
            elif (match := _FILE_LINE.match(line)) is not None:
                self.current_file = _clean_path(match.group(1)) or None
                self.pos += 1
            elif _HUNK_HEADER.match(line):
                raise _invalid(
                    f"Line {self.pos + 1}: a hunk header ({line.strip()}) has no '--- a/path' "
                    f"and '+++ b/path' lines before it, so it is not known which file it edits.")
            else:
                self.pos += 1
        return self.edits

    def _at_file_header(self, index: int) -> bool:
        lines = self.lines
        return (lines[index].startswith("--- ") and index + 1 < len(lines)
                and lines[index + 1].startswith("+++ "))

    # unified diff

    def _file_diff(self) -> FileDiff:
        old_raw = _header_path(self.lines[self.pos][4:])
        new_raw = _header_path(self.lines[self.pos + 1][4:])
        header_line = self.pos + 1
        self.pos += 2
        old_path, new_path = _strip_git_prefixes(old_raw, new_raw)
        if old_path is None and new_path is None:
            raise _invalid(f"Line {header_line}: a diff goes from /dev/null to /dev/null; "
                           f"name the file in the '---' or '+++' line.")
        hunks: list[Hunk] = []
        while True:
            start = self.pos
            while self.pos < len(self.lines) and not self.lines[self.pos].strip():
                self.pos += 1  # blank lines between hunks
            if self.pos < len(self.lines) and self.lines[self.pos].startswith("@@"):
                hunks.append(self._hunk(new_path or old_path or "", len(hunks) + 1))
            else:
                self.pos = start
                break
        if not hunks and old_path is not None and new_path is not None:
            raise _invalid(f"The diff for {new_path} (line {header_line}) has no hunks; "
                           f"add '@@ -start,count +start,count @@' sections with the changes.")
        return FileDiff(old_path=old_path, new_path=new_path, hunks=tuple(hunks))

    def _hunk(self, path: str, number: int) -> Hunk:
        header = self.lines[self.pos].rstrip()
        match = _HUNK_HEADER.match(header)
        if match:
            old_start: int | None = int(match.group(1))
            old_need: int | None = int(match.group(2)) if match.group(2) is not None else 1
            new_start: int | None = int(match.group(3))
            new_need: int | None = int(match.group(4)) if match.group(4) is not None else 1
        elif not _NUMBERED_HUNK.match(header):
            # A bare "@@" (some models write no numbers): place the hunk by its context.
            old_start = old_need = new_start = new_need = None
        else:
            raise _invalid(f"Hunk {number} of {path}: cannot read the header {_show(header)}; "
                           f"expected '@@ -start,count +start,count @@'.")
        self.pos += 1
        body, old_nl, new_nl = self._hunk_body(old_need, new_need)
        if not body:
            raise _invalid(f"Hunk {number} of {path} ({header}) has no lines.")
        old_count = sum(1 for op, _ in body if op != "+")
        new_count = sum(1 for op, _ in body if op != "-")
        return Hunk(old_start=old_start, old_count=old_count, new_start=new_start,
                    new_count=new_count, lines=tuple(body), header=header,
                    old_no_newline=old_nl, new_no_newline=new_nl)

    def _hunk_body(self, old_need: int | None, new_need: int | None
                   ) -> tuple[list[tuple[str, str]], bool, bool]:
        lines = self.lines
        body: list[tuple[str, str]] = []
        old_seen = new_seen = 0
        old_no_newline = new_no_newline = False
        counted = old_need is not None and new_need is not None
        while self.pos < len(lines):
            line = lines[self.pos]
            satisfied = counted and old_seen >= (old_need or 0) and new_seen >= (new_need or 0)
            if line.startswith("\\"):
                if body:
                    last_op = body[-1][0]
                    old_no_newline = old_no_newline or last_op in " -"
                    new_no_newline = new_no_newline or last_op in " +"
                self.pos += 1
                continue
            if line.startswith("@@"):
                break
            # While the header's counts still expect lines, "--- x" is a removed "-- x" line,
            # not the next file's header.
            if (satisfied or not counted) and (
                    self._at_file_header(self.pos) or line.startswith("diff --git ")):
                break
            if line == "":
                # An empty line inside a hunk is usually a context line whose single space
                # an editor stripped; after the hunk it separates the diff from prose.
                if satisfied or not (self._hunk_line_follows(self._skip_blank(self.pos)) or (
                        counted and (old_need or 0) - old_seen == 1
                        and (new_need or 0) - new_seen == 1)):
                    break
                body.append((" ", ""))
                old_seen += 1
                new_seen += 1
                self.pos += 1
                continue
            op = line[0]
            if op not in " +-":
                break
            # Past the stated counts, further hunk lines are still taken: models often
            # under-count. A bare "@@" hunk has no counts and ends at the first other line.
            body.append((op, line[1:]))
            old_seen += op != "+"
            new_seen += op != "-"
            self.pos += 1
        return body, old_no_newline, new_no_newline

    def _skip_blank(self, index: int) -> int:
        while index < len(self.lines) and self.lines[index] == "":
            index += 1
        return index

    def _hunk_line_follows(self, index: int) -> bool:
        if index >= len(self.lines):
            return False
        line = self.lines[index]
        return bool(line) and line[0] in " +-\\" and not self._at_file_header(index)

    # targeted replace blocks

    def _replace_block(self) -> Edit:
        start_line = self.pos + 1
        path = self.current_file
        if not path:
            raise _invalid(f"Line {start_line}: REPLACE_START has no 'FILE: path' line before "
                           f"it; name the file the block edits.")
        self.pos += 1
        original = self._until("REPLACE_WITH", path, start_line)
        replacement = self._until("REPLACE_END", path, start_line)
        return ReplaceBlock(path=path, original=_snippet(original),
                            replacement=_snippet(replacement))

    def _until(self, marker: str, path: str, start_line: int) -> list[str]:
        collected: list[str] = []
        while self.pos < len(self.lines):
            line = self.lines[self.pos]
            stripped = line.strip()
            self.pos += 1
            if stripped == marker:
                return collected
            if stripped in ("REPLACE_START", "REPLACE_WITH", "REPLACE_END"):
                break
            collected.append(line)
        raise _invalid(f"The replace block for {path} starting at line {start_line} has no "
                       f"{marker} line; a block is REPLACE_START, the original snippet, "
                       f"REPLACE_WITH, the new snippet, REPLACE_END.")


def _snippet(lines: list[str]) -> str:
    # Models sometimes wrap each snippet in its own code fence.
    if len(lines) >= 2 and _FENCE.match(lines[0]) and lines[-1].strip() in ("```", "~~~"):
        lines = lines[1:-1]
    return "\n".join(lines)


def _clean_path(raw: str) -> str:
    path = raw.strip()
    # The protocol writes "FILE: [absolute_path]"; models copy the brackets, quotes or backticks.
    for left, right in (("[", "]"), ("`", "`"), ('"', '"'), ("'", "'")):
        if len(path) >= 2 and path.startswith(left) and path.endswith(right):
            path = path[1:-1].strip()
    return path


def _header_path(raw: str) -> str:
    # "--- a/x.py\t2024-01-01 10:00:00" : the timestamp follows a tab.
    return _clean_path(raw.split("\t", 1)[0])


def _strip_git_prefixes(old: str, new: str) -> tuple[str | None, str | None]:
    old_path = None if old == DEV_NULL else old
    new_path = None if new == DEV_NULL else new
    git_style = (old_path is None or old_path.startswith("a/")) and \
                (new_path is None or new_path.startswith("b/"))
    if git_style:
        old_path = old_path[2:] if old_path else None
        new_path = new_path[2:] if new_path else None
    return old_path, new_path


# -- applying ---------------------------------------------------------------------------

@dataclass(slots=True)
class _FileState:
    rel: str
    target: Path
    existed: bool
    original_bytes: bytes | None
    mode: int | None
    original_text: str | None  # normalized to "\n" line endings, without BOM
    text: str | None           # current content; None = absent
    eol: str = "\n"
    bom: bool = False
    failed: bool = False

    @property
    def created(self) -> bool:
        return not self.existed and self.text is not None

    @property
    def deleted(self) -> bool:
        return self.existed and self.text is None

    def encoded(self) -> bytes:
        text = self.text or ""
        if self.eol != "\n":
            text = text.replace("\n", self.eol)
        return ((_BOM if self.bom else "") + text).encode("utf-8")


def _resolve(root: Path, raw: str) -> tuple[Path, str]:
    if not raw:
        raise ValueError("the path is empty")
    if "\x00" in raw:
        raise ValueError("the path contains a NUL character")
    candidate = Path(raw)
    # resolve() follows symlinks (dangling ones too), so a link that leads out is caught.
    resolved = (candidate if candidate.is_absolute() else root / candidate).resolve()
    if not resolved.is_relative_to(root):
        if candidate.is_absolute():
            why = "it is an absolute path outside the workspace"
        elif ".." in candidate.parts:
            why = "its '..' parts lead outside the workspace"
        else:
            why = "it leads outside the workspace through a symlink"
        raise ValueError(f"{why}; edits may only touch files under {root}")
    if resolved == root:
        raise ValueError("it names the workspace folder itself, not a file")
    return resolved, resolved.relative_to(root).as_posix()


def _load(root: Path, resolved: Path, rel: str) -> _FileState:
    if not resolved.exists():
        for parent in resolved.parents:
            if parent == root or not parent.is_relative_to(root):
                break
            if parent.exists() and not parent.is_dir():
                raise ValueError(f"{parent.relative_to(root).as_posix()} is a file, so "
                                 f"{rel} cannot be created under it")
        return _FileState(rel=rel, target=resolved, existed=False, original_bytes=None,
                          mode=None, original_text=None, text=None)
    if not resolved.is_file():
        raise ValueError("it is not a regular file")
    data = resolved.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("it is not UTF-8 text; binary files cannot be edited") from None
    bom = text.startswith(_BOM)
    if bom:
        text = text[1:]
    eol = "\n"
    # Normalize to "\n" only when every line ending is CRLF, so writing back restores
    # the file's own endings exactly.
    if "\r\n" in text and text.count("\r\n") == text.count("\n"):
        eol = "\r\n"
        text = text.replace("\r\n", "\n")
    return _FileState(rel=rel, target=resolved, existed=True, original_bytes=data,
                      mode=stat.S_IMODE(resolved.stat().st_mode), original_text=text,
                      text=text, eol=eol, bom=bom)


def _split_lines(text: str) -> tuple[list[str], bool]:
    if not text:
        return [], False
    parts = text.split("\n")
    if parts[-1] == "":
        return parts[:-1], True
    return parts, False


def _join_lines(lines: list[str], final_newline: bool) -> str:
    if not lines:
        return ""
    return "\n".join(lines) + ("\n" if final_newline else "")


def _matches(lines: list[str], block: list[str], at: int, loose: bool) -> bool:
    if loose:
        return all(lines[at + i].rstrip() == want.rstrip() for i, want in enumerate(block))
    return lines[at:at + len(block)] == block


def _find_near(lines: list[str], block: list[str], expected: int, low: int) -> int | None:
    high = len(lines) - len(block)
    if high < low:
        return None
    expected = min(max(expected, low), high)
    for loose in (False, True):
        for distance in range(max(expected - low, high - expected) + 1):
            for at in (expected - distance, expected + distance):
                if low <= at <= high and _matches(lines, block, at, loose):
                    return at
    return None


def _find_all(lines: list[str], block: list[str], low: int) -> list[int]:
    for loose in (False, True):
        found = [at for at in range(low, len(lines) - len(block) + 1)
                 if _matches(lines, block, at, loose)]
        if found:
            return found
    return []


def _mismatch(lines: list[str], block: list[str], at: int) -> str:
    at = max(0, min(at, len(lines)))
    for i, want in enumerate(block):
        line_no = at + i + 1
        if at + i >= len(lines):
            return (f"the diff expects line {line_no} to be {_show(want)} but the file has only "
                    f"{len(lines)} lines")
        if lines[at + i].rstrip() != want.rstrip():
            return (f"line {line_no} of the file is {_show(lines[at + i])} but the diff "
                    f"expects {_show(want)}")
    return f"its lines are not found from line {at + 1} on"


def _apply_hunks(state: _FileState, edit: FileDiff) -> None:
    lines, final_newline = _split_lines(state.text or "")
    offset = 0
    low = 0
    for number, hunk in enumerate(edit.hunks, start=1):
        old = hunk.old_lines
        label = f"hunk {number} ({hunk.header})"
        if hunk.old_start is None:
            if not old:
                raise ValueError(f"{label} has no context or removed lines, so there is no way "
                                 f"to tell where it goes; give it line numbers")
            found = _find_all(lines, old, low)
            if len(found) > 1:
                raise ValueError(f"{label} matches {len(found)} places (lines "
                                 f"{', '.join(str(at + 1) for at in found[:5])}); add context "
                                 f"lines or line numbers so it matches exactly one")
            at: int | None = found[0] if found else None
            expected = low
        else:
            stated = hunk.old_start - 1 if hunk.old_count > 0 else hunk.old_start
            expected = stated + offset
            if old:
                at = _find_near(lines, old, expected, low)
            else:
                at = expected if low <= expected <= len(lines) else None
                if at is None:
                    raise ValueError(f"{label} inserts after line {hunk.old_start} but the file "
                                     f"has only {len(lines)} lines")
        if at is None:
            raise ValueError(f"{label} does not apply: {_mismatch(lines, old, expected)}. The "
                             f"file may differ from what the diff assumes; read it again and "
                             f"regenerate the diff")
        replaced: list[str] = []
        cursor = at
        for op, text in hunk.lines:
            if op == " ":
                replaced.append(lines[cursor])  # keep the file's own context line
                cursor += 1
            elif op == "-":
                cursor += 1
            else:
                replaced.append(text)
        reaches_end = at + len(old) == len(lines)
        lines[at:at + len(old)] = replaced
        if reaches_end:
            final_newline = not hunk.new_no_newline
        offset += (at - expected) + len(replaced) - len(old)
        low = at + len(replaced)
    state.text = _join_lines(lines, final_newline)


def _apply_diff(state: _FileState, edit: FileDiff, allow_delete: bool) -> None:
    if edit.creates:
        if state.text is not None:
            raise ValueError("the diff creates it (from /dev/null) but it already exists; "
                             "diff against the current content instead")
        state.text = ""
    elif state.text is None:
        raise ValueError("it does not exist; to create a file, diff from /dev/null")
    if edit.deletes and not allow_delete:
        raise PermissionError("deleting files needs the file_delete capability")
    _apply_hunks(state, edit)
    if edit.deletes:
        # Without hunks ("deleted file" with no lines shown) the intent is still clear.
        if state.text and edit.hunks:
            raise ValueError("the diff deletes it (to /dev/null) but does not remove all of "
                             "its lines; the file has more content than the diff shows")
        state.text = None


def _apply_replace(state: _FileState, edit: ReplaceBlock) -> None:
    original, replacement = edit.original, edit.replacement
    if not original.strip():
        if state.text is None or not state.text.strip():
            # An empty original on a missing (or empty) file writes the new snippet as it.
            state.text = replacement + ("\n" if replacement and not replacement.endswith("\n")
                                        else "")
            return
        raise ValueError("the original snippet is empty, so there is nothing to locate in "
                         "this non-empty file; copy the lines to replace into it")
    if state.text is None:
        raise ValueError("it does not exist; a Targeted Replace Block edits an existing "
                         "file (leave the original snippet empty to create one)")
    text = state.text
    starts = _occurrences(text, original)
    # Prefer whole-line matches: "A = 1" should edit the line "A = 1", not "AA = 10".
    whole = [at for at in starts if _whole_lines(text, at, at + len(original))]
    chosen = whole or starts
    if len(chosen) == 1:
        start, end = chosen[0], chosen[0] + len(original)
        if whole and not replacement and end < len(text) and text[end] == "\n":
            end += 1  # removing whole lines removes their line break too
        state.text = text[:start] + replacement + text[end:]
        return
    if len(chosen) > 1:
        raise ValueError(f"the original snippet appears {len(chosen)} times; include more "
                         f"surrounding lines so it matches exactly once")
    # Exact text not found: retry line by line ignoring trailing whitespace.
    lines, final_newline = _split_lines(text)
    block = original.split("\n")
    while block and not block[-1].strip():
        block.pop()
    found = _find_all(lines, block, 0) if block else []
    if len(found) > 1:
        raise ValueError(f"the original snippet appears {len(found)} times (ignoring trailing "
                         f"whitespace); include more surrounding lines so it matches once")
    if not found:
        raise ValueError(f"the original snippet was not found: {_locate_hint(lines, block)}; "
                         f"copy it exactly from the current file")
    at = found[0]
    lines[at:at + len(block)] = replacement.split("\n") if replacement else []
    state.text = _join_lines(lines, final_newline)


def _occurrences(text: str, snippet: str) -> list[int]:
    found: list[int] = []
    at = text.find(snippet)
    while at != -1:
        found.append(at)
        at = text.find(snippet, at + 1)
    return found


def _whole_lines(text: str, start: int, end: int) -> bool:
    starts_line = start == 0 or text[start - 1] == "\n"
    ends_line = end == len(text) or text[end] == "\n" or text[end - 1] == "\n"
    return starts_line and ends_line


def _locate_hint(lines: list[str], block: list[str]) -> str:
    first = block[0].strip()
    starts = [at for at, line in enumerate(lines) if line.strip() == first] if first else []
    if not starts:
        return f"its first line {_show(block[0])} is not in the file"
    at = starts[0]
    for i, want in enumerate(block):
        if at + i >= len(lines):
            return f"it starts at line {at + 1} but the file ends before its line {i + 1}"
        if lines[at + i].rstrip() != want.rstrip():
            return (f"it starts at line {at + 1} but line {at + i + 1} of the file is "
                    f"{_show(lines[at + i])} where the snippet has {_show(want)}")
    return f"it starts at line {at + 1}"


def _lines_with_ends(text: str) -> list[str]:
    # Not str.splitlines(): it also breaks at form feeds and other separators, which are
    # ordinary characters inside a line as far as diffs are concerned.
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _unified(state: _FileState) -> str:
    before = state.original_text if state.existed else None
    after = state.text
    if before == after:
        return ""
    diff = difflib.unified_diff(
        _lines_with_ends(before or ""), _lines_with_ends(after or ""),
        fromfile=f"a/{state.rel}" if before is not None else DEV_NULL,
        tofile=f"b/{state.rel}" if after is not None else DEV_NULL,
    )
    out: list[str] = []
    for line in diff:
        out.append(line)
        if not line.endswith("\n"):
            out.append("\n" + NO_NEWLINE_MARKER + "\n")
    return "".join(out)


def apply_edits(root: Path | str, edits: Sequence[Edit] | str, *, dry_run: bool = False,
                allow_delete: bool = True) -> list[EditOutcome]:
    """Apply ``edits`` (or the edits parsed from a text) under ``root``, all or nothing.

    Returns one :class:`EditOutcome` per file touched, in the order first touched. With
    ``dry_run`` nothing is written. Raises ``ProtocolError(ERR_INVALID_EDIT)`` listing
    every edit that cannot apply (nothing is written then), ``ERR_CONSTRAINT_VIOLATION``
    for a deletion when ``allow_delete`` is false, and ``ERR_TOOL_FAILURE`` if writing
    fails (the files already written are restored).
    """
    if isinstance(edits, str):
        edits = parse_edits(edits)
    workspace = Path(root).resolve()
    if not workspace.is_dir():
        raise _invalid(f"The workspace folder {workspace} does not exist.")
    states: dict[Path, _FileState] = {}
    issues: list[Issue] = []
    refused_deletes: list[str] = []
    for index, edit in enumerate(edits):
        where = f"edits[{index}]"
        try:
            state = _state_for(workspace, edit, states)
        except ValueError as exc:
            issues.append(Issue(where, f"{edit.path or '(no path)'}: {exc}"))
            continue
        if state.failed:
            continue  # its earlier edit failed; later ones would only report knock-on errors
        try:
            if isinstance(edit, FileDiff):
                _apply_diff(state, edit, allow_delete)
            else:
                _apply_replace(state, edit)
        except PermissionError as exc:
            state.failed = True
            refused_deletes.append(state.rel)
            issues.append(Issue(where, f"{state.rel}: {exc}"))
        except ValueError as exc:
            state.failed = True
            issues.append(Issue(where, f"{state.rel}: {exc}"))
    if refused_deletes and len(refused_deletes) == len(issues):
        raise ProtocolError(
            ErrorCode.CONSTRAINT_VIOLATION,
            f"The edits delete {', '.join(refused_deletes)}, which needs the file_delete "
            f"capability; nothing was changed.", issues=issues)
    if issues:
        head = issues[0].message
        message = (f"The edit cannot be applied; nothing was changed. {head}." if len(issues) == 1
                   else f"{len(issues)} edits cannot be applied; nothing was changed. "
                        f"First: {head}.")
        raise _invalid(message, issues)
    ordered = list(states.values())
    outcomes = [EditOutcome(path=state.rel, diff=_unified(state), created=state.created,
                            deleted=state.deleted) for state in ordered]
    if not dry_run:
        _commit([state for state, outcome in zip(ordered, outcomes, strict=True)
                 if outcome.changed])
    return outcomes


def _state_for(workspace: Path, edit: Edit, states: dict[Path, _FileState]) -> _FileState:
    raw = edit.path
    if isinstance(edit, FileDiff) and edit.old_path and edit.new_path \
            and edit.old_path != edit.new_path:
        # "--- x.py.orig / +++ x.py": edit whichever of the two exists (new name first),
        # like patch(1); renaming is not an edit this format expresses.
        for name in (edit.new_path, edit.old_path):
            resolved, _ = _resolve(workspace, name)
            if resolved in states or resolved.exists():
                raw = name
                break
    resolved, rel = _resolve(workspace, raw)
    state = states.get(resolved)
    if state is None:
        state = _load(workspace, resolved, rel)
        states[resolved] = state
    return state


# -- writing ----------------------------------------------------------------------------

@dataclass(slots=True)
class _Commit:
    made_dirs: list[Path] = field(default_factory=list)
    temps: dict[Path, Path] = field(default_factory=dict)
    done: list[_FileState] = field(default_factory=list)


def _temp_beside(target: Path, data: bytes, mode: int) -> Path:
    handle, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                    suffix=".tmp")
    temp = Path(name)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(temp, mode)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    return temp


def _make_parents(target: Path, made: list[Path]) -> None:
    missing = [parent for parent in target.parents if not parent.exists()]
    for parent in reversed(missing):
        parent.mkdir()
        made.append(parent)


def _commit(states: list[_FileState]) -> None:
    work = _Commit()
    current: _FileState | None = None
    try:
        # Stage every new content beside its target first: a full disk or a read-only
        # folder fails here, before any file has changed.
        for current in states:
            if current.text is not None:
                _make_parents(current.target, work.made_dirs)
                work.temps[current.target] = _temp_beside(
                    current.target, current.encoded(), current.mode or _NEW_FILE_MODE)
        for current in states:
            if current.text is None:
                current.target.unlink()
            else:
                os.replace(work.temps[current.target], current.target)
                del work.temps[current.target]
            work.done.append(current)
    except OSError as exc:
        _roll_back(work)
        name = current.rel if current is not None else "a file"
        restored = " The files already written were restored." if work.done else ""
        raise ProtocolError(
            ErrorCode.TOOL_FAILURE,
            f"Writing {name} failed ({exc.strerror or exc}); no edit was kept.{restored}",
            details={"path": name}) from exc


def _roll_back(work: _Commit) -> None:
    for state in reversed(work.done):
        with contextlib.suppress(OSError):
            if state.existed and state.original_bytes is not None:
                temp = _temp_beside(state.target, state.original_bytes,
                                    state.mode or _NEW_FILE_MODE)
                os.replace(temp, state.target)
            else:
                state.target.unlink()
    for temp in work.temps.values():
        with contextlib.suppress(OSError):
            temp.unlink()
    for folder in reversed(work.made_dirs):
        with contextlib.suppress(OSError):
            folder.rmdir()

