"""A quote as a grammar: the automaton a ``quoted_from`` field decodes under accepts every
piece of the source that starts at a word and ends at a word's end within one sentence, and
nothing else; it splices into the JSON schema's grammar, and llama.cpp reads the result."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from delegations.protocol.adapters.quote_grammar import (
    QuoteTooLarge,
    placeholder,
    quote_rules,
    splice_quotes,
)

_NAME = re.compile(r"[a-z0-9-]+")


def _literal(text: str, start: int) -> tuple[str, int]:
    """A GBNF string literal starting at ``text[start]`` (a quote mark): its value, and where it ends."""
    out, index = [], start + 1
    escapes = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}
    while text[index] != '"':
        if text[index] == "\\":
            out.append(escapes[text[index + 1]])
            index += 2
        else:
            out.append(text[index])
            index += 1
    return "".join(out), index + 1


def rules_of(gbnf: str) -> dict[str, list[tuple[str, str | None]]]:
    """The right-linear rules quote_rules writes: name -> [(literal, next rule or None)]."""
    rules = {}
    for line in gbnf.splitlines():
        name, _, body = line.partition(" ::= ")
        options, index = [], 0
        while index < len(body):
            literal, index = _literal(body, index)
            follow = _NAME.match(body, index + 1) if body[index:index + 1] == " " else None
            if follow is not None:
                index = follow.end()
            options.append((literal, follow.group(0) if follow else None))
            index += len(" | ") if body.startswith(" | ", index) else 0
        rules[name] = options
    return rules


def accepts(gbnf: str, start: str, quote: str) -> bool:
    """Whether the grammar matches the JSON string content of ``quote`` and its closing quote."""
    rules, rest, rule = rules_of(gbnf), json.dumps(quote, ensure_ascii=False)[1:], start
    while True:
        options = [(literal, follow) for literal, follow in rules[rule] if rest.startswith(literal)]
        if not options:
            return False
        literal, follow = options[0]
        rest = rest[len(literal):]
        if follow is None:
            return rest == ""
        rule = follow


TEXT = 'The kettle is "loud", but it boils fast.\nShipping took a week. Great value!'


@pytest.mark.parametrize("quote", ["The kettle", "kettle is \"loud\", but it boils fast.", "boils fast",
                                   "Shipping took a week.", "Great value!", "loud", "a week"])
def test_a_quote_of_whole_words_within_a_sentence_is_accepted(quote: str) -> None:
    assert accepts(quote_rules(TEXT, "q"), "q", quote)


@pytest.mark.parametrize(("quote", "why"), [
    ("ettle is", "starts inside a word"),
    ("The kett", "ends inside a word"),
    ("boils fast. Shipping", "runs on into the next sentence"),
    ("it boils quickly", "is not in the text"),
    ("", "is empty"),
    ("the kettle", "changes the case"),
])
def test_anything_else_is_refused(quote: str, why: str) -> None:
    assert not accepts(quote_rules(TEXT, "q"), "q", quote), why


def test_an_optional_quote_may_be_empty() -> None:
    assert accepts(quote_rules(TEXT, "q", may_be_empty=True), "q", "")


def test_a_pathological_text_is_not_shaped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("delegations.protocol.adapters.quote_grammar.WORK_LIMIT", 100)
    with pytest.raises(QuoteTooLarge):
        quote_rules("a a " * 200, "q")


def test_the_quote_is_spliced_into_a_json_schema_grammar_that_llama_cpp_reads() -> None:
    llama_grammar = pytest.importorskip("llama_cpp.llama_grammar")
    schema = {"type": "object", "properties": {"evidence": {"const": placeholder(0)},
                                               "sentiment": {"enum": ["positive", "negative"]}},
              "required": ["evidence", "sentiment"]}
    gbnf = splice_quotes(llama_grammar.json_schema_to_gbnf(json.dumps(schema)), [(placeholder(0), TEXT, False)])
    assert placeholder(0) not in gbnf and 'evidence ::= "\\"" handoff-quote-0' in gbnf.replace("-kv", "")
    assert llama_grammar.LlamaGrammar.from_string(gbnf, verbose=False) is not None


def test_a_grammar_without_the_placeholder_is_refused() -> None:
    with pytest.raises(ValueError, match="no placeholder"):
        splice_quotes('root ::= "{}"', [(placeholder(0), TEXT, False)])


@pytest.mark.parametrize("value", ['said "Open daily"', "C:\\temp", "Tórshavn", 'a \\" b', 4.5, True])
def test_a_choice_is_written_in_the_grammar_as_the_answer_writes_it(value: Any) -> None:
    # llama-cpp-python's literal escaped quote marks but not backslashes: JSON's \" inside a
    # value closed the grammar's string, and the grammar did not parse
    pytest.importorskip("llama_cpp.llama_grammar")
    from delegations.protocol.adapters.model_host import grammar_for

    gbnf = grammar_for({"enum": [value, "other"]}, [])
    root = gbnf.split("root ::= ", 1)[1]
    first, end = _literal(root, 0)
    assert first == json.dumps(value, ensure_ascii=False)
    assert root[end:].startswith(' | "\\"other\\""')
