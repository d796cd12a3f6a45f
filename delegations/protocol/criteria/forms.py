"""The structured form of a success criterion: its kinds, and the checks that it is well formed.

``path`` and ``field`` are interchangeable spellings::

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
    {"kind": "appears_in", "path": "price", "source": "quote_text"}   # where the answer came from:
    {"kind": "quoted_from", "path": "evidence", "source": "review"}   #   a value, a quote, one of the
    {"kind": "one_of_input", "path": "currency", "source": "order.currency"}   # input's values
    {"kind": "words_absent", "words_of": "question", "source": "context",
     "when": {"path": "found", "value": false}}              # found: false only when plausible
    {"kind": "confident", "path": "sentiment", "min": 0.8}   # the model chose this label (an
                                                             #   enum or boolean output field) with
                                                             #   a probability of at least 0.8
    {"text": "Word count > 500"}                             # parsed like free text (grammar)

Any structured criterion may add ``"review": true``: a result that fails only criteria so
marked (and ``confident`` ones, which always are) is put to a person to confirm or correct,
instead of being sent back to the model.

A malformed one (unknown kind, missing pattern, bad regex...) raises
``ProtocolError(ERR_INVALID_PACKET)`` naming the field.
"""

from __future__ import annotations

import json
import math
import re
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .. import patterns
from ..errors import ErrorCode, Issue, ProtocolError
from ..schemas import schema_issues


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
    APPEARS_IN = "appears_in"
    QUOTED_FROM = "quoted_from"
    ONE_OF_INPUT = "one_of_input"
    WORDS_ABSENT = "words_absent"
    CONFIDENT = "confident"


# Criteria that check an answer against the run's input_data (its ``source``), so that a
# copied worked example or an invented value fails; ``when`` limits one to results whose
# field has a value (``{"path": "found", "value": true}``).
GROUNDING_KINDS = frozenset({CriterionKind.APPEARS_IN, CriterionKind.QUOTED_FROM,
                             CriterionKind.ONE_OF_INPUT, CriterionKind.WORDS_ABSENT})


class Criterion(BaseModel):
    """One machine-checkable criterion: its kind, its parameters and the text it came from."""

    model_config = ConfigDict(frozen=True)

    kind: CriterionKind
    params: dict[str, Any] = Field(default_factory=dict)
    text: str = ""
    # when only criteria marked so fail, a person reviews the result instead of the model
    # correcting it (a ``confident`` criterion always is: sampling again gives the same guess)
    review: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"kind": str(self.kind), **self.params, **({"review": True} if self.review else {})}

    @property
    def field_path(self) -> str | None:
        """The output field the criterion checks, when it names one."""
        path = self.params.get("path") or self.params.get("field")
        return path if isinstance(path, str) and path else None


def output_path(path: str) -> str:
    """A criterion path inside the output payload (``output_payload.a.b`` -> ``a.b``)."""
    for prefix in ("output_payload.", "result.output_payload."):
        if path.startswith(prefix):
            path = path[len(prefix):]
    return path


def output_field(path: str) -> str:
    """The top-level output field a criterion path names (``output_payload.a.b`` -> ``a``)."""
    return re.split(r"[.\[]", output_path(path), maxsplit=1)[0]


# Type names a criterion may use -> the JSON type they mean.
TYPE_ALIASES: dict[str, str] = {
    "number": "number", "numeric": "number", "float": "number", "double": "number",
    "decimal": "number", "integer": "integer", "int": "integer", "whole number": "integer",
    "string": "string", "str": "string", "text": "string", "boolean": "boolean",
    "bool": "boolean", "array": "array", "list": "array", "object": "object",
    "dict": "object", "mapping": "object", "null": "null",
}


def value_has_type(value: object, type_name: str) -> bool:
    """Whether ``value`` is of the JSON type ``type_name`` (a TYPE_ALIASES value)."""
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


def structured_criterion(spec: dict[str, Any], field: str) -> Criterion:
    """A criterion from its structured form (with a ``kind``); raises when it is malformed."""
    issues: list[Issue] = []
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
                patterns.compiled(pattern)
            except patterns.PatternError as exc:
                issues.append(Issue(f"{field}.pattern", f"not a regular expression Handoff runs: {exc}"))
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
    elif kind in GROUNDING_KINDS:
        _grounding_params(kind, spec, field, issues, params)
    elif kind is CriterionKind.CONFIDENT:
        params["path"] = _str_param(spec, path_key, field, issues, required=True)
        params["min"] = _probability(spec, field, issues)
    review = spec.get("review", kind is CriterionKind.CONFIDENT)
    if not isinstance(review, bool):
        issues.append(Issue(f"{field}.review", f"expected true or false; got {review!r}"))
    if issues:
        raise ProtocolError(ErrorCode.INVALID_PACKET, f"{issues[0].field}: {issues[0].message}",
                            issues=issues)
    text = spec.get("text") if isinstance(spec.get("text"), str) else None
    return Criterion(kind=kind, params=params, text=text or describe(kind, params),
                     review=review is True or kind is CriterionKind.CONFIDENT)


def _probability(spec: dict[str, Any], field: str, issues: list[Issue]) -> float | None:
    value = spec.get("min", spec.get("probability"))
    if value is None:
        issues.append(Issue(f"{field}.min", "min is required for a confident criterion: the lowest "
                                            "probability to accept, between 0 and 1 (e.g. 0.8)"))
        return None
    number = _num_param({"min": value}, "min", field, issues)
    if number is not None and not 0 <= number <= 1:
        issues.append(Issue(f"{field}.min", f"expected a probability between 0 and 1; got {value!r} "
                                            "(write 80% as 0.8)"))
        return None
    return float(number) if number is not None else None


def _grounding_params(kind: CriterionKind, spec: dict[str, Any], field: str, issues: list[Issue],
                      params: dict[str, Any]) -> None:
    if kind is CriterionKind.WORDS_ABSENT:
        params["words_of"] = _str_param(spec, "words_of", field, issues, required=True)
    else:
        params["path"] = _str_param(spec, "field" if "field" in spec else "path", field, issues, required=True)
    params["source"] = _str_param(spec, "source", field, issues, required=True)
    when = spec.get("when")
    if when is not None:
        if not isinstance(when, dict) or not isinstance(when.get("path"), str) or "value" not in when:
            issues.append(Issue(f"{field}.when", 'expected {"path": "<output field>", "value": <value>}; '
                                                 f"got {when!r}"))
        else:
            params["when"] = {"path": when["path"], "value": when["value"]}


def describe(kind: CriterionKind, params: dict[str, Any]) -> str:
    """A one-line reading of a structured criterion, for reports and the UI."""
    if kind in GROUNDING_KINDS:
        return _grounding_text(kind, params)
    if kind is CriterionKind.CONFIDENT:
        return f"`{params.get('path')}` is chosen with a probability of at least {params.get('min'):g}"
    body = ", ".join(f"{key}={value!r}" for key, value in params.items()
                     if value is not None and key != "schema")
    return f"{kind.value}({body})"



_GROUNDING_VERBS = {CriterionKind.APPEARS_IN: "appears in", CriterionKind.QUOTED_FROM: "is quoted from",
                    CriterionKind.ONE_OF_INPUT: "is one of the values of"}


def _grounding_text(kind: CriterionKind, params: dict[str, Any]) -> str:
    """The grammar's own wording, so the line reads back as the same criterion."""
    if kind is CriterionKind.WORDS_ABSENT:
        text = f"the key words of `{params.get('words_of')}` are not all in `{params.get('source')}`"
    else:
        text = f"`{params.get('path')}` {_GROUNDING_VERBS[kind]} `{params.get('source')}`"
    when = params.get("when")
    if when:
        value = when["value"]
        shown = json.dumps(value) if not isinstance(value, str) else f'"{value}"'
        return f"When `{when['path']}` is {shown}, {text}"
    return text[0].upper() + text[1:]
