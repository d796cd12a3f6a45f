"""Applying parsed edits to a workspace, all or nothing: every new content is computed
and checked in memory first, each failure reported with the edit it came from, and only
then are the files written (:func:`.files.write_files`)."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ErrorCode, Issue, ProtocolError
from .files import FileState, load_file, write_files
from .parsing import DEV_NULL, Edit, FileDiff, ReplaceBlock, invalid_edit, parse_edits, quoted_line

NO_NEWLINE_MARKER = "\\ No newline at end of file"


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
            return (f"the diff expects line {line_no} to be {quoted_line(want)} but the file has only "
                    f"{len(lines)} lines")
        if lines[at + i].rstrip() != want.rstrip():
            return (f"line {line_no} of the file is {quoted_line(lines[at + i])} but the diff "
                    f"expects {quoted_line(want)}")
    return f"its lines are not found from line {at + 1} on"


def _apply_hunks(state: FileState, edit: FileDiff) -> None:
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


def _apply_diff(state: FileState, edit: FileDiff, allow_delete: bool) -> None:
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


def _apply_replace(state: FileState, edit: ReplaceBlock) -> None:
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
        return f"its first line {quoted_line(block[0])} is not in the file"
    at = starts[0]
    for i, want in enumerate(block):
        if at + i >= len(lines):
            return f"it starts at line {at + 1} but the file ends before its line {i + 1}"
        if lines[at + i].rstrip() != want.rstrip():
            return (f"it starts at line {at + 1} but line {at + i + 1} of the file is "
                    f"{quoted_line(lines[at + i])} where the snippet has {quoted_line(want)}")
    return f"it starts at line {at + 1}"


def _lines_with_ends(text: str) -> list[str]:
    # Not str.splitlines(): it also breaks at form feeds and other separators, which are
    # ordinary characters inside a line as far as diffs are concerned.
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _unified(state: FileState) -> str:
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
        raise invalid_edit(f"The workspace folder {workspace} does not exist.")
    states: dict[Path, FileState] = {}
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
        raise invalid_edit(message, issues)
    ordered = list(states.values())
    outcomes = [EditOutcome(path=state.rel, diff=_unified(state), created=state.created,
                            deleted=state.deleted) for state in ordered]
    if not dry_run:
        write_files([state for state, outcome in zip(ordered, outcomes, strict=True)
                 if outcome.changed])
    return outcomes


def _state_for(workspace: Path, edit: Edit, states: dict[Path, FileState]) -> FileState:
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
        state = load_file(workspace, resolved, rel)
        states[resolved] = state
    return state
