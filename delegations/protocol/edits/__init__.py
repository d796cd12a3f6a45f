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

- ``parsing``: the edits a text holds (:class:`FileDiff`, :class:`ReplaceBlock`)
- ``applying``: applying them in memory, all or nothing, and what each file became
- ``files``: reading each file touched once, and writing them all atomically with roll-back
"""

from .applying import NO_NEWLINE_MARKER, EditOutcome, apply_edits
from .parsing import DEV_NULL, Edit, FileDiff, Hunk, ReplaceBlock, parse_edits

__all__ = ["DEV_NULL", "NO_NEWLINE_MARKER", "Edit", "EditOutcome", "FileDiff", "Hunk", "ReplaceBlock",
           "apply_edits", "parse_edits"]
