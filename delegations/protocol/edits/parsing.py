"""Reading edits out of a model's text: unified diff file sections and Targeted Replace
Blocks, with the forgiving reading model-written diffs need (see the package's docstring).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ErrorCode, Issue, ProtocolError

DEV_NULL = "/dev/null"

_HUNK_HEADER = re.compile(r"^@@\s*-(\d+)(?:,(\d+))?\s+\+(\d+)(?:,(\d+))?\s*(?:@@(.*))?$")
_NUMBERED_HUNK = re.compile(r"^@@\s*-\d")
_FILE_LINE = re.compile(r"^\s*(?:\*\*)?FILE:(?:\*\*)?\s*(.*?)\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


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


def invalid_edit(message: str, issues: list[Issue] | None = None, **details: Any) -> ProtocolError:
    """The refusal of an edit that cannot be read or applied (``ERR_INVALID_EDIT``)."""
    return ProtocolError(ErrorCode.INVALID_EDIT, message, issues=issues, details=details)


def quoted_line(line: str, limit: int = 80) -> str:
    """A line of a file or an edit as a message quotes it: in quotes, cut at ``limit``."""
    return repr(line if len(line) <= limit else line[:limit] + "…")


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
                raise invalid_edit(
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
            raise invalid_edit(f"Line {header_line}: a diff goes from /dev/null to /dev/null; "
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
            raise invalid_edit(f"The diff for {new_path} (line {header_line}) has no hunks; "
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
            raise invalid_edit(f"Hunk {number} of {path}: cannot read the header {quoted_line(header)}; "
                           f"expected '@@ -start,count +start,count @@'.")
        self.pos += 1
        body, old_nl, new_nl = self._hunk_body(old_need, new_need)
        if not body:
            raise invalid_edit(f"Hunk {number} of {path} ({header}) has no lines.")
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
            raise invalid_edit(f"Line {start_line}: REPLACE_START has no 'FILE: path' line before "
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
        raise invalid_edit(f"The replace block for {path} starting at line {start_line} has no "
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

