"""Success criteria: free text and structured checks, evaluated against real results."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delegations.protocol.criteria import (
    CriterionKind,
    CriterionResult,
    criterion_issues,
    evaluate_criteria,
    parse_criterion,
)
from delegations.protocol.errors import ErrorCode, ProtocolError
from delegations.protocol.results import ResponsePackage, parse_result
from delegations.protocol.schemas import normalize_schema

from .protocol_examples import (
    AGLOOP_EXECUTOR_OUTPUT,
    AGLOOP_RESULT_BLOCK,
    HANDOFF_PARENT_REQUEST,
    HANDOFF_PARTIAL_RESPONSE,
    HANDOFF_SUCCESS_RESPONSE,
    HANDOFF_VAGUE_CRITERIA,
    HANDOFF_VERIFIABLE_CRITERIA,
    RESULT_ENVELOPE,
)

K = CriterionKind


def kind_and_params(text: str | dict[str, Any]) -> tuple[CriterionKind, dict[str, Any]]:
    criterion = parse_criterion(text)
    assert criterion is not None, f"{text!r} did not parse"
    return criterion.kind, criterion.params


def report_for(result: ResponsePackage, criterion: str | dict[str, Any],
               schema: dict[str, Any] | None = None) -> tuple[bool, str]:
    item = evaluate_criteria(result, [criterion], schema).items[0]
    return item.met, item.detail


@pytest.fixture
def tsla() -> ResponsePackage:
    return parse_result(HANDOFF_SUCCESS_RESPONSE)


def essay(words: int, **extra: Any) -> ResponsePackage:
    return parse_result({"status": "SUCCESS", "output_payload": {"essay": " ".join(["word"] * words)},
                         **extra})


# --- parsing free text -------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "kind"), [
    ("JSON is schema-valid", K.JSON_SCHEMA), ("Output is valid against the schema", K.JSON_SCHEMA),
    ("Response conforms to the expected schema", K.JSON_SCHEMA), ("Return valid JSON", K.JSON_SCHEMA),
    ("Tests pass", K.TESTS_PASS), ("All unit tests pass.", K.TESTS_PASS), ("test suite is green", K.TESTS_PASS),
    ("Word count > 500", K.WORD_COUNT), ("at least 500 words", K.WORD_COUNT),
    ("Include at least 2 sources", K.EVIDENCE), ("cite evidence", K.EVIDENCE),
    ("Sources are cited", K.EVIDENCE), ("Modify src/a.py", K.FILES_MODIFIED),
    ("price between 0 and 10000", K.RANGE), ('`status` equals "ok"', K.EQUALS),
    ("Return a float value", K.FIELD), ("Specify currency", K.FIELD),
    ('summary contains "USD"', K.REGEX), ("summary matches /^[A-Z]/", K.REGEX),
])
def test_free_text_parses_into_its_check(text: str, kind: CriterionKind) -> None:
    criterion = parse_criterion(text)
    assert criterion is not None and criterion.kind is kind
    assert criterion.text == text


@pytest.mark.parametrize("text", [*HANDOFF_VAGUE_CRITERIA, "Make it nice", "Provide details",
                                  "Return the result", "Be thorough", "", "   ",
                                  "Route registered in src/config/routes.ts with auth middleware"])
def test_vague_text_parses_to_none(text: str) -> None:
    assert parse_criterion(text) is None


def test_the_hand_off_protocols_machine_verifiable_examples_all_parse() -> None:
    assert all(parse_criterion(text) is not None for text in HANDOFF_VERIFIABLE_CRITERIA)
    assert all(parse_criterion(text) is not None for text in HANDOFF_PARENT_REQUEST["success_criteria"])


@pytest.mark.parametrize(("text", "low", "high"), [
    ("Word count > 500", 501, None), ("Word count >= 500", 500, None),
    ("at least 500 words", 500, None), ("more than 10 words", 11, None),
    ("no more than 200 words", None, 200), ("fewer than 200 words", None, 199),
    ("between 300 and 500 words", 300, 500), ("word count of at least 300", 300, None),
])
def test_word_count_bounds_read_as_written(text: str, low: int | None, high: int | None) -> None:
    kind, params = kind_and_params(text)
    assert kind is K.WORD_COUNT
    assert (params["min"], params["max"]) == (low, high)


def test_word_count_about_the_summary_counts_the_summary() -> None:
    assert kind_and_params("Summary has no more than 200 words")[1]["field"] == "summary"


def test_numbers_of_sources_read_in_digits_or_words() -> None:
    assert kind_and_params("Include at least 2 sources")[1]["min"] == 2
    assert kind_and_params("Include at least two references")[1]["min"] == 2
    assert kind_and_params("cite more than 2 sources")[1]["min"] == 3


def test_files_modified_lists_every_path() -> None:
    assert kind_and_params("Modify src/a.py and src/b.py")[1]["paths"] == ["src/a.py", "src/b.py"]
    assert kind_and_params("Files modified include README.md")[1]["paths"] == ["README.md"]
    assert kind_and_params("`src/x.ts` is modified")[1]["paths"] == ["src/x.ts"]


@pytest.mark.parametrize(("text", "expected"), [
    ("price between 0 and 10000", {"min": 0, "max": 10000, "min_exclusive": False, "max_exclusive": False}),
    ("price in [0, 10)", {"min": 0, "max": 10, "min_exclusive": False, "max_exclusive": True}),
    ("0 < price <= 10", {"min": 0, "max": 10, "min_exclusive": True, "max_exclusive": False}),
    ("price >= 0", {"min": 0, "max": None, "min_exclusive": False, "max_exclusive": False}),
    ("price is positive", {"min": 0, "max": None, "min_exclusive": True, "max_exclusive": False}),
    ("price at most 99.5", {"min": None, "max": 99.5, "min_exclusive": False, "max_exclusive": False}),
])
def test_ranges_read_their_bounds(text: str, expected: dict[str, Any]) -> None:
    kind, params = kind_and_params(text)
    assert kind is K.RANGE and params == {"path": "price", **expected}


@pytest.mark.parametrize(("text", "path", "value"), [
    ('`status` equals "ok"', "status", "ok"), ("status == ok", "status", "ok"),
    ("retries = 3", "retries", 3), ("done is true", "done", True), ("currency is 'USD'", "currency", "USD"),
])
def test_equals_reads_the_path_and_a_json_value(text: str, path: str, value: object) -> None:
    kind, params = kind_and_params(text)
    assert kind is K.EQUALS and params["path"] == path and params["value"] == value


@pytest.mark.parametrize(("text", "path", "type_name"), [
    ("Return a float value", None, "number"), ("Return an integer", None, "integer"),
    ("`price` is a number", "price", "number"), ("price: integer", "price", "integer"),
    ("Return a number for price", "price", "number"), ("Specify currency", "currency", None),
    ("Include a timestamp", "timestamp", None), ("currency is present", "currency", None),
])
def test_field_checks_read_a_path_and_a_type(text: str, path: str | None, type_name: str | None) -> None:
    kind, params = kind_and_params(text)
    assert kind is K.FIELD and params["path"] == path and params["type"] == type_name


# --- structured criteria -------------------------------------------------------------------------

def test_structured_criteria_parse_with_path_or_field_spellings() -> None:
    assert kind_and_params({"kind": "regex", "field": "output_payload.summary", "pattern": "^A"})[1] == {
        "field": "output_payload.summary", "pattern": "^A", "ignore_case": False}
    assert kind_and_params({"kind": "word_count", "field": "essay", "min": 500})[1]["min"] == 500
    assert kind_and_params({"kind": "evidence", "min": 1})[1] == {"min": 1}
    assert kind_and_params({"kind": "files_modified", "paths": ["src/a.py"]})[1] == {"paths": ["src/a.py"]}
    assert kind_and_params({"kind": "field", "path": "price", "type": "number"})[1]["type"] == "number"
    assert kind_and_params({"kind": "equals", "path": "status", "value": "ok"})[1]["value"] == "ok"
    assert kind_and_params({"kind": "range", "path": "price", "min": 0, "max": 10})[1]["max"] == 10
    assert kind_and_params({"kind": "json_schema"})[0] is K.JSON_SCHEMA
    assert kind_and_params({"text": "Word count > 500"})[0] is K.WORD_COUNT


@pytest.mark.parametrize(("spec", "field"), [
    ({"kind": "magic"}, "c.kind"), ({"kind": "regex"}, "c.pattern"),
    ({"kind": "regex", "pattern": "("}, "c.pattern"), ({"kind": "range", "path": "p"}, "c"),
    ({"kind": "word_count", "min": "many"}, "c.min"), ({"kind": "files_modified", "paths": []}, "c.paths"),
    ({"kind": "field", "path": "p", "type": "decimalish"}, "c.type"), ({"kind": "equals", "path": "p"}, "c.value"),
    ({"kind": "json_schema", "schema": {"type": 5}}, "c.schema.type"),
])
def test_malformed_structured_criteria_raise_naming_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_criterion(spec, "c")
    assert caught.value.code is ErrorCode.INVALID_PACKET
    assert caught.value.issues[0].field == field
    assert criterion_issues(spec, "c")[0].field == field


def test_criterion_issues_is_empty_for_good_and_vague_criteria() -> None:
    assert criterion_issues("Do a good job") == []
    assert criterion_issues({"kind": "evidence"}) == []


# --- evaluation against the protocols' example results ---------------------------------------------

def test_the_tsla_response_meets_the_tsla_request_criteria(tsla: ResponsePackage) -> None:
    report = evaluate_criteria(tsla, HANDOFF_PARENT_REQUEST["success_criteria"], None)
    assert report.all_met
    assert [item.kind for item in report.items] == ["field", "field"]
    assert report.items[0].detail == "output_payload.price is a number"
    assert report.items[1].detail == 'output_payload.currency = "USD"'


def test_a_response_without_a_currency_fails_specify_currency() -> None:
    result = parse_result({"status": "SUCCESS", "output_payload": {"price": 1.0}})
    met, detail = report_for(result, "Specify currency")
    assert not met and detail == "currency is missing"


def test_json_schema_checks_the_expected_output_schema(tsla: ResponsePackage) -> None:
    schema = normalize_schema({"price": "number", "currency": "string"})
    assert report_for(tsla, "JSON is schema-valid", schema)[0]
    met, detail = report_for(tsla, "JSON is schema-valid", normalize_schema({"price": "string"}))
    assert not met and "output_payload.price" in detail
    met, detail = report_for(tsla, {"kind": "json_schema"}, None)
    assert met and "no expected output schema" in detail


def test_word_count_counts_words_in_the_output(tsla: ResponsePackage) -> None:
    assert report_for(essay(501), "Word count > 500")[0]
    met, detail = report_for(essay(500), "Word count > 500")
    assert not met and detail == "the output has 500 words (wanted at least 501)"
    assert report_for(essay(10), {"kind": "word_count", "field": "essay", "max": 10})[0]


def test_evidence_counts_the_envelopes_sourced_items() -> None:
    envelope = parse_result(RESULT_ENVELOPE)
    assert report_for(envelope, "cite evidence")[0]
    met, detail = report_for(envelope, "Include at least 2 sources")
    assert not met and "wanted at least 2" in detail


def test_evidence_also_counts_a_sources_list_in_the_payload() -> None:
    result = parse_result({"status": "SUCCESS", "output_payload": {"sources": ["yahoo", "bloomberg"]}})
    assert report_for(result, "Include at least 2 sources")[0]


def test_files_modified_checks_the_result_block_list() -> None:
    result = parse_result(AGLOOP_RESULT_BLOCK)
    assert report_for(result, "Modify src/api/handlers/search.ts")[0]
    met, detail = report_for(result, {"kind": "files_modified", "paths": ["src/other.ts"]})
    assert not met and detail == "not modified: src/other.ts"


def test_files_modified_also_reads_the_refactors_modified_files() -> None:
    result = parse_result(HANDOFF_PARTIAL_RESPONSE)
    assert report_for(result, "Modify src/auth.py and src/utils.py")[0]
    assert not report_for(result, "Modify src/legacy.py")[0]


def test_range_equals_and_regex_read_the_payload(tsla: ResponsePackage) -> None:
    assert report_for(tsla, "price between 0 and 10000")[0]
    assert not report_for(tsla, "price < 100")[0]
    assert report_for(tsla, "currency == USD")[0]
    assert not report_for(tsla, 'currency equals "EUR"')[0]
    assert report_for(tsla, {"kind": "regex", "field": "timestamp", "pattern": r"^\d{4}-"})[0]
    assert report_for(tsla, 'timestamp contains "2023"')[0]


def test_equals_does_not_confuse_true_with_one() -> None:
    result = parse_result({"status": "SUCCESS", "output_payload": {"flag": 1}})
    assert not report_for(result, {"kind": "equals", "path": "flag", "value": True})[0]


def test_a_bare_name_falls_back_to_the_result_fields() -> None:
    result = parse_result(RESULT_ENVELOPE)
    assert report_for(result, 'summary contains "latency"')[0]
    assert report_for(result, {"kind": "regex", "field": "output_payload.summary", "pattern": "x"}) == (
        False, "output_payload.summary is missing")


def test_tests_pass_is_met_by_a_reported_test_run() -> None:
    ran = parse_result({"status": "SUCCESS", "output_payload": {"tests": {"passed": 12, "failed": 0}}})
    assert report_for(ran, "Tests pass")[0]
    flagged = parse_result({"status": "SUCCESS", "output_payload": {"tests_passed": True}})
    assert report_for(flagged, "Tests pass")[0]
    failing = parse_result({"status": "SUCCESS", "output_payload": {"tests": {"passed": 11, "failed": 1}}})
    met, detail = report_for(failing, "Tests pass")
    assert not met and "1 failed" in detail


def test_tests_pass_accepts_a_confirmation_only_with_evidence() -> None:
    confirmed = parse_result({"status": "SUCCESS", "output_payload": {}, "acceptance_criteria_confirmation": [
        {"criterion": "All tests pass", "met": True, "evidence": "pytest: 40 passed"}]})
    assert report_for(confirmed, "Tests pass")[0]
    bare = parse_result({"status": "SUCCESS", "output_payload": {}, "acceptance_criteria_confirmation": [
        {"criterion": "All tests pass", "met": True}]})
    assert not report_for(bare, "Tests pass")[0]
    silent = parse_result(HANDOFF_SUCCESS_RESPONSE)
    assert not report_for(silent, "Tests pass")[0]


def test_every_criterion_is_reported_and_vague_ones_are_not_checkable(tsla: ResponsePackage) -> None:
    report = evaluate_criteria(tsla, ["Return a float value", "Do a good job", {"kind": "magic"}], None)
    assert len(report.items) == 3
    assert report.items[0].met and report.items[0].checkable
    assert not report.items[1].met and not report.items[1].checkable
    assert report.items[1].detail.startswith("not machine-checkable")
    assert report.items[2].detail.startswith("invalid criterion")
    assert not report.all_met
    assert not report.checkable_met or report.unchecked == ["Do a good job", '{"kind": "magic"}']
    assert report.unchecked == ["Do a good job", '{"kind": "magic"}']


def test_an_unparsed_criterion_shows_what_the_subagent_claimed() -> None:
    criterion = AGLOOP_EXECUTOR_OUTPUT["acceptance_criteria_confirmation"][1]["criterion"]
    result = parse_result({"status": "SUCCESS", "output_payload": {}, **AGLOOP_EXECUTOR_OUTPUT})
    item = evaluate_criteria(result, [criterion], None).items[0]
    assert not item.met and not item.checkable
    assert "the subagent reports it met" in item.detail


def test_the_report_serializes_with_every_item() -> None:
    report = evaluate_criteria(essay(3), ["at least 2 words", "Make it nice"], None)
    data = report.as_dict()
    assert data["all_met"] is False and data["checkable_met"] is True
    assert data["items"][0] == {"criterion": "at least 2 words", "kind": "word_count", "met": True,
                                "detail": "the output has 3 words (wanted at least 2)", "checkable": True, "applies": True}


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=120))
def test_free_text_never_raises_whatever_it_says(text: str) -> None:
    criterion = parse_criterion(text)
    if criterion is not None:
        report = evaluate_criteria(parse_result(HANDOFF_SUCCESS_RESPONSE), [text], None)
        assert report.items[0].kind == criterion.kind.value


def test_a_criterion_results_dict_is_its_json_dump() -> None:
    result = CriterionResult(criterion="JSON is schema-valid", kind="schema_valid", met=False,
                             detail="missing 'answer'", checkable=True)
    assert result.as_dict() == result.model_dump(mode="json")
    assert list(result.as_dict()) == list(result.model_dump(mode="json"))


def test_a_stored_report_whose_lists_are_not_lists_still_reads() -> None:
    # an imported run's page failed on "fields_unchecked": 1.5
    from delegations.protocol.criteria.evaluation import criteria_summary

    assert criteria_summary({"items": 3, "fields_unchecked": 1.5}) == "0 of 0 criteria met"


def test_a_regex_criterion_runs_in_linear_time_and_one_that_needs_backtracking_is_refused() -> None:
    import time

    started = time.monotonic()
    report = evaluate_criteria(essay(3, summary="a" * 5000 + "!"), [{"kind": "regex", "field": "summary",
                                           "pattern": "^(a+)+$"}], None)
    assert time.monotonic() - started < 1.0 and not report.all_met
    with pytest.raises(ProtocolError, match="lookaround or backreferences"):
        parse_criterion({"kind": "regex", "field": "text", "pattern": "(\\w)\\1"})
