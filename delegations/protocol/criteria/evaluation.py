"""Checking a result against its success criteria: every criterion reported, met or not.

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
- ``appears_in``, ``quoted_from``, ``one_of_input`` and ``words_absent`` read their
  ``source`` from the run's ``input_data`` (a dotted path); a source the input lacks is
  not met, and :func:`missing_inputs` names it. Numbers are compared as numbers in every
  spelling of the source (``279.99`` is in "279,99", "$279.99" and "USD 279.99"); text with
  case, whitespace and quote marks normalised; a currency code is also found by its sign or
  name (USD by "$" or "dollars").
- ``confident`` reads the probability the model gave the field's value, which the runner
  puts in the result's ``metrics["labels"]`` from the adapter's scores (never from the
  model's own words): met at or above ``min``. A model that gives no probabilities cannot
  meet it: the item says "cannot be checked with this model" (``checkable=False``), so
  the report never reads all met. A value a person set in review is reported as theirs.
- Every top-level output field (of the expected output schema) that the result holds and no
  criterion names is listed in ``fields_unchecked``: the schema alone says a label is one of its values, not
  that it is the right one. The report's ``summary`` reads "all met" only when every
  criterion is met and no field is unchecked ("3 of 3 criteria met · 1 field unchecked").
- Free text that does not parse is reported with ``met=False, checkable=False`` and a
  detail saying it is not machine-checkable (and what the subagent itself claimed for
  it, if anything): the report stays honest instead of trusting self-assessment.
  ``all_met`` needs every criterion met; ``checkable_met`` ignores unparsed ones.
"""

from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from .. import patterns
from ..errors import ProtocolError
from ..schemas import validate_instance
from . import grounding
from .forms import GROUNDING_KINDS, Criterion, CriterionKind, output_field, value_has_type
from .grammar import criterion_reading, parse_criterion, readable_criteria

if TYPE_CHECKING:
    from ..results import ResponsePackage


class CriterionResult(BaseModel):
    criterion: str
    kind: str | None
    met: bool
    detail: str
    checkable: bool = True
    applies: bool = True   # False: its ``when`` does not hold for this result (met, vacuously)

    def as_dict(self) -> dict[str, Any]:
        # what model_dump(mode="json") gives (every field is JSON already), at a fraction of
        # its cost: every run that has success criteria reports them in its result event
        return {name: getattr(self, name) for name in type(self).model_fields}


class CriteriaReport(BaseModel):
    items: list[CriterionResult] = Field(default_factory=list)
    # top-level output fields no criterion checks (only the schema does)
    fields_unchecked: list[str] = Field(default_factory=list)

    @property
    def all_met(self) -> bool:
        return all(item.met for item in self.items)

    @property
    def summary(self) -> str:
        return criteria_summary(self.as_dict())

    @property
    def checkable_met(self) -> bool:
        return all(item.met for item in self.items if item.checkable)

    @property
    def unchecked(self) -> list[str]:
        return [item.criterion for item in self.items if not item.checkable]

    def as_dict(self) -> dict[str, Any]:
        data = {"items": [item.as_dict() for item in self.items], "all_met": self.all_met,
                "checkable_met": self.checkable_met, "fields_unchecked": list(self.fields_unchecked)}
        return {**data, "summary": criteria_summary(data)}


def criteria_summary(report: dict[str, Any]) -> str:
    """How a criteria report reads in one line: "all met" only when every criterion is met
    and every output field is checked by one; else "2 of 3 criteria met", with "· 1 field
    unchecked" when a field is left to the schema. Works on stored reports too."""
    every, unchecked = report_lists(report)
    items = [item for item in every if item.get("applies", True)]
    met = sum(1 for item in items if item.get("met"))
    text = "all met" if met == len(items) and items and not unchecked else f"{met} of {len(items)} criteria met"
    if unchecked:
        text += f" · {len(unchecked)} field{'s' if len(unchecked) != 1 else ''} unchecked"
    if len(every) > len(items):   # "3 of 3 met" counted one whose condition did not hold
        text += f" · {len(every) - len(items)} does not apply" if len(every) - len(items) == 1 \
            else f" · {len(every) - len(items)} do not apply"
    return text



def report_lists(report: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """A stored report's items and unchecked field names, those that read as such (a
    report imported from a file may hold anything)."""
    items, unchecked = report.get("items"), report.get("fields_unchecked")
    return ([item for item in items if isinstance(item, dict)] if isinstance(items, list) else [],
            [name for name in unchecked if isinstance(name, str)] if isinstance(unchecked, list) else [])


_MISSING = grounding.MISSING
_MAX_WALK = 5000


def _result_dict(result: ResponsePackage) -> dict[str, Any]:
    return result.model_dump(mode="json")


def locate(result: ResponsePackage, path: str) -> tuple[str, object]:
    """(where it was found, value) for ``path`` (see the module docstring); the value is
    the module's missing marker when nothing is there."""
    payload = result.output_payload
    for prefix in ("output_payload.", "result."):
        if path.startswith(prefix):
            root = payload if prefix == "output_payload." else _result_dict(result)
            return path, grounding.value_at(root, path[len(prefix):])
    found = grounding.value_at(payload, path)
    if found is not _MISSING:
        return f"output_payload.{path}", found
    head = grounding.PATH_PART.match(path)
    if head and head.group(1) in type(result).model_fields and head.group(1) != "output_payload":
        return path, grounding.value_at(_result_dict(result), path)
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
    found = patterns.search(c.params["pattern"], text, ignore_case=bool(c.params.get("ignore_case")))
    if found is not None:
        return True, f"{where} matches /{c.params['pattern']}/ at {_short(found)}"
    return False, f"{where} does not match /{c.params['pattern']}/"


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
_TEST_MENTION = re.compile(r"\btests?\b|\bpytest\b|\btest suite\b", re.IGNORECASE)


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


def _condition_unmet(c: Criterion, result: ResponsePackage) -> str | None:
    """Why the criterion does not apply to this result (its ``when``), or None when it does."""
    when = c.params.get("when")
    if not when:
        return None
    value = resolve(result, when["path"])
    expected = when["value"]
    bools = isinstance(expected, bool) or isinstance(value, bool)
    if value is not _MISSING and (value is expected if bools else value == expected):
        return None
    return f"does not apply: {when['path']} is {_short(None if value is _MISSING else value)}, " \
           f"not {_short(expected)}"


NO_PAGE_FETCHED = ("the run fetched no page with http_get (a failed fetch or an error status such as 404 "
                   "brings none)")


def _check_grounded(c: Criterion, result: ResponsePackage, input_data: dict[str, Any]) -> tuple[bool, str]:
    if (skipped := _condition_unmet(c, result)) is not None:
        return True, skipped
    source = c.params["source"]
    given = grounding.input_value(input_data, source)
    if c.kind is CriterionKind.WORDS_ABSENT:
        return words_absent(c, input_data)
    path = c.params["path"]
    if grounding.is_missing(given) and source == grounding.FETCHED_PAGES:
        return False, f"{NO_PAGE_FETCHED}, so {path} cannot be checked against one"
    if grounding.is_missing(given):
        return False, f"the input has no {source}, so {path} cannot be checked against it"
    where, value = locate(result, path)
    if value is _MISSING or value is None:
        return False, f"{path} is missing"
    text = grounding.source_text(given)
    if c.kind is CriterionKind.APPEARS_IN:
        found, what = grounding.appears(value, text)
        return found, (f"{where} = {_short(value)} appears in {source}" if found
                       else f"{where} = {_short(value)}, but {_short(what)} is not in {source}")
    if c.kind is CriterionKind.QUOTED_FROM:
        if not isinstance(value, str) or not value.strip():
            return False, f"{where} is {_short(value)}: nothing is quoted from {source}"
        found = grounding.quoted(value, text)
        return found, (f"{where} is quoted from {source}" if found
                       else f"{where} = {_short(value)} is not a quote of {source}")
    found = grounding.one_of(value, given)
    return found, (f"{where} = {_short(value)} is one of {source}" if found
                   else f"{where} = {_short(value)} is not one of {source} ({_short(given)})")


def words_absent(c: Criterion, input_data: dict[str, Any]) -> tuple[bool, str]:
    """Whether the key words of a ``words_absent`` criterion's ``words_of`` are not all in
    its source: the input alone decides it, whatever the answer (its ``when`` aside)."""
    words_of, source = c.params["words_of"], c.params["source"]
    given = grounding.input_value(input_data, source)
    question = grounding.input_value(input_data, words_of)
    if grounding.is_missing(question) or grounding.is_missing(given):
        missing = words_of if grounding.is_missing(question) else source
        if missing == grounding.FETCHED_PAGES:
            return False, f"{NO_PAGE_FETCHED}, so this cannot be checked"
        return False, f"the input has no {missing}, so this cannot be checked"
    words = grounding.key_words(grounding.source_text(question))
    present = grounding.words_present(words, grounding.source_text(given))
    if words and len(present) == len(words):
        return False, (f"{source} holds every key word of {words_of} ({', '.join(words)}): "
                       "the answer may well be there")
    absent = [word for word in words if word not in present]
    return True, f"{source} lacks {', '.join(absent) or 'any key word'} of {words_of}"


def missing_inputs(criteria: list[str | dict[str, Any]], input_data: dict[str, Any]) -> list[str]:
    """The input_data keys that grounding criteria check against and the input lacks: a run
    cannot meet those whatever it answers, so the missing input is what to report."""
    missing: list[str] = []
    for criterion in readable_criteria(criteria):
        if criterion.kind not in GROUNDING_KINDS:
            continue
        for key in ("source", "words_of"):
            name = criterion.params.get(key)
            if name == grounding.FETCHED_PAGES:
                continue   # the run fetches it; no input can lack it
            if name and grounding.is_missing(grounding.input_value(input_data, name)) and name not in missing:
                missing.append(name)
    return missing


_CHECKS = {
    CriterionKind.FIELD: _check_field, CriterionKind.REGEX: _check_regex,
    CriterionKind.WORD_COUNT: _check_word_count, CriterionKind.EQUALS: _check_equals,
    CriterionKind.RANGE: _check_range, CriterionKind.EVIDENCE: _check_evidence,
    CriterionKind.FILES_MODIFIED: _check_files, CriterionKind.TESTS_PASS: _check_tests,
}


def check(criterion: Criterion, result: ResponsePackage, output_schema: dict[str, Any] | None = None,
          input_data: dict[str, Any] | None = None) -> tuple[bool, str]:
    """(met, detail) for one parsed criterion; grounding kinds read ``input_data``."""
    if criterion.kind is CriterionKind.JSON_SCHEMA:
        return _check_json_schema(criterion, result, output_schema)
    if criterion.kind in GROUNDING_KINDS:
        return _check_grounded(criterion, result, input_data or {})
    if criterion.kind is CriterionKind.CONFIDENT:
        return _check_confident(criterion, result)[:2]
    return _CHECKS[criterion.kind](criterion, result)


def _self_claim(result: ResponsePackage, text: str) -> str:
    wanted = " ".join(text.split()).lower()
    for item in result.acceptance_criteria_confirmation:
        if " ".join(item.criterion.split()).lower() == wanted:
            claim = "met" if item.met else "not met"
            return f"; the subagent reports it {claim}" + (f" ({item.evidence})" if item.evidence else "")
    return ""


LABEL_SCORES = "labels"   # result.metrics key: per output field, the model's probabilities
CANNOT_SCORE = "cannot be checked with this model: it gives no probabilities for its answers"


def label_score(result: ResponsePackage, path: str) -> dict[str, Any] | None:
    """The scores the runner recorded for the output field ``path``, if any."""
    labels = result.metrics.get(LABEL_SCORES) if isinstance(result.metrics, dict) else None
    score = labels.get(output_field(path)) if isinstance(labels, dict) else None
    return score if isinstance(score, dict) else None


def _check_confident(c: Criterion, result: ResponsePackage) -> tuple[bool, str, bool]:
    """(met, detail, checkable) for a ``confident`` criterion."""
    path, minimum = c.params["path"], c.params.get("min")
    value = resolve(result, path)
    if value is _MISSING:
        return False, f"{path} is missing", True
    score = label_score(result, path)
    if score is None:
        return False, f"{path} = {_short(value)}: {CANNOT_SCORE}", False
    if score.get("reviewed_by"):
        proposed = score.get("proposed", score.get("value"))
        how = "confirmed" if proposed == value else f"set (the model proposed {_short(proposed)})"
        return True, (f"{path} = {_short(value)}, {how} by {score['reviewed_by']} in review; the model's "
                      f"probability was {percent(score.get('probability'))}"), True
    probability = score.get("probability")
    if not isinstance(probability, int | float) or score.get("value") != value:
        return False, f"{path} = {_short(value)}: {CANNOT_SCORE}", False
    others = ", ".join(f"{_short(alt.get('value'))} {percent(alt.get('probability'))}"
                       for alt in score.get("alternatives") or [] if isinstance(alt, dict))
    ok = isinstance(minimum, int | float) and 0 <= minimum <= 1 and probability >= minimum
    detail = (f"{path} = {_short(value)} with probability {percent(probability)} "
              f"({'at least' if ok else 'below'} {percent(minimum)})" + (f"; alternatives {others}" if others else ""))
    return ok, detail, True


def percent(value: object, unknown: str = "unknown") -> str:
    """A probability as people read it ("42 %"), or ``unknown`` when it is not a number."""
    return f"{value * 100:.0f} %" if isinstance(value, int | float) and not isinstance(value, bool) else unknown


def unchecked_fields(criteria: list[Criterion], output_schema: dict[str, Any] | None,
                     payload: object = None) -> list[str]:
    """The output schema's top-level fields that the result holds (all of them without a
    ``payload``) and none of ``criteria`` names: an optional field left out holds nothing
    to be wrong about."""
    properties = output_schema.get("properties") if isinstance(output_schema, dict) else None
    if not isinstance(properties, dict):
        return []
    named = {output_field(path) for criterion in criteria
             if criterion.kind is not CriterionKind.WORDS_ABSENT and (path := criterion.field_path)}
    held = payload if isinstance(payload, dict) else properties
    return [name for name in properties if name not in named and name in held]


def evaluate_criteria(result: ResponsePackage, criteria: list[str | dict[str, Any]],
                      output_schema: dict[str, Any] | None = None,
                      input_data: dict[str, Any] | None = None) -> CriteriaReport:
    """Check ``result`` against every criterion; every one is reported (met + detail).
    ``input_data`` is what the run was given, which grounding criteria check against."""
    items: list[CriterionResult] = []
    parsed: list[Criterion] = []
    for index, raw in enumerate(criteria):
        try:
            criterion = parse_criterion(raw, f"success_criteria[{index}]")
        except ProtocolError as exc:
            items.append(CriterionResult(criterion=criterion_reading(raw), kind=None, met=False,
                                         checkable=False, detail=f"invalid criterion: {exc.message}"))
            continue
        label = criterion_reading(raw, criterion)
        if criterion is None:
            items.append(CriterionResult(
                criterion=label, kind=None, met=False, checkable=False,
                detail="not machine-checkable: no check could be read from this text"
                       + _self_claim(result, label)))
            continue
        parsed.append(criterion)
        if (skipped := _condition_unmet(criterion, result)) is not None:
            items.append(CriterionResult(criterion=label, kind=criterion.kind.value, met=True, detail=skipped,
                                         applies=False))
            continue
        checkable = True
        try:
            if criterion.kind is CriterionKind.CONFIDENT:
                met, detail, checkable = _check_confident(criterion, result)
            else:
                met, detail = check(criterion, result, output_schema, input_data)
        except (ProtocolError, re.error, TypeError, ValueError, RecursionError) as exc:
            met, detail = False, f"could not be checked: {exc}"
        items.append(CriterionResult(criterion=label, kind=criterion.kind.value, met=met, detail=detail,
                                     checkable=checkable))
    return CriteriaReport(items=items,
                          fields_unchecked=unchecked_fields(parsed, output_schema, result.output_payload))
