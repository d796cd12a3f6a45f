"""The text and structure every way in accepts, and how stored text is drawn.

Text must be valid Unicode (JSON's ``"\\ud800"`` escape decodes to a lone surrogate, which
no page, database or socket can encode) and hold no control characters but tab, newline
and carriage return (a NUL ends a string in C and cannot be stored by PostgreSQL);
values nest at most :data:`MAX_NESTING` levels (deeper ones broke the serializers past
about 250). The API's JSON bodies, forms, websocket frames and packets are checked here,
each caller reporting the :class:`~delegations.protocol.errors.Issue` its own way; text
already stored is drawn with :func:`printable`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .errors import Issue

MAX_NESTING = 100
# A message to a run (the API, the run page, MCP, A2A, ``manage.py subagents send``) is a
# correction or a hint the subagent reads at its next turn, added to its context as it is:
# 20,000 characters is about 5,000 tokens, more than a hint needs and what a small model's
# context can spare.
MAX_MESSAGE_CHARS = 20_000
_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _describe(char: str) -> str:
    if "\ud800" <= char <= "\udfff":
        return (f"holds a lone surrogate (U+{ord(char):04X}), which is not valid Unicode; "
                "send UTF-8 text (in JSON, a \\u escape of half a surrogate pair is invalid)")
    return (f"holds the control character U+{ord(char):04X}; only tab, newline and carriage "
            "return are allowed in text")


def text_issue(text: str, field: str) -> Issue | None:
    """The problem with one piece of text, or None."""
    if (found := _FORBIDDEN.search(text)) is not None:
        return Issue(field, _describe(found.group()))
    return None


def _path(parent: str, step: str | int) -> str:
    if isinstance(step, int):
        return f"{parent}[{step}]"
    return f"{parent}.{step}" if parent else step


def _breaks_limits(value: Any) -> bool:
    """Whether :func:`value_issue` has something to say, without building a path per item:
    the texts are gathered and searched at once. It takes 1.3 to 1.6 times what
    ``json.loads`` took to read the value; the path-keeping walk took 4 times."""
    if not isinstance(value, dict | list):
        return isinstance(value, str) and _FORBIDDEN.search(value) is not None
    texts: list[Any] = []
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_NESTING:
            return True
        if isinstance(item, dict):
            texts.extend(item)  # the keys
            item = item.values()
        for child in item:
            kind = type(child)
            if kind is str:
                texts.append(child)
            elif kind is dict or kind is list:
                stack.append((child, depth + 1))
    return _FORBIDDEN.search("\n".join(map(str, texts))) is not None


def value_issue(value: Any, field: str = "") -> Issue | None:
    """The first problem in a JSON value (its keys, strings and nesting), or None; the
    issue names the field by its path from ``field`` (``packet.inputs[2].name``).
    Iterative, so a value nested 100,000 deep is reported rather than overflowing."""
    if not _breaks_limits(value):
        return None
    stack: list[tuple[Any, str, int]] = [(value, field, 1)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            if (issue := text_issue(item, path)) is not None:
                return issue
            continue
        if not isinstance(item, dict | list):
            continue
        if depth > MAX_NESTING:
            return Issue(path, f"nests deeper than {MAX_NESTING} levels; flatten it or pass a file")
        children: list[tuple[Any, str, int]] = []
        if isinstance(item, dict):
            for key, child in item.items():
                child_path = _path(path, printable(str(key)))
                if (issue := text_issue(str(key), child_path)) is not None:
                    return Issue(child_path, f"the key {issue.message}")
                children.append((child, child_path, depth + 1))
        else:
            children = [(child, _path(path, index), depth + 1) for index, child in enumerate(item)]
        stack.extend(reversed(children))  # in the order they were written
    return None


class TextLimitError(Exception):
    """JSON text whose value breaks the limits above; ``issue`` names the field."""

    def __init__(self, issue: Issue) -> None:
        super().__init__(f"{issue.field}: {issue.message}" if issue.field else issue.message)
        self.issue = issue


class NestedTooDeeply(ValueError):
    """JSON nested past what Python's parser reads (``[[[[...`` 100,000 deep), which it
    reports as a RecursionError: a ValueError here, so every reader's "not valid JSON"
    answers it, in its own words, like any other text that does not read."""

    def __init__(self) -> None:
        super().__init__("it nests arrays or objects too deeply to read")


def refuse_constant(name: str) -> Any:
    """``json``'s parse_constant: NaN and Infinity are not JSON (RFC 8259), though Python
    reads them, and SQLite's JSON columns refuse them (a 500 on save)."""
    raise ValueError(f"{name} is not a JSON number; send a number, or null")


def parse(text: str | bytes, *, infinity: bool = False) -> Any:
    """``json.loads(text)``, whose every refusal is a ValueError (NaN, Infinity and nesting
    too deep for Python's parser included): the one JSON reader for text that comes from
    outside (requests, forms, frames, files, tokens, a model's answer). ``infinity`` reads
    the constants, for text of our own that writes them (a capability token that never
    expires)."""
    try:
        return json.loads(text) if infinity else json.loads(text, parse_constant=refuse_constant)
    except RecursionError:
        raise NestedTooDeeply() from None


def loads(text: str | bytes, field: str = "") -> Any:
    """:func:`parse`, then the limits: raises ValueError for text that is not JSON and
    :class:`TextLimitError` for a value past them."""
    value = parse(text)
    if (issue := value_issue(value, field)) is not None:
        raise TextLimitError(issue)
    return value


def printable(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD, so text stored before the
    limits (or by a model) can always be drawn. Trying to encode is the quick test: 0.33 ms
    for a 195 KB page with accents, where the search took 1 ms."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def goal_name(goal: str, most: int = 40) -> str:
    """A run named by its goal, as pages and inbox items name a run without a label: the goal
    on one line, cut to ``most`` characters with an ellipsis."""
    line = " ".join(goal.split())
    return line if len(line) <= most else line[:most - 1] + "…"
