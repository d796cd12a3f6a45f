"""A quote as a grammar: a JSON string that can only be a piece of a given text.

A ``quoted_from`` criterion says a field copies its source; the local model decodes under
a GBNF grammar (llama.cpp's), so that field's string is held to a character-level automaton
over the source: the deterministic automaton of its substrings (a state is the set of places
in the text the quote so far could have been copied from; each next character keeps those
where the text goes on with it). It is written as one right-recursive rule per state and
spliced into the JSON grammar in place of a placeholder, so the lazy grammar check
(``lazy_grammar.LazyGrammar``) checks it like any other part of the answer.

A quote starts where a word or a token of text starts (after a space, or at a letter or
digit that follows something else) and ends where a word ends, so it is never half a
word; it stays within one sentence (it may end with the sentence's full stop, not run on
into the next: Gemma 3 270M quoted two sentences of a passage and then answered from the
second); it is never empty unless ``may_be_empty``. Characters are written as JSON writes them
inside a string (a quote mark as ``\\"``), so what decodes is the exact text.

This module imports only the standard library: the model host's program loads it beside
itself (it is run by path, not as part of the package).
"""

from __future__ import annotations

import json
from functools import lru_cache

PLACEHOLDER = "@@handoff-quote-{index}@@"   # the const a quote field holds until it is spliced
WORK_LIMIT = 2_000_000   # positions visited while building: a pathological text is not shaped


class QuoteTooLarge(ValueError):
    """Building the automaton would take more work than :data:`WORK_LIMIT`."""


def placeholder(index: int) -> str:
    return PLACEHOLDER.format(index=index)


def _starts(text: str) -> frozenset[int]:
    """Where a quote may start: at a word, or after a space."""
    return frozenset(
        index for index, char in enumerate(text)
        if not char.isspace() and (index == 0 or text[index - 1].isspace()
                                   or (char.isalnum() and not text[index - 1].isalnum())))


def _can_end(text: str, end: int) -> bool:
    """Whether a quote may end before ``text[end]``: never inside a word, nor after a space."""
    if end == len(text):
        return True
    return not text[end - 1].isspace() and not (text[end - 1].isalnum() and text[end].isalnum())


def _goes_on(text: str, position: int) -> bool:
    """Whether a quote may go on with ``text[position]``: not past a sentence's end."""
    return not (0 < position < len(text) and text[position - 1] in ".!?" and text[position].isspace())


def gbnf_literal(text: str) -> str:
    """``text`` as a GBNF string literal."""
    out = []
    for char in text:
        if char == "\\":
            out.append("\\\\")
        elif char == '"':
            out.append('\\"')
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif ord(char) < 0x20:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _json_piece(char: str) -> str:
    """How JSON writes ``char`` inside a string."""
    return json.dumps(char, ensure_ascii=False)[1:-1]


@lru_cache(maxsize=64)
def quote_rules(text: str, name: str, *, may_be_empty: bool = False) -> str:
    """GBNF rules whose rule ``name`` matches the *content and closing quote* of a JSON string
    holding a quote of ``text`` (see the module docstring). Raises :class:`QuoteTooLarge`."""
    start = _starts(text)
    names: dict[frozenset[int], str] = {start: name}
    queue = [start]
    rules: list[str] = []
    work = 0
    while queue:
        state = queue.pop()
        follow: dict[str, set[int]] = {}
        for position in state:
            if position < len(text) and (state is start or _goes_on(text, position)):
                follow.setdefault(text[position], set()).add(position + 1)
        work += len(state)
        if work > WORK_LIMIT:
            raise QuoteTooLarge(f"a quote of {len(text)} characters is too large to shape")
        options = []
        for char in sorted(follow):
            target = frozenset(follow[char])
            if target not in names:
                names[target] = f"{name}-{len(names)}"
                queue.append(target)
            options.append(f"{gbnf_literal(_json_piece(char))} {names[target]}")
        closes = may_be_empty if state is start else any(_can_end(text, end) for end in state)
        if closes:
            options.append(gbnf_literal('"'))
        rules.append(f"{names[state]} ::= " + (" | ".join(options) if options else gbnf_literal('"')))
    return "\n".join(rules)


def splice_quotes(gbnf: str, quotes: list[tuple[str, str, bool]]) -> str:
    """``gbnf`` (a JSON schema's grammar, whose quote fields hold placeholder consts) with
    each placeholder replaced by its quote's automaton. ``quotes``: (placeholder, text,
    may_be_empty) in order."""
    extra = []
    for index, (marker, text, may_be_empty) in enumerate(quotes):
        literal = gbnf_literal(json.dumps(marker))
        if literal not in gbnf:
            raise ValueError(f"the grammar has no placeholder {marker}")
        name = f"handoff-quote-{index}"
        gbnf = gbnf.replace(literal, f'"\\"" {name}')
        extra.append(quote_rules(text, name, may_be_empty=may_be_empty))
    return "\n".join([gbnf.rstrip("\n"), *extra]) + "\n"
