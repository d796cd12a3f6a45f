"""Free text -> a structured criterion: the grammar of checkable success criteria.

Case-insensitive; a trailing period is ignored; names in backticks are taken verbatim;
the first rule that matches wins:

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
- ``appears_in``, ``quoted_from``, ``one_of_input``, ``words_absent`` (where the answer came
  from; a name after "in"/"from"/"of" is a key of input_data): "`price` appears in
  `quote_text`", "price is found in quote_text", "`evidence` is quoted from `review`",
  "evidence is a quote of review", "`currency` is one of the values of `order.currency`",
  "the key words of `question` are not all in `context`"; each may start with
  "When `found` is true, " (checked only for results whose field has that value).
- ``confident``: "`sentiment` is chosen with a probability of at least 0.8", "`verdict` has
  a probability of at least 90%", "the model is at least 80% sure of `found`".
- ``field``: "`price` is a number", "price: integer", "currency is present",
  "Return a float value" (some value of that type anywhere in output_payload),
  "Return a number for price", "Specify currency" / "Include a timestamp" (a key of that
  name, at any depth of output_payload, with a non-empty value).

Anything else ("Do a good job", "Make it nice", "Provide details") is vague:
``parse_criterion`` returns None and lint reports ``VAGUE_CRITERIA``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Any

from ..errors import ErrorCode, Issue, ProtocolError
from .forms import TYPE_ALIASES, Criterion, CriterionKind, structured_criterion

_TYPE_RE = "|".join(sorted((re.escape(name) for name in TYPE_ALIASES), key=len, reverse=True))
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

_WHEN = re.compile(r"^(?:when|if|where)\s+(?P<path>" + _PATH + r")\s+(?:is|==|=|equals)\s+(?P<value>"
                   + _LITERAL + r"|[\w-]+)\s*,\s*(?P<rest>.+)$", _FLAGS)
_APPEARS_IN = re.compile(r"^(?:the\s+)?(?P<path>" + _PATH + r")\s+(?:must\s+|should\s+)?(?:appears?|"
                         r"is (?:found|given|present|stated|written)|(?:can|must) be found|occurs?)\s+"
                         r"(?:in|within)\s+(?:the\s+)?(?:input\s+)?(?P<source>" + _PATH + r")$", _FLAGS)
_QUOTED_FROM = re.compile(r"^(?:the\s+)?(?P<path>" + _PATH + r")\s+(?:must\s+|should\s+)?(?:(?:is|be)\s+"
                          r"(?:quoted|copied|taken) (?:exactly )?from|(?:is|be) an? (?:exact )?quote (?:of|from)|"
                          r"quotes)\s+(?:the\s+)?(?:input\s+)?(?P<source>" + _PATH + r")$", _FLAGS)
_ONE_OF_INPUT = re.compile(r"^(?:the\s+)?(?P<path>" + _PATH + r")\s+(?:must\s+|should\s+)?(?:is|be)\s+"
                           r"one of(?: the values of)?\s+(?:the\s+)?(?:input\s+)?(?P<source>" + _PATH + r")$",
                           _FLAGS)
_WORDS_ABSENT = re.compile(r"^(?:the\s+)?(?:key\s+)?words of\s+(?P<words>" + _PATH + r")\s+are\s+not\s+"
                           r"(?:all\s+)?(?:found\s+)?in\s+(?:the\s+)?(?:input\s+)?(?P<source>" + _PATH + r")$",
                           _FLAGS)

_PROBABILITY = r"(?P<n>" + _NUM + r")\s*(?P<pct>%|percent)?"
_CONFIDENT = re.compile(
    r"^(?:the\s+)?(?P<path>" + _PATH + r")\s+(?:is\s+chosen\s+with|has|is\s+given\s+with)\s+(?:a\s+)?"
    r"(?:calibrated\s+)?(?:probability|confidence)\s+(?:of\s+)?(?:at least|>=|≥|no less than)\s+"
    + _PROBABILITY + r"$", _FLAGS)
_CONFIDENT_SURE = re.compile(
    r"^(?:the\s+)?(?:model|subagent)\s+is\s+(?:at least\s+)?" + _PROBABILITY
    + r"\s+(?:sure|confident|certain)\s+(?:of|about)\s+(?:the\s+)?(?P<path>" + _PATH + r")$", _FLAGS)

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


def _parse_grounding(text: str) -> Criterion | None:
    params: dict[str, Any] = {}
    if when := _WHEN.match(text):
        params["when"] = {"path": _clean_path(when["path"]), "value": _literal(when["value"])}
        text = when["rest"].strip()
    if match := _WORDS_ABSENT.match(text):
        return Criterion(kind=CriterionKind.WORDS_ABSENT, text=text, params={
            "words_of": _clean_path(match["words"]), "source": _clean_path(match["source"]), **params})
    for kind, pattern in ((CriterionKind.APPEARS_IN, _APPEARS_IN), (CriterionKind.QUOTED_FROM, _QUOTED_FROM),
                          (CriterionKind.ONE_OF_INPUT, _ONE_OF_INPUT)):
        # a backticked name is taken as it is, even "answer" or "result"
        if (match := pattern.match(text)) and (path := _clean_path(match["path"]) if match["path"].startswith("`")
                                                else _named_path(match["path"])):
            return Criterion(kind=kind, text=text, params={
                "path": path, "source": _clean_path(match["source"]), **params})
    return None


def _parse_confident(text: str) -> Criterion | None:
    match = _CONFIDENT.match(text) or _CONFIDENT_SURE.match(text)
    if not match:
        return None
    number = float(_number(match["n"]))
    return Criterion(kind=CriterionKind.CONFIDENT, text=text, params={
        "path": _clean_path(match["path"]), "min": number / 100 if match["pct"] else number})


@lru_cache(maxsize=4096)
def _parse_text(text: str) -> Criterion | None:
    line = " ".join(text.split()).rstrip(".!;").strip()
    if not line:
        return None
    if _TESTS_PASS.match(line):
        return Criterion(kind=CriterionKind.TESTS_PASS, params={}, text=text)
    if (_SCHEMA_WORD.search(line) and _SCHEMA_VERB.search(line)) or _VALID_JSON.match(line):
        return Criterion(kind=CriterionKind.JSON_SCHEMA, params={}, text=text)
    for parser in (_parse_confident, _parse_grounding, _parse_word_count, _parse_evidence, _parse_files,
                   _parse_regex, _parse_range, _parse_equals, _parse_field):
        criterion = parser(line)
        if criterion is not None:
            try:
                # Through the structured path so free text and dicts carry the same params.
                return structured_criterion({"kind": criterion.kind.value, **criterion.params,
                                             "text": text}, "criterion")
            except ProtocolError:
                # free text never raises: a probability outside 0-1 reads as written, is
                # never met, and lint names it (CONFIDENCE_OUT_OF_RANGE)
                return criterion.model_copy(update={"review": True})
    return None


def parse_criterion(value: str | dict[str, Any], field: str = "criterion") -> Criterion | None:
    """A criterion from free text or a structured dict; None when the text is vague.

    A malformed structured dict (unknown kind, missing pattern, bad regex...) raises
    ProtocolError(ERR_INVALID_PACKET) naming the field; free text never raises.
    """
    if isinstance(value, str):
        return _parse_text(value)
    if isinstance(value, dict):
        if "kind" not in value and isinstance(value.get("text"), str):
            return _parse_text(value["text"])  # {"text": ...} reads like the text alone
        return structured_criterion(value, field)
    raise ProtocolError(ErrorCode.INVALID_PACKET, f"{field}: expected a string or an object",
                        issues=[Issue(field, "a success criterion is free text or an object with a "
                                             f"kind; got {type(value).__name__}")])


def readable_criteria(criteria: Iterable[str | dict[str, Any]]) -> Iterator[Criterion]:
    """The criteria that read as checks, in order: vague text and malformed dicts are
    skipped (lint and the criteria report say what is wrong with them)."""
    for raw in criteria:
        try:
            criterion = parse_criterion(raw)
        except ProtocolError:
            continue
        if criterion is not None:
            yield criterion


def criterion_reading(raw: object, parsed: Criterion | None = None) -> str:
    """How a criterion reads for a person: text as its author wrote it, a structured one in
    its kind's words (which read back as the same criterion), one that is not a criterion
    as JSON. ``parsed``: what :func:`parse_criterion` made of ``raw``, when the caller has it."""
    if isinstance(raw, str):
        return raw
    if parsed is None:
        try:
            parsed = parse_criterion(raw) if isinstance(raw, dict) else None
        except ProtocolError:
            parsed = None
    if parsed is not None:
        return parsed.text
    try:
        return json.dumps(raw, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(raw)


def criterion_issues(value: object, field: str = "criterion") -> list[Issue]:
    """Problems with a structured criterion, without raising (vague text is not an issue here)."""
    try:
        parse_criterion(value, field)  # type: ignore[arg-type]
    except ProtocolError as exc:
        return exc.issues or [Issue(field, exc.message)]
    return []

