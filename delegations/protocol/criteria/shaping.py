"""Criteria that shape decoding: what the success criteria say an output field may be, for
an adapter that can hold generation to it (the local model decodes under a grammar), and
which fields are labels whose values it can score.

- ``quoted_from``: the field is a quote of the source text (a substring of it);
- ``one_of_input``: the field is one of the source's values;
- ``appears_in`` on a number field: the field is one of the numbers the source holds
  (every reading of every number in it: "71,40" gives 71.4 and 7140); on a string field
  with a ``pattern`` (a code), one of the source's words, or of the currency codes whose
  sign it holds, that fit the pattern ("71,40 €" gives EUR for ``^[A-Z]{3}$``); on any
  other string field, one of the source's *spans*: its numbers as written, its runs of
  capitalised words (names) and its sentences ("Jan Wessels", "1,240", "It opened in
  1937."), a label scored like the others but not calibrated (see below);
- an enum or boolean output field, or a field with choices, is a *label*: each allowed
  value can be scored (its probability in context), which ``confident`` criteria read.
  Its *label prompt* is the few-shot text it is scored on: each worked example's input as
  ``name: value`` lines and its label (``sentiment: negative``), then the run's input and
  ``sentiment:``; and the same with the input's values replaced by "N/A", the content-free
  prompt a label's probabilities are calibrated against ("Calibrate Before Use", Zhao et
  al., ICML 2021). Measured on Gemma 3 270M (tests/evals' eight reviews): scored in this
  plain form it named 6 of 8 sentiments right, scored where it writes the JSON answer 3.
  Spans have no content-free twin: their priors on "N/A" favour whole sentences so much
  that, on the six answerable context questions of tests/evals (names, years, counts),
  calibrated scores chose a sentence every time and raw scores the right span every time;
  written freely, the model answered "1757" to "Who built the first windmill?".

A ``words_absent`` criterion under a ``when`` rules its condition's value out when the input
already fails it: "When `found` is false, the key words of `question` are not all in
`context`" leaves ``found`` only ``true`` when the context holds every key word (the label
is then not scored: on tests/evals' six context questions Gemma 3 270M gave ``true`` 0.22-0.42
whether or not the context held the answer).

A criterion with a ``when`` still shapes its field, loosened so that the other branch stays
open: a quote may then be empty ("When `found` is true, `evidence` is quoted from `context`"
leaves ``evidence: ""`` possible when nothing is found), and a span may also be any value
the skill's worked examples give the field ("The passage does not say."), unless the other
criteria leave the condition certain. A shape whose source the input lacks
or leaves empty cannot be met by any value: it is listed in ``empty`` with its source, and
an adapter that shapes decoding fails the run with ERR_INSUFFICIENT_CONTEXT naming it
instead of decoding a value the criterion refuses anyway.

Only top-level fields of an object output schema are shaped; the criteria still check
everything afterwards, whatever the adapter did.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# one spelling for the prompt and the host scoring it
from ..adapters.label_choice import literal, verbal
from ..schemas import validate_instance
from . import grounding
from .evaluation import words_absent
from .forms import Criterion, CriterionKind, output_field, output_path
from .grammar import readable_criteria

MAX_CHOICES = 64      # more numbers than this in a source: left to the check (a long table)
MAX_QUOTE_CHARS = 8000  # a longer source is not shaped: its automaton would outgrow the grammar
MAX_SPAN_CHARS = 400   # a longer sentence is no short answer (and is scored in one batch)


@dataclass(frozen=True, slots=True)
class Quote:
    source: str
    text: str
    may_be_empty: bool = False


@dataclass(slots=True)
class OutputShapes:
    """What decoding may be held to, per top-level output field (see the module docstring)."""

    quotes: dict[str, Quote] = field(default_factory=dict)
    choices: dict[str, list[Any]] = field(default_factory=dict)   # one_of_input
    numbers: dict[str, list[float | int]] = field(default_factory=dict)   # appears_in, numbers
    spans: dict[str, list[str]] = field(default_factory=dict)      # appears_in, other strings
    labels: dict[str, list[Any]] = field(default_factory=dict)    # values to score per field
    # per label: {"prompt": the few-shot text it is scored on, "content_free": the same with "N/A"}
    label_prompts: dict[str, dict[str, str]] = field(default_factory=dict)
    empty: list[tuple[str, str]] = field(default_factory=list)    # (field, source) with no value

    def __bool__(self) -> bool:
        return bool(self.quotes or self.choices or self.numbers or self.spans or self.labels or self.empty)

    def as_dict(self) -> dict[str, Any]:
        """The JSON form adapters read (``output_shapes`` of the ``yield_control`` tool)."""
        return {"quotes": {name: {"source": quote.source, "text": quote.text,
                                  "may_be_empty": quote.may_be_empty}
                           for name, quote in self.quotes.items()},
                "choices": self.choices, "numbers": self.numbers, "spans": self.spans,
                "labels": self.labels,
                "label_prompts": self.label_prompts,
                "empty": [{"field": name, "source": source} for name, source in self.empty]}


def output_shapes(criteria: list[str | dict[str, Any]], output_schema: dict[str, Any] | None,
                  input_data: dict[str, Any], examples: Sequence[dict[str, Any]] = ()) -> OutputShapes:
    """The shapes ``criteria`` give the fields of ``output_schema`` for a run given
    ``input_data`` (which may hold ``fetched_pages``, the pages the run fetched), and its
    labels' prompts, with the skill's worked ``examples`` (``{"input", "output"}``)."""
    shapes = OutputShapes()
    ruled_out: dict[str, list[str]] = {}   # per field, the values (as literals) criteria rule out
    hedged: dict[str, tuple[dict[str, Any], list[Any]]] = {}   # span field -> (when, other branch's values)
    properties = output_schema.get("properties") if isinstance(output_schema, dict) else None
    if not isinstance(properties, dict):
        return shapes
    for criterion in readable_criteria(criteria):
        if criterion.kind not in _SHAPING:
            continue
        if criterion.kind is CriterionKind.WORDS_ABSENT:
            _rule_out(ruled_out, criterion, input_data)
            continue
        path, source = criterion.params.get("path"), criterion.params.get("source")
        if not isinstance(path, str) or not isinstance(source, str):
            continue
        path = output_path(path)   # "output_payload.evidence" shapes `evidence`; "a.b" nothing
        spec = properties.get(path)
        if not isinstance(spec, dict):
            continue
        given = grounding.input_value(input_data, source)
        if grounding.is_missing(given):
            if source != grounding.FETCHED_PAGES:   # nothing fetched yet: the run fetches first
                shapes.empty.append((path, source))
            continue
        conditional = bool(criterion.params.get("when"))
        if criterion.kind is CriterionKind.QUOTED_FROM and _is_string(spec):
            text = grounding.source_text(given)
            if len(text) <= MAX_QUOTE_CHARS:
                shapes.quotes[path] = Quote(source, text, may_be_empty=conditional)
        elif criterion.kind is CriterionKind.ONE_OF_INPUT and not conditional:
            values = [value for value in (given if isinstance(given, list) else [given])
                      if not validate_instance(spec, value, path)]
            _offer(shapes, shapes.choices, path, source, values)
        elif criterion.kind is CriterionKind.APPEARS_IN and _is_number(spec) and not conditional:
            _offer(shapes, shapes.numbers, path, source, _numbers(grounding.source_text(given), spec, path))
        elif criterion.kind is CriterionKind.APPEARS_IN and _is_code(spec) and not conditional:
            _offer(shapes, shapes.choices, path, source, _codes(grounding.source_text(given), spec, path))
        elif criterion.kind is CriterionKind.APPEARS_IN and _is_string(spec):
            found = _spans(grounding.source_text(given), spec, path)
            if found and conditional:
                other = [value for value in _other_branch(examples, path, source)
                         if value not in found and not validate_instance(spec, value, path)]
                found += other
                hedged[path] = (criterion.params["when"], other)
            _offer(shapes, shapes.spans, path, source, found)
    for name, out in ruled_out.items():   # decoding keeps to the values left
        left = [value for value in shapes.choices.get(name) or label_values(properties.get(name))
                if literal(value) not in out]
        if left:
            shapes.choices[name] = left
    for name, (when, other) in hedged.items():
        if name in shapes.spans and shapes.choices.get(output_field(when["path"])) == [when["value"]]:
            # the condition holds whatever is decoded: its other branch is not open
            shapes.spans[name] = [value for value in shapes.spans[name] if value not in other]
    for name, spec in properties.items():
        allowed: list[Any] = shapes.choices.get(name) or shapes.spans.get(name) or label_values(spec)
        if len(allowed) > 1:
            shapes.labels[name] = allowed
            prompts = label_prompts(name, input_data, examples)
            if name in shapes.spans:
                del prompts["content_free"]
            shapes.label_prompts[name] = prompts
    return shapes


PROMPT_VALUE_CHARS = 2000   # an input value longer than this is cut in a label prompt
CONTENT_FREE = "N/A"


def _rule_out(ruled_out: dict[str, list[str]], criterion: Criterion, input_data: dict[str, Any]) -> None:
    """Rules a ``words_absent`` criterion's ``when`` value out when the input fails it."""
    when = criterion.params.get("when")
    sources = [grounding.input_value(input_data, criterion.params[key]) for key in ("words_of", "source")]
    if isinstance(when, dict) and not any(grounding.is_missing(given) for given in sources) \
            and not words_absent(criterion, input_data)[0]:
        ruled_out.setdefault(output_field(when["path"]), []).append(literal(when["value"]))


def _offer[T](shapes: OutputShapes, into: dict[str, list[T]], path: str, source: str, found: list[T]) -> None:
    """The values the input offers for ``path``, when few enough to choose among; none is
    a constraint no answer can meet (the run needs more context)."""
    if found and len(found) <= MAX_CHOICES:
        into[path] = found
    elif not found:
        shapes.empty.append((path, source))


def _lines(values: dict[str, Any]) -> str:
    lines = []
    for key, value in values.items():
        if key == grounding.FETCHED_PAGES:
            continue
        text = " ".join(verbal(value).split())
        if len(text) > PROMPT_VALUE_CHARS:
            text = text[:PROMPT_VALUE_CHARS // 2] + " ... " + text[-PROMPT_VALUE_CHARS // 2:]
        lines.append(f"{key}: {text}")
    return "\n".join(lines)


def label_prompts(name: str, input_data: dict[str, Any],
                  examples: Sequence[dict[str, Any]]) -> dict[str, str]:
    """The label prompt of field ``name`` and its content-free twin (see the module docstring)."""
    shown = [f"{_lines(example['input'])}\n{name}: {verbal(example['output'][name])}"
             for example in examples
             if isinstance(example.get("input"), dict) and isinstance(example.get("output"), dict)
             and name in example["output"]]
    task = {key: value for key, value in input_data.items() if key != grounding.FETCHED_PAGES}
    blank = dict.fromkeys(task, CONTENT_FREE)
    return {"prompt": "\n\n".join([*shown, f"{_lines(task)}\n{name}:"]),
            "content_free": "\n\n".join([*shown, f"{_lines(blank)}\n{name}:"])}


_SHAPING = frozenset({CriterionKind.QUOTED_FROM, CriterionKind.ONE_OF_INPUT, CriterionKind.APPEARS_IN,
                      CriterionKind.WORDS_ABSENT})


def label_values(spec: object) -> list[Any]:
    """The values an output field allows when it is a label (an enum of strings, numbers or
    booleans, or a boolean); empty for any other field."""
    if not isinstance(spec, dict):
        return []
    enum = spec.get("enum")
    if isinstance(enum, list) and 1 < len(enum) <= MAX_CHOICES and all(
            isinstance(value, str | bool | int | float) for value in enum):
        return list(enum)
    if spec.get("type") == "boolean":
        return [True, False]
    return []


def _is_string(spec: dict[str, Any]) -> bool:
    kind = spec.get("type")
    return kind == "string" and not any(key in spec for key in ("enum", "const", "pattern", "format"))


def _is_code(spec: dict[str, Any]) -> bool:
    return spec.get("type") == "string" and "pattern" in spec and "enum" not in spec and "const" not in spec


_WORD = re.compile(r"[^\W_]+(?:[.'-][^\W_]+)*")


def _codes(text: str, spec: dict[str, Any], path: str) -> list[str]:
    """The source's words, and the currency codes it holds by sign or name, that fit the
    field's schema and that ``appears_in`` accepts, in the order they come."""
    lowered = grounding.normalise(text)
    candidates = [*_WORD.findall(text), *(code for code, signs in grounding.CURRENCY_SIGNS.items()
                                          if any(sign in lowered for sign in signs))]
    return [word for word in dict.fromkeys(candidates)
            if not validate_instance(spec, word, path) and grounding.appears(word, text)[0]]


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_NUMBER_AS_WRITTEN = re.compile(r"\d(?:[\d,.]*\d)?")
_CLAUSE_END = re.compile(r"[.,;:!?()\[\]\"“”]\s")
# a capitalised word that alone is no name ("It was built ...")
_FUNCTION_WORDS = frozenset({"a", "an", "and", "at", "but", "by", "he", "her", "here", "his", "i",
                             "in", "it", "its", "many", "most", "on", "our", "she", "some", "that",
                             "the", "their", "there", "these", "they", "this", "those", "today",
                             "we", "when", "where", "while", "who", "you"})
_NAME_LINKS = frozenset({"de", "del", "der", "di", "la", "le", "of", "the", "van", "von"})


def _spans(text: str, spec: dict[str, Any], path: str) -> list[str]:
    """The source's spans a short answer may be (see the module docstring), in the order
    they come: numbers as written, runs of capitalised words (linked by "van", "of", ...;
    not a lone "It" or "The") and sentences."""
    names: list[str] = []
    for clause in _CLAUSE_END.split(text):
        run: list[str] = []
        for word in [*_WORD.findall(clause), ""]:
            if word[:1].isupper() or (run and word in _NAME_LINKS):
                run.append(word)
                continue
            while run and run[-1] in _NAME_LINKS:
                run.pop()
            if run and not (len(run) == 1 and run[0].lower() in _FUNCTION_WORDS):
                names.append(" ".join(run))
            run = []
    sentences = [sentence.strip() for sentence in _SENTENCE_END.split(text)]
    candidates = [*_NUMBER_AS_WRITTEN.findall(text), *names, *sentences]
    return [span for span in dict.fromkeys(candidates)
            if span and len(span) <= MAX_SPAN_CHARS and not validate_instance(spec, span, path) and grounding.appears(span, text)[0]]


def _other_branch(examples: Sequence[dict[str, Any]], name: str, source: str) -> list[Any]:
    """The values worked examples give field ``name`` where their own ``source`` does not
    hold them: what the field says on the branch its criterion's ``when`` leaves open."""
    return [example["output"][name] for example in examples
            if isinstance(example.get("output"), dict) and isinstance(example.get("input"), dict)
            and name in example["output"]
            and not grounding.appears(example["output"][name],
                                      grounding.source_text(grounding.input_value(example["input"], source)))[0]]


def _is_number(spec: dict[str, Any]) -> bool:
    return spec.get("type") in ("number", "integer") and "enum" not in spec and "const" not in spec


def _numbers(text: str, spec: dict[str, Any], path: str) -> list[float | int]:
    """Every reading of every number in ``text`` that the field's schema accepts, smallest
    first, whole numbers written without a decimal point."""
    found: list[float | int] = []
    for number in sorted(grounding.numbers_in(text)):
        if not math.isfinite(number):
            continue
        value: float | int = int(number) if number.is_integer() else number
        if spec.get("type") == "integer" and not isinstance(value, int):
            continue
        if not validate_instance(spec, value, path):
            found.append(value)
    return found
