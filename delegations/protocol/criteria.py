"""Machine-verifiable success criteria (DESIGN §2.8, seed 000 "Vague Success Criteria").

A criterion is either a structured dict or a line of free text that parses into one.

Structured form (``path`` and ``field`` are interchangeable spellings)::

    {"kind": "json_schema"}                                  # output_payload valid against the
    {"kind": "json_schema", "schema": {...}}                 #   expected (or given) schema
    {"kind": "field", "path": "price", "type": "number"}     # present (non-empty) and of a type
    {"kind": "regex", "field": "summary", "pattern": "USD", "ignore_case": true}
    {"kind": "word_count", "field": "summary", "min": 500, "max": 2000}
    {"kind": "equals", "path": "status", "value": "ok"}
    {"kind": "range", "path": "price", "min": 0, "max": 10000,
     "min_exclusive": false, "max_exclusive": false}
    {"kind": "evidence", "min": 2}                           # evidence items with a source
    {"kind": "files_modified", "paths": ["src/a.py"]}        # files_modified includes them
    {"kind": "tests_pass"}                                   # the result reports passing tests
    {"text": "Word count > 500"}                             # parsed like free text

Free-text grammar (case-insensitive; a trailing period is ignored; names in backticks
are taken verbatim; the first rule that matches wins):

- ``tests_pass``: "Tests pass", "All unit tests pass", "test suite passes", "tests are green".
- ``json_schema``: any line mentioning a schema together with valid/validates/conforms/
  matches/complies/adheres ("JSON is schema-valid", "Output is valid against the schema"),
  and "valid JSON" / "Return valid JSON".
- ``word_count``: "Word count > 500", "word count of at least 500", "at least 500 words",
  "no more than 200 words", "between 300 and 500 words". A line naming the summary (or a
  backticked field) counts that field.
- ``evidence``: "Include at least 2 sources", "cite evidence", "backed by 3 references",
  "sources are cited" (default minimum 1).
- ``files_modified``: "Modify src/a.py and src/b.py", "Files modified include X",
  "src/a.py is modified" (every remaining word must be a path).
- ``regex``: "summary matches /^[A-Z]/", "matches the pattern `\\d+`", and
  ``contains "text"`` (a quoted literal, case-insensitive).
- ``range``: "price between 0 and 10000", "price in [0, 10]", "0 <= price <= 10",
  "price >= 0", "price at most 100", "price is positive".
- ``equals``: '`status` equals "ok"', "status == ok", 'status is "ok"', "retries = 3".
- ``field``: "`price` is a number", "price: integer", "currency is present",
  "Return a float value" (some value of that type anywhere in output_payload),
  "Return a number for price", "Specify currency" / "Include a timestamp" (a key of that
  name, at any depth of output_payload, with a non-empty value).

Anything else ("Do a good job", "Make it nice", "Provide details") is vague:
``parse_criterion`` returns None and lint reports ``VAGUE_CRITERIA``.

Evaluation (:func:`evaluate_criteria`):

- Paths resolve against ``output_payload``; ``output_payload.x`` or ``result.x`` forces a
  root, and a bare name that the payload lacks but that is a result field (``summary``,
  ``evidence``, ``files_modified``...) reads the result field.
- Text for word counts and regexes without a field: every string in ``output_payload``
  (depth first) followed by the summary, one per line.
- ``json_schema`` without any schema checks that ``output_payload`` is a JSON object.
- ``evidence`` counts ``result.evidence`` items with a non-empty source; when those fall
  short it also counts non-empty entries of an output_payload list named ``sources``,
  ``citations``, ``references`` or ``evidence``.
- ``tests_pass`` is met when output_payload reports it (``tests_pass``/``tests_passed``/
  ``tests_passing``/``all_tests_pass`` true; ``tests``/``test_results`` holding
  ``failed == 0`` with ``passed > 0``, or ``status``/``result`` "pass"/"passed"/"ok"), or
  when an ``acceptance_criteria_confirmation`` item about tests is met with evidence.
  It never counts as met when any reported failure count is above zero.
- Free text that does not parse is reported with ``met=False, checkable=False`` and a
  detail saying it is not machine-checkable (and what the subagent itself claimed for
  it, if anything): the report stays honest instead of trusting self-assessment.
  ``all_met`` needs every criterion met; ``checkable_met`` ignores unparsed ones.
"""

from __future__ import annotations

import json
import math
import re
from enum import StrEnum
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from .errors import ErrorCode, Issue, ProtocolError
from .schemas import schema_issues, validate_instance

if TYPE_CHECKING:
    from .results import ResponsePackage


class CriterionKind(StrEnum):
    JSON_SCHEMA = "json_schema"
    FIELD = "field"
    REGEX = "regex"
    WORD_COUNT = "word_count"
    EQUALS = "equals"
    RANGE = "range"
    EVIDENCE = "evidence"
    FILES_MODIFIED = "files_modified"
    TESTS_PASS = "tests_pass"


class Criterion(BaseModel):
    """One machine-checkable criterion: its kind, its parameters and the text it came from."""

    model_config = ConfigDict(frozen=True)

    kind: CriterionKind
    params: dict[str, Any] = Field(default_factory=dict)
    text: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"kind": str(self.kind), **self.params}


class CriterionResult(BaseModel):
    criterion: str
    kind: str | None
    met: bool
    detail: str
    checkable: bool = True

    def as_dict(self) -> dict[str, Any]:
        # what model_dump(mode="json") gives (every field is JSON already), at a fraction of
        # its cost: every run that has success criteria reports them in its result event
        return {name: getattr(self, name) for name in type(self).model_fields}


class CriteriaReport(BaseModel):
    items: list[CriterionResult] = Field(default_factory=list)

    @property
    def all_met(self) -> bool:
        return all(item.met for item in self.items)

    @property
    def checkable_met(self) -> bool:
        return all(item.met for item in self.items if item.checkable)

    @property
    def unchecked(self) -> list[str]:
        return [item.criterion for item in self.items if not item.checkable]

    def as_dict(self) -> dict[str, Any]:
        return {"items": [item.as_dict() for item in self.items], "all_met": self.all_met,
                "checkable_met": self.checkable_met}


# --- value types -------------------------------------------------------------------------

TYPE_ALIASES: dict[str, str] = {
    "number": "number", "numeric": "number", "float": "number", "double": "number",
    "decimal": "number", "integer": "integer", "int": "integer", "whole number": "integer",
    "string": "string", "str": "string", "text": "string", "boolean": "boolean",
    "bool": "boolean", "array": "array", "list": "array", "object": "object",
    "dict": "object", "mapping": "object", "null": "null",
}
_TYPE_RE = "|".join(sorted((re.escape(name) for name in TYPE_ALIASES), key=len, reverse=True))


def value_has_type(value: object, type_name: str) -> bool:
    match type_name:
        case "number":
            return isinstance(value, int | float) and not isinstance(value, bool)
        case "integer":
            if isinstance(value, bool):
                return False
            return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        case "string":
            return isinstance(value, str)
        case "boolean":
            return isinstance(value, bool)
        case "array":
            return isinstance(value, list | tuple)
        case "object":
            return isinstance(value, dict)
        case "null":
            return value is None
    return False


# --- free-text grammar -------------------------------------------------------------------

_FLAGS = re.IGNORECASE
_NUM = r"-?\d[\d,_]*(?:\.\d+)?|-?\.\d+"
_COUNT_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                "eight": 8, "nine": 9, "ten": 10, "a": 1, "an": 1, "some": 1}
_COUNT = _NUM + "|" + "|".join(_COUNT_WORDS)
_PATH = r"`[^`]+`|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*|\[\d+\])*"
# Comparators, longest spellings first so "at least" wins over "least".
_MIN_INCL = r">=|=>|≥|at least|no less than|not less than|no fewer than|minimum of|minimum|min\.?"
_MIN_EXCL = r">|more than|greater than|over|above|exceeds?|exceeding"
_MAX_INCL = r"<=|=<|≤|at most|no more than|not more than|maximum of|maximum|max\.?|up to"
_MAX_EXCL = r"<|less than|fewer than|under|below"
_EXACT = r"==|=|exactly"
_CMP = f"{_MIN_INCL}|{_MAX_INCL}|{_MIN_EXCL}|{_MAX_EXCL}|{_EXACT}"
_MODAL = r"(?:(?:is|are|must be|should be|has to be|needs to be|shall be)\s+)?"

_TESTS_PASS = re.compile(
    r"^(?:all\s+)?(?:the\s+)?(?:(?:unit|integration|existing|e2e|end-to-end|regression|new)\s+)*"
    r"(?:tests?|test suite|test-suite|pytest|specs?|ci)\s+(?:must\s+|should\s+|still\s+)?"
    r"(?:pass|passes|passed|passing|are passing|is passing|succeed|succeeds|are green|is green|"
    r"green|run green)$|^no (?:failing|failed) tests$", _FLAGS)
_SCHEMA_WORD = re.compile(r"\bschema\b", _FLAGS)
_SCHEMA_VERB = re.compile(r"\b(?:valid|validates?|validated|conforms?|conforming|match(?:es)?|"
                          r"compl(?:y|ies|iant)|adheres?|passes|follows?)\b", _FLAGS)
_VALID_JSON = re.compile(r"^(?:(?:the\s+)?(?:output|result|response|payload|answer|it)\s+"
                         r"(?:is|must be|should be)\s+|(?:must\s+)?(?:return|returns|output|outputs|"
                         r"produce|produces)\s+)?(?:a\s+)?(?:valid|well-formed|parseable)\s+json"
                         r"(?:\s+object)?$", _FLAGS)
_WORD_COUNT_CMP = re.compile(
    r"^(?:the\s+)?(?:(?P<field>" + _PATH + r")\s+)?(?:has\s+(?:a\s+)?)?(?:word[- ]?count|number of words|"
    r"words?)\s*(?:is\s+|must be\s+|should be\s+|of\s+|:\s*)?(?P<op>" + _CMP + r")?\s*(?P<n>"
    + _NUM + r")\s*(?P<plus>\+)?(?:\s+words)?$", _FLAGS)
_WORD_COUNT_BETWEEN = re.compile(
    r"(?:between|from)\s+(?P<a>" + _NUM + r")\s+(?:and|to|-)\s+(?P<b>" + _NUM + r")\s+words\b|"
    r"word[- ]?count\s+(?:is\s+|must be\s+|should be\s+)?(?:between|from)\s+(?P<c>" + _NUM
    + r")\s+(?:and|to|-)\s+(?P<d>" + _NUM + r")|\b(?P<e>\d+)\s*(?:-|–|to)\s*(?P<f>\d+)\s+words\b",
    _FLAGS)
_WORDS_CMP = re.compile(r"(?:^|\s)(?P<op>" + _CMP + r")\s+(?P<n>" + _NUM + r")\s+words\b", _FLAGS)
_EVIDENCE_NOUN = r"(?:sources?|citations?|references?|evidence(?:\s+items?)?|links?)"
_EVIDENCE_VERB = re.compile(
    r"\b(?:include|includes|including|cite|cites|citing|provide|provides|providing|with|list|"
    r"lists|give|gives|reference|references|backed by|supported by|support|supports|has|have|"
    r"contain|contains|attach|attaches)\s+(?:(?P<op>" + _CMP + r")\s+)?(?:(?P<n>" + _COUNT
    + r")\s+)?(?:(?:distinct|different|independent|credible|reliable|verifiable|cited|named)\s+)?"
    + _EVIDENCE_NOUN + r"\b", _FLAGS)
_EVIDENCE_COUNT = re.compile(r"(?:^|\s)(?P<op>" + _CMP + r")\s+(?P<n>" + _COUNT + r")\s+" + _EVIDENCE_NOUN + r"\b", _FLAGS)
_EVIDENCE_PASSIVE = re.compile(r"^(?:the\s+)?" + _EVIDENCE_NOUN + r"\s+(?:are\s+|is\s+|must be\s+)?"
                               r"(?:cited|provided|included|present|given|listed|attached)$", _FLAGS)
_FILES_VERB = re.compile(r"^(?:must\s+|should\s+)?(?:modify|modifies|change|changes|update|updates|"
                         r"edit|edits|touch|touches|create|creates|add|adds|write|writes)\s+(?P<rest>.+)$",
                         _FLAGS)
_FILES_LIST = re.compile(r"^(?:the\s+)?(?:files?[ _]modified|modified files?|changed files?|"
                         r"files? changed)\s*(?:include|includes|contain|contains|are|is|:|=)?\s*"
                         r"(?P<rest>.+)$", _FLAGS)
_FILES_PASSIVE = re.compile(r"^(?P<rest>.+?)\s+(?:is|are|was|were|must be|should be|gets?)\s+"
                            r"(?:modified|changed|updated|edited|created|written)$", _FLAGS)
_PATH_TOKEN = re.compile(r"`(?P<quoted>[^`]+)`|(?P<bare>[\w.@~+-]*/[\w./@~+-]*|[\w@~+-]+\.[A-Za-z0-9]{1,8})")
_FILLER = re.compile(r"\b(?:and|the|files?|both|also|in|to|,)\b|[,;&]", _FLAGS)
_REGEX_MATCH = re.compile(
    r"^(?:the\s+)?(?:(?P<field>" + _PATH + r")\s+)?(?:must\s+|should\s+)?(?:match(?:es)?|matching|"
    r"is matched by)\s+(?:the\s+)?(?:regex|regexp|pattern|regular expression)?\s*"
    r"(?P<pat>/.+/[imsx]*|`[^`]+`|\"[^\"]+\"|'[^']+')$", _FLAGS)
_REGEX_CONTAINS = re.compile(
    r"^(?:the\s+)?(?:(?P<field>" + _PATH + r")\s+)?(?:must\s+|should\s+)?(?:contains?|includes?|"
    r"mentions?|says?)\s+(?:the\s+(?:text|string|phrase|word)\s+)?(?P<q>\"[^\"]+\"|'[^']+')$", _FLAGS)
_RANGE_BETWEEN = re.compile(
    r"^(?:the\s+)?(?P<path>" + _PATH + r")\s+" + _MODAL + r"(?:between|from)\s+(?P<a>" + _NUM
    + r")\s+(?:and|to|-)\s+(?P<b>" + _NUM + r")(?:\s*\(?inclusive\)?)?$", _FLAGS)
_RANGE_INTERVAL = re.compile(
    r"^(?:the\s+)?(?P<path>" + _PATH + r")\s+" + _MODAL + r"(?:with)?in\s+(?P<lo>[\[(])\s*(?P<a>"
    + _NUM + r")\s*,\s*(?P<b>" + _NUM + r")\s*(?P<hi>[\])])$", _FLAGS)
_RANGE_CHAIN = re.compile(r"^(?P<a>" + _NUM + r")\s*(?P<op1><=|<|≤)\s*(?P<path>" + _PATH
                          + r")\s*(?P<op2><=|<|≤)\s*(?P<b>" + _NUM + r")$", _FLAGS)
_RANGE_CMP = re.compile(r"^(?:the\s+)?(?P<path>" + _PATH + r")\s+" + _MODAL + r"(?P<op>" + _CMP
                        + r")\s+(?P<n>" + _NUM + r")$", _FLAGS)
_RANGE_CMP_TIGHT = re.compile(r"^(?P<path>" + _PATH + r")\s*(?P<op>>=|<=|≥|≤|>|<)\s*(?P<n>" + _NUM + r")$")
_RANGE_SIGN = re.compile(r"^(?:the\s+)?(?P<path>" + _PATH + r")\s+" + _MODAL
                         + r"(?P<sign>positive|negative|non-negative|nonnegative|non-positive)$", _FLAGS)
_LITERAL = r"\"[^\"]*\"|'[^']*'|" + _NUM + r"|true|false|null"
_EQUALS_LITERAL = re.compile(
    r"^(?:the\s+)?(?P<path>" + _PATH + r")\s*(?:\s(?:must|should)\s+)?(?:\s*(?:equals?|==|=)\s*|\s+"
    r"(?:is equal to|equal to|must be|should be|must equal|should equal|is|be)\s+)(?P<value>"
    + _LITERAL + r")$", _FLAGS)
_EQUALS_BARE = re.compile(r"^(?:the\s+)?(?P<path>" + _PATH + r")\s*(?:equals?|==)\s*(?P<value>[^\s\"']+)$",
                          _FLAGS)
_FIELD_TYPED = re.compile(
    r"^(?:the\s+)?(?:(?:field|key|property)\s+)?(?P<path>" + _PATH + r")\s*(?:(?:field|key|"
    r"property|value)\s+)?(?::\s*|\s+(?:is|must be|should be|is of type|of type|has type|as)\s+)"
    r"(?:an?\s+)?(?:valid\s+)?(?P<type>" + _TYPE_RE + r")(?:\s+value)?$", _FLAGS)
_FIELD_PRESENT = re.compile(
    r"^(?:the\s+)?(?:(?:field|key|property)\s+)?(?P<path>" + _PATH + r")\s+(?:(?:field|key|"
    r"property)\s+)?(?:is\s+|must be\s+|should be\s+)?(?:present|exists|is set|set|required|"
    r"provided|included|non-empty|not empty|specified)$", _FLAGS)
_VERB = (r"(?:must\s+|should\s+)?(?:specify|specifies|include|includes|provide|provides|report|"
         r"reports|return|returns|contain|contains|give|gives|output|outputs|state|states|produce|"
         r"produces|has|have|with)")
_VERB_TYPED = re.compile(
    r"^" + _VERB + r"\s+(?:an?\s+|the\s+)?(?:(?:single|valid|numeric|numerical)\s+)?(?P<type>"
    + _TYPE_RE + r")(?:\s+(?:value|field|result))?(?:\s+(?:for|named|called|as)\s+(?:the\s+)?"
    r"(?P<path>" + _PATH + r"))?$", _FLAGS)
_VERB_FIELD = re.compile(r"^" + _VERB + r"\s+(?:an?\s+|the\s+)?(?P<path>" + _PATH
                         + r")(?:\s+(?:field|key|value|property))?$", _FLAGS)

# Nouns that name no checkable field: "Provide details", "Return the result".
_VAGUE_NAMES = frozenset({
    "everything", "anything", "something", "details", "detail", "all", "it", "them", "this",
    "that", "answer", "answers", "result", "results", "output", "outputs", "information",
    "info", "context", "explanation", "job", "work", "value", "values", "data", "response",
    "quality", "insights", "analysis", "solution", "code", "stuff", "things", "more", "help",
})
# Leading nouns meaning "the whole output", not a field: "output contains 'USD'".
_WHOLE_OUTPUT = frozenset({"output", "result", "response", "answer", "text", "it", "payload",
                           "output_payload", "report"})


def _number(text: str) -> int | float:
    cleaned = text.replace(",", "").replace("_", "")
    value = float(cleaned)
    return int(value) if value.is_integer() and "." not in cleaned else value


def _count(text: str | None, default: int = 1) -> int:
    if text is None:
        return default
    lowered = text.lower()
    if lowered in _COUNT_WORDS:
        return _COUNT_WORDS[lowered]
    return int(_number(text))


def _clean_path(text: str | None) -> str | None:
    if text is None:
        return None
    return text[1:-1].strip() if text.startswith("`") and text.endswith("`") else text


def _bound(op: str | None, n: int | float, params: dict[str, Any], integral: bool) -> None:
    """Put ``op n`` into min/max params (integral: strict bounds become inclusive +-1)."""
    op = (op or "=").lower().rstrip(".")
    if re.fullmatch(_EXACT, op) or op == "of":
        params["min"] = params["max"] = n
    elif re.fullmatch(_MIN_INCL, op):
        params["min"] = n
    elif re.fullmatch(_MAX_INCL, op):
        params["max"] = n
    elif re.fullmatch(_MIN_EXCL, op):
        if integral:
            params["min"] = int(n) + 1
        else:
            params["min"], params["min_exclusive"] = n, True
    elif re.fullmatch(_MAX_EXCL, op):
        if integral:
            params["max"] = math.ceil(n) - 1
        else:
            params["max"], params["max_exclusive"] = n, True


def _field_for_text(match: re.Match[str], text: str) -> str | None:
    field = _clean_path(match.groupdict().get("field"))
    if field and field.lower() not in _WHOLE_OUTPUT and field.lower() not in {"word", "words"}:
        return field
    return "summary" if re.search(r"\bsummary\b", text, _FLAGS) else None


def _parse_word_count(text: str) -> Criterion | None:
    params: dict[str, Any] = {}
    match = _WORD_COUNT_BETWEEN.search(text)
    if match:
        low, high = (match["a"] or match["c"] or match["e"]), (match["b"] or match["d"] or match["f"])
        params.update(min=int(_number(low)), max=int(_number(high)))
    else:
        match = _WORD_COUNT_CMP.match(text)
        if match and match["plus"]:
            params["min"] = int(_number(match["n"]))
        elif match:
            # "word count 500" alone reads as a minimum, the usual intent.
            _bound(match["op"] or ">=", _number(match["n"]), params, integral=True)
        else:
            match = _WORDS_CMP.search(text)
            if not match:
                return None
            _bound(match["op"], _number(match["n"]), params, integral=True)
    field = _field_for_text(match, text) if match.re is _WORD_COUNT_CMP else (
        "summary" if re.search(r"\bsummary\b", text, _FLAGS) else None)
    return Criterion(kind=CriterionKind.WORD_COUNT, params={"field": field, **params}, text=text)


def _parse_evidence(text: str) -> Criterion | None:
    match = _EVIDENCE_VERB.search(text) or _EVIDENCE_COUNT.search(text)
    if match:
        params: dict[str, Any] = {}
        n = _count(match["n"])
        _bound(match["op"] or ">=", n, params, integral=True)
        minimum = params.get("min", 1)
        return Criterion(kind=CriterionKind.EVIDENCE, params={"min": max(int(minimum), 1)}, text=text)
    if _EVIDENCE_PASSIVE.match(text):
        return Criterion(kind=CriterionKind.EVIDENCE, params={"min": 1}, text=text)
    return None


def _paths_in(rest: str) -> list[str] | None:
    """Every path in ``rest`` when nothing but paths and filler words remain, else None."""
    paths: list[str] = []
    leftovers = rest
    for match in _PATH_TOKEN.finditer(rest):
        paths.append((match["quoted"] or match["bare"]).strip())
        leftovers = leftovers.replace(match.group(0), " ", 1)
    if not paths or _FILLER.sub(" ", leftovers).strip(" .:"):
        return None
    return paths


def _parse_files(text: str) -> Criterion | None:
    for pattern in (_FILES_LIST, _FILES_VERB, _FILES_PASSIVE):
        match = pattern.match(text)
        if match:
            paths = _paths_in(match["rest"])
            if paths:
                return Criterion(kind=CriterionKind.FILES_MODIFIED, params={"paths": paths}, text=text)
    return None


def _parse_regex(text: str) -> Criterion | None:
    match = _REGEX_MATCH.match(text)
    if match:
        raw, ignore_case = match["pat"], False
        if raw.startswith("/"):
            end = raw.rfind("/")
            ignore_case = "i" in raw[end + 1:]
            raw = raw[1:end]
        else:
            raw = raw[1:-1]
        try:
            re.compile(raw)
        except re.error:
            return None
        field = _field_for_text(match, text)
        return Criterion(kind=CriterionKind.REGEX,
                         params={"field": field, "pattern": raw, "ignore_case": ignore_case}, text=text)
    match = _REGEX_CONTAINS.match(text)
    if match:
        field = _field_for_text(match, text)
        return Criterion(kind=CriterionKind.REGEX, params={
            "field": field, "pattern": re.escape(match["q"][1:-1]), "ignore_case": True}, text=text)
    return None


def _named_path(raw: str | None) -> str | None:
    path = _clean_path(raw)
    if path is None or path.lower() in _VAGUE_NAMES:
        return None
    return path


def _parse_range(text: str) -> Criterion | None:
    params: dict[str, Any] = {}
    if match := _RANGE_BETWEEN.match(text):
        params.update(min=_number(match["a"]), max=_number(match["b"]))
    elif match := _RANGE_INTERVAL.match(text):
        params.update(min=_number(match["a"]), max=_number(match["b"]),
                      min_exclusive=match["lo"] == "(", max_exclusive=match["hi"] == ")")
    elif match := _RANGE_CHAIN.match(text):
        params.update(min=_number(match["a"]), max=_number(match["b"]),
                      min_exclusive=match["op1"] == "<", max_exclusive=match["op2"] == "<")
    elif match := _RANGE_SIGN.match(text):
        sign = match["sign"].lower()
        if sign == "positive":
            params.update(min=0, min_exclusive=True)
        elif sign == "negative":
            params.update(max=0, max_exclusive=True)
        elif sign == "non-positive":
            params.update(max=0)
        else:
            params.update(min=0)
    elif (match := _RANGE_CMP.match(text) or _RANGE_CMP_TIGHT.match(text)) and not re.fullmatch(
            _EXACT, match["op"], _FLAGS):
        _bound(match["op"], _number(match["n"]), params, integral=False)
    else:
        return None
    path = _named_path(match["path"])
    if path is None:
        return None
    return Criterion(kind=CriterionKind.RANGE, params={"path": path, **params}, text=text)


def _literal(text: str) -> object:
    if text[:1] in "\"'" and text[-1:] == text[:1] and len(text) >= 2:
        return text[1:-1]
    lowered = text.lower()
    if lowered in ("true", "false", "null"):
        return {"true": True, "false": False, "null": None}[lowered]
    try:
        return _number(text)
    except ValueError:
        return text


def _parse_equals(text: str) -> Criterion | None:
    match = _EQUALS_LITERAL.match(text) or _EQUALS_BARE.match(text)
    if not match:
        return None
    path = _named_path(match["path"])
    if path is None:
        return None
    return Criterion(kind=CriterionKind.EQUALS, params={"path": path, "value": _literal(match["value"])},
                     text=text)


def _parse_field(text: str) -> Criterion | None:
    if match := _FIELD_TYPED.match(text):
        path = _named_path(match["path"])
        if path is None:
            return None
        return Criterion(kind=CriterionKind.FIELD, params={
            "path": path, "type": TYPE_ALIASES[match["type"].lower()], "anywhere": "." not in path},
            text=text)
    if match := _FIELD_PRESENT.match(text):
        path = _named_path(match["path"])
        if path is None:
            return None
        return Criterion(kind=CriterionKind.FIELD, params={"path": path, "type": None,
                                                           "anywhere": "." not in path}, text=text)
    if match := _VERB_TYPED.match(text):
        path = _named_path(match["path"]) if match["path"] else None
        return Criterion(kind=CriterionKind.FIELD, params={
            "path": path, "type": TYPE_ALIASES[match["type"].lower()],
            "anywhere": path is None or "." not in path}, text=text)
    if match := _VERB_FIELD.match(text):
        path = _named_path(match["path"])
        if path is None:
            return None
        return Criterion(kind=CriterionKind.FIELD, params={"path": path, "type": None,
                                                           "anywhere": "." not in path}, text=text)
    return None


@lru_cache(maxsize=4096)
def _parse_text(text: str) -> Criterion | None:
    line = " ".join(text.split()).rstrip(".!;").strip()
    if not line:
        return None
    if _TESTS_PASS.match(line):
        return Criterion(kind=CriterionKind.TESTS_PASS, params={}, text=text)
    if (_SCHEMA_WORD.search(line) and _SCHEMA_VERB.search(line)) or _VALID_JSON.match(line):
        return Criterion(kind=CriterionKind.JSON_SCHEMA, params={}, text=text)
    for parser in (_parse_word_count, _parse_evidence, _parse_files, _parse_regex, _parse_range,
                   _parse_equals, _parse_field):
        criterion = parser(line)
        if criterion is not None:
            # Through the structured path so free text and dicts carry the same params.
            return _structured({"kind": criterion.kind.value, **criterion.params, "text": text},
                               "criterion")
    return None


# --- structured form -----------------------------------------------------------------------

def _num_param(spec: dict[str, Any], key: str, field: str, issues: list[Issue],
               *, integral: bool = False) -> int | float | None:
    value = spec.get(key)
    if value is None:
        return None
    ok = isinstance(value, int) if integral else isinstance(value, int | float)
    if not ok or isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
        issues.append(Issue(f"{field}.{key}", f"expected {'an integer' if integral else 'a number'}; "
                                              f"got {value!r}"))
        return None
    return value  # type: ignore[no-any-return]


def _str_param(spec: dict[str, Any], key: str, field: str, issues: list[Issue],
               *, required: bool = False) -> str | None:
    value = spec.get(key)
    if value is None:
        if required:
            issues.append(Issue(f"{field}.{key}", f"{key} is required for a {spec.get('kind')} criterion"))
        return None
    if not isinstance(value, str) or not value.strip():
        issues.append(Issue(f"{field}.{key}", f"expected a non-empty string; got {value!r}"))
        return None
    return value


def _structured(spec: dict[str, Any], field: str) -> Criterion | None:
    issues: list[Issue] = []
    if "kind" not in spec and isinstance(spec.get("text"), str):
        return parse_criterion(spec["text"], field)
    kind_name = spec.get("kind")
    if not isinstance(kind_name, str) or kind_name not in CriterionKind._value2member_map_:
        kinds = ", ".join(k.value for k in CriterionKind)
        raise ProtocolError(ErrorCode.INVALID_PACKET, f"{field}.kind: unknown criterion kind {kind_name!r}",
                            issues=[Issue(f"{field}.kind", f"expected one of {kinds}; got {kind_name!r}")])
    kind = CriterionKind(kind_name)
    path_key = "path" if "path" in spec else "field"
    params: dict[str, Any] = {}
    if kind is CriterionKind.JSON_SCHEMA:
        schema = spec.get("schema")
        if schema is not None:
            issues.extend(schema_issues(schema, f"{field}.schema"))
            params["schema"] = schema
    elif kind in (CriterionKind.FIELD, CriterionKind.EQUALS, CriterionKind.RANGE):
        params["path"] = _str_param(spec, path_key, field, issues, required=kind is not CriterionKind.FIELD)
        if kind is CriterionKind.FIELD:
            type_name = spec.get("type")
            if type_name is not None and (not isinstance(type_name, str) or type_name.lower() not in TYPE_ALIASES):
                issues.append(Issue(f"{field}.type", "expected a JSON type (string, number, integer, "
                                                     f"boolean, array, object, null); got {type_name!r}"))
            params["type"] = TYPE_ALIASES.get(type_name.lower()) if isinstance(type_name, str) else None
            params["anywhere"] = bool(spec.get("anywhere", params["path"] is None))
        elif kind is CriterionKind.EQUALS:
            if "value" not in spec:
                issues.append(Issue(f"{field}.value", "value is required for an equals criterion"))
            params["value"] = spec.get("value")
        else:
            params["min"] = _num_param(spec, "min", field, issues)
            params["max"] = _num_param(spec, "max", field, issues)
            params["min_exclusive"] = bool(spec.get("min_exclusive", False))
            params["max_exclusive"] = bool(spec.get("max_exclusive", False))
            if params["min"] is None and params["max"] is None and not issues:
                issues.append(Issue(field, "a range criterion needs min, max or both"))
    elif kind is CriterionKind.REGEX:
        params["field"] = _str_param(spec, path_key, field, issues)
        pattern = _str_param(spec, "pattern", field, issues, required=True)
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                issues.append(Issue(f"{field}.pattern", f"not a valid regular expression: {exc}"))
        params["pattern"] = pattern
        params["ignore_case"] = bool(spec.get("ignore_case", False))
    elif kind is CriterionKind.WORD_COUNT:
        params["field"] = _str_param(spec, path_key, field, issues)
        params["min"] = _num_param(spec, "min", field, issues, integral=True)
        params["max"] = _num_param(spec, "max", field, issues, integral=True)
        if params["min"] is None and params["max"] is None and not issues:
            issues.append(Issue(field, "a word_count criterion needs min, max or both"))
    elif kind is CriterionKind.EVIDENCE:
        minimum = _num_param(spec, "min", field, issues, integral=True)
        params["min"] = 1 if minimum is None else minimum
    elif kind is CriterionKind.FILES_MODIFIED:
        paths = spec.get("paths", spec.get("path"))
        if isinstance(paths, str):
            paths = [paths]
        if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and p for p in paths):
            issues.append(Issue(f"{field}.paths", f"expected a non-empty list of file paths; got {paths!r}"))
        params["paths"] = paths
    if issues:
        raise ProtocolError(ErrorCode.INVALID_PACKET, f"{issues[0].field}: {issues[0].message}",
                            issues=issues)
    text = spec.get("text") if isinstance(spec.get("text"), str) else None
    return Criterion(kind=kind, params=params, text=text or describe(kind, params))


def describe(kind: CriterionKind, params: dict[str, Any]) -> str:
    """A one-line reading of a structured criterion, for reports and the UI."""
    body = ", ".join(f"{key}={value!r}" for key, value in params.items()
                     if value is not None and key != "schema")
    return f"{kind.value}({body})"


def parse_criterion(value: str | dict[str, Any], field: str = "criterion") -> Criterion | None:
    """A criterion from free text or a structured dict; None when the text is vague.

    A malformed structured dict (unknown kind, missing pattern, bad regex...) raises
    ProtocolError(ERR_INVALID_PACKET) naming the field; free text never raises.
    """
    if isinstance(value, str):
        return _parse_text(value)
    if isinstance(value, dict):
        return _structured(value, field)
    raise ProtocolError(ErrorCode.INVALID_PACKET, f"{field}: expected a string or an object",
                        issues=[Issue(field, "a success criterion is free text or an object with a "
                                             f"kind; got {type(value).__name__}")])


def criterion_issues(value: object, field: str = "criterion") -> list[Issue]:
    """Problems with a structured criterion, without raising (vague text is not an issue here)."""
    try:
        parse_criterion(value, field)  # type: ignore[arg-type]
    except ProtocolError as exc:
        return exc.issues or [Issue(field, exc.message)]
    return []


# --- evaluation ----------------------------------------------------------------------------

_MISSING = object()
_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_MAX_WALK = 5000


def _walk_path(root: object, path: str) -> object:
    current = root
    for match in _PATH_PART.finditer(path):
        name, index = match.group(1), match.group(2)
        if index is not None:
            if not isinstance(current, list | tuple) or int(index) >= len(current):
                return _MISSING
            current = current[int(index)]
        elif isinstance(current, dict) and name in current:
            current = current[name]
        else:
            return _MISSING
    return current


def _result_dict(result: ResponsePackage) -> dict[str, Any]:
    return result.model_dump(mode="json")


def locate(result: ResponsePackage, path: str) -> tuple[str, object]:
    """(where it was found, value) for ``path`` (see the module docstring); the value is
    the module's missing marker when nothing is there."""
    payload = result.output_payload
    for prefix in ("output_payload.", "result."):
        if path.startswith(prefix):
            root = payload if prefix == "output_payload." else _result_dict(result)
            return path, _walk_path(root, path[len(prefix):])
    found = _walk_path(payload, path)
    if found is not _MISSING:
        return f"output_payload.{path}", found
    head = _PATH_PART.match(path)
    if head and head.group(1) in type(result).model_fields and head.group(1) != "output_payload":
        return path, _walk_path(_result_dict(result), path)
    return path, _MISSING


def resolve(result: ResponsePackage, path: str) -> object:
    return locate(result, path)[1]


def _find_key(root: object, name: str) -> tuple[str, object] | None:
    """First (path, value) whose key is ``name`` (case-insensitive), depth first."""
    lowered = name.lower()
    stack: list[tuple[str, object]] = [("", root)]
    seen = 0
    while stack and seen < _MAX_WALK:
        prefix, node = stack.pop(0)
        seen += 1
        if isinstance(node, dict):
            for key, value in node.items():
                child = f"{prefix}.{key}" if prefix else str(key)
                if str(key).lower() == lowered:
                    return child, value
                stack.append((child, value))
        elif isinstance(node, list):
            stack.extend((f"{prefix}[{i}]", value) for i, value in enumerate(node))
    return None


def _find_typed(root: object, type_name: str) -> str | None:
    stack: list[tuple[str, object]] = [("", root)]
    seen = 0
    while stack and seen < _MAX_WALK:
        prefix, node = stack.pop(0)
        seen += 1
        if prefix and value_has_type(node, type_name):
            return prefix
        if isinstance(node, dict):
            stack.extend(((f"{prefix}.{key}" if prefix else str(key)), value) for key, value in node.items())
        elif isinstance(node, list):
            stack.extend((f"{prefix}[{i}]", value) for i, value in enumerate(node))
    return None


def _strings(node: object, out: list[str], budget: list[int]) -> None:
    if budget[0] <= 0:
        return
    budget[0] -= 1
    if isinstance(node, str):
        out.append(node)
    elif isinstance(node, dict):
        for value in node.values():
            _strings(value, out, budget)
    elif isinstance(node, list | tuple):
        for value in node:
            _strings(value, out, budget)


def result_text(result: ResponsePackage) -> str:
    """Every string in output_payload, then the summary: the text word counts and regexes read."""
    parts: list[str] = []
    _strings(result.output_payload, parts, [_MAX_WALK])
    if result.summary:
        parts.append(result.summary)
    return "\n".join(parts)


def _text_at(result: ResponsePackage, field: str | None) -> tuple[str | None, str]:
    if not field:
        return result_text(result), "the output"
    value = resolve(result, field)
    if value is _MISSING or value is None:
        return None, field
    if isinstance(value, str):
        return value, field
    parts: list[str] = []
    _strings(value, parts, [_MAX_WALK])
    return "\n".join(parts) if parts else json.dumps(value, default=str), field


def _empty(value: object) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _short(value: object) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_json_schema(c: Criterion, result: ResponsePackage, output_schema: dict[str, Any] | None) -> tuple[bool, str]:
    schema = c.params.get("schema") or output_schema
    if not schema:
        if isinstance(result.output_payload, dict):
            return True, "no expected output schema; output_payload is a JSON object"
        return False, "no expected output schema and output_payload is not a JSON object"
    issues = validate_instance(schema, result.output_payload, "output_payload")
    if not issues:
        return True, "output_payload is valid against the expected output schema"
    listed = "; ".join(f"{issue.field}: {issue.message}" for issue in issues[:5])
    more = f" (and {len(issues) - 5} more)" if len(issues) > 5 else ""
    return False, f"{len(issues)} schema violation(s): {listed}{more}"


def _check_field(c: Criterion, result: ResponsePackage) -> tuple[bool, str]:
    path, type_name = c.params.get("path"), c.params.get("type")
    if path is None:
        if not type_name:
            return False, "field criterion names neither a path nor a type"
        found_path = _find_typed(result.output_payload, type_name)
        if found_path is None:
            return False, f"no {type_name} value anywhere in output_payload"
        return True, f"output_payload.{found_path} is a {type_name}"
    where, value = locate(result, path)
    if value is _MISSING and c.params.get("anywhere"):
        hit = _find_key(result.output_payload, path)
        if hit is not None:
            where, value = f"output_payload.{hit[0]}", hit[1]
    if value is _MISSING:
        return False, f"{path} is missing"
    if type_name:
        if value_has_type(value, type_name):
            return True, f"{where} is a {type_name} ({_short(value)})"
        return False, f"{where} is {_short(value)}, expected a {type_name}"
    if _empty(value):
        return False, f"{where} is present but empty"
    return True, f"{where} = {_short(value)}"


def _check_regex(c: Criterion, result: ResponsePackage) -> tuple[bool, str]:
    text, where = _text_at(result, c.params.get("field"))
    if text is None:
        return False, f"{where} is missing"
    flags = re.IGNORECASE if c.params.get("ignore_case") else 0
    pattern = _compiled(c.params["pattern"], flags)
    found = pattern.search(text)
    if found:
        return True, f"{where} matches /{c.params['pattern']}/ at {_short(found.group(0))}"
    return False, f"{where} does not match /{c.params['pattern']}/"


@lru_cache(maxsize=512)
def _compiled(pattern: str, flags: int) -> re.Pattern[str]:
    return re.compile(pattern, flags)


def _check_word_count(c: Criterion, result: ResponsePackage) -> tuple[bool, str]:
    text, where = _text_at(result, c.params.get("field"))
    if text is None:
        return False, f"{where} is missing"
    words = len(text.split())
    low, high = c.params.get("min"), c.params.get("max")
    wanted = " and ".join(part for part in (
        f"at least {low}" if low is not None else "", f"at most {high}" if high is not None else "") if part)
    ok = (low is None or words >= low) and (high is None or words <= high)
    return ok, f"{where} has {words} words (wanted {wanted})"


def _check_equals(c: Criterion, result: ResponsePackage) -> tuple[bool, str]:
    path, expected = c.params["path"], c.params.get("value")
    value = resolve(result, path)
    if value is _MISSING:
        return False, f"{path} is missing"
    # True == 1 in Python but not in JSON: booleans only equal booleans.
    bools = isinstance(expected, bool) or isinstance(value, bool)
    same = value is expected if bools else value == expected
    return same, f"{path} = {_short(value)}" + ("" if same else f", expected {_short(expected)}")


def _check_range(c: Criterion, result: ResponsePackage) -> tuple[bool, str]:
    path = c.params["path"]
    value = resolve(result, path)
    if value is _MISSING:
        return False, f"{path} is missing"
    if isinstance(value, str):
        try:
            value = float(value.replace(",", ""))
        except ValueError:
            return False, f"{path} is {_short(value)}, not a number"
    if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value):
        return False, f"{path} is {_short(value)}, not a number"
    low, high = c.params.get("min"), c.params.get("max")
    ok = True
    if low is not None:
        ok = value > low if c.params.get("min_exclusive") else value >= low
    if high is not None and ok:
        ok = value < high if c.params.get("max_exclusive") else value <= high
    bounds = f"{'(' if c.params.get('min_exclusive') else '['}{'-inf' if low is None else low}, " \
             f"{'inf' if high is None else high}{')' if c.params.get('max_exclusive') else ']'}"
    return ok, f"{path} = {value} {'within' if ok else 'outside'} {bounds}"


_SOURCE_LISTS = ("sources", "citations", "references", "evidence")


def _check_evidence(c: Criterion, result: ResponsePackage) -> tuple[bool, str]:
    wanted = int(c.params.get("min", 1))
    count = sum(1 for item in result.evidence if item.source and item.source.strip())
    if count >= wanted:
        return True, f"{count} evidence item(s) with a source (wanted at least {wanted})"
    payload = result.output_payload if isinstance(result.output_payload, dict) else {}
    for name in _SOURCE_LISTS:
        listed = payload.get(name)
        if isinstance(listed, list):
            extra = sum(1 for entry in listed if not _empty(entry))
            if count + extra >= wanted:
                return True, (f"{count} evidence item(s) and {extra} entr(ies) in output_payload.{name} "
                              f"(wanted at least {wanted})")
    return False, f"{count} evidence item(s) with a source; wanted at least {wanted}"


def _norm_path(path: str) -> str:
    cleaned = path.strip().replace("\\", "/")
    while cleaned.startswith("./"):
        cleaned = cleaned[2:]
    return cleaned


def _check_files(c: Criterion, result: ResponsePackage) -> tuple[bool, str]:
    modified = {_norm_path(p) for p in result.files_modified}
    payload = result.output_payload if isinstance(result.output_payload, dict) else {}
    for name in ("files_modified", "modified_files"):
        listed = payload.get(name)
        if isinstance(listed, list):
            modified.update(_norm_path(p) for p in listed if isinstance(p, str))
    missing = [p for p in c.params["paths"] if _norm_path(p) not in modified
               and not any(m.endswith("/" + _norm_path(p)) for m in modified)]
    if missing:
        return False, f"not modified: {', '.join(missing)}"
    return True, f"modified: {', '.join(c.params['paths'])}"


_TEST_FLAGS = ("tests_pass", "tests_passed", "tests_passing", "all_tests_pass", "all_tests_passed",
               "tests_ok")
_PASS_WORDS = frozenset({"pass", "passed", "passing", "ok", "green", "success", "succeeded"})
_TEST_MENTION = re.compile(r"\btests?\b|\bpytest\b|\btest suite\b", _FLAGS)


def _check_tests(c: Criterion, result: ResponsePackage) -> tuple[bool, str]:
    payload = result.output_payload if isinstance(result.output_payload, dict) else {}
    for name in _TEST_FLAGS:
        if name in payload:
            return payload[name] is True, f"output_payload.{name} = {_short(payload[name])}"
    for name in ("tests", "test_results", "test_result"):
        report = payload.get(name)
        if isinstance(report, dict):
            failed = report.get("failed", report.get("failures", 0))
            errors = report.get("errors", 0)
            passed = report.get("passed")
            status = str(report.get("status", report.get("result", ""))).lower()
            if isinstance(failed, int) and isinstance(errors, int) and (failed or errors):
                return False, f"output_payload.{name} reports {failed} failed, {errors} errors"
            if status in _PASS_WORDS or (isinstance(passed, int) and passed > 0):
                return True, f"output_payload.{name} = {_short(report)}"
        elif isinstance(report, str) and report.strip().lower() in _PASS_WORDS:
            return True, f"output_payload.{name} = {report!r}"
    for item in result.acceptance_criteria_confirmation:
        if _TEST_MENTION.search(item.criterion):
            if item.met and item.evidence:
                return True, f"confirmed with evidence: {item.criterion!r} ({_short(item.evidence)})"
            return False, f"confirmation {item.criterion!r} is {'met without evidence' if item.met else 'not met'}"
    return False, "the result does not report a test run (no tests_passed flag, tests report or confirmation)"


_CHECKS = {
    CriterionKind.FIELD: _check_field, CriterionKind.REGEX: _check_regex,
    CriterionKind.WORD_COUNT: _check_word_count, CriterionKind.EQUALS: _check_equals,
    CriterionKind.RANGE: _check_range, CriterionKind.EVIDENCE: _check_evidence,
    CriterionKind.FILES_MODIFIED: _check_files, CriterionKind.TESTS_PASS: _check_tests,
}


def check(criterion: Criterion, result: ResponsePackage,
          output_schema: dict[str, Any] | None = None) -> tuple[bool, str]:
    """(met, detail) for one parsed criterion."""
    if criterion.kind is CriterionKind.JSON_SCHEMA:
        return _check_json_schema(criterion, result, output_schema)
    return _CHECKS[criterion.kind](criterion, result)


def _label(raw: object) -> str:
    if isinstance(raw, str):
        return raw
    try:
        return json.dumps(raw, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(raw)


def _self_claim(result: ResponsePackage, text: str) -> str:
    wanted = " ".join(text.split()).lower()
    for item in result.acceptance_criteria_confirmation:
        if " ".join(item.criterion.split()).lower() == wanted:
            claim = "met" if item.met else "not met"
            return f"; the subagent reports it {claim}" + (f" ({item.evidence})" if item.evidence else "")
    return ""


def evaluate_criteria(result: ResponsePackage, criteria: list[str | dict[str, Any]],
                      output_schema: dict[str, Any] | None = None) -> CriteriaReport:
    """Check ``result`` against every criterion; every one is reported (met + detail)."""
    items: list[CriterionResult] = []
    for index, raw in enumerate(criteria):
        label = _label(raw)
        try:
            criterion = parse_criterion(raw, f"success_criteria[{index}]")
        except ProtocolError as exc:
            items.append(CriterionResult(criterion=label, kind=None, met=False, checkable=False,
                                         detail=f"invalid criterion: {exc.message}"))
            continue
        if criterion is None:
            items.append(CriterionResult(
                criterion=label, kind=None, met=False, checkable=False,
                detail="not machine-checkable: no check could be read from this text"
                       + _self_claim(result, label)))
            continue
        try:
            met, detail = check(criterion, result, output_schema)
        except (ProtocolError, re.error, TypeError, ValueError, RecursionError) as exc:
            met, detail = False, f"could not be checked: {exc}"
        items.append(CriterionResult(criterion=label, kind=criterion.kind.value, met=met, detail=detail))
    return CriteriaReport(items=items)
