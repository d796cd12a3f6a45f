"""Results: every dialect reads into one ResponsePackage; bad input only ever raises
ProtocolError(ERR_INVALID_RESULT)."""

from __future__ import annotations

import json
import statistics
import time
import timeit
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delegations.protocol.errors import ErrorCode, FailedReason, ProtocolError
from delegations.protocol.results import (
    ResponsePackage,
    ResultDialect,
    ResultStatus,
    parse_result,
)

from .protocol_examples import (
    AGLOOP_EXECUTOR_OUTPUT,
    AGLOOP_RESULT_BLOCK,
    AGLOOP_RESULT_BLOCK_EVERY_BULLET,
    AGLOOP_RESULT_BLOCK_FAILED,
    HANDOFF_PARTIAL_RESPONSE,
    HANDOFF_SUCCESS_RESPONSE,
    OPENCLAW_ANNOUNCE,
    OPENCLAW_ANNOUNCE_ERROR,
    OPENCLAW_ANNOUNCE_TIMEOUT,
    RESULT_ENVELOPE,
    agloop_executor_answer_with_output,
)


def invalid(source: object) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        parse_result(source)
    assert caught.value.code is ErrorCode.INVALID_RESULT
    return caught.value


# --- the hand-off protocol: yield_control ------------------------------------------------------

def test_it_reads_the_tsla_research_response_as_is() -> None:
    result = parse_result(HANDOFF_SUCCESS_RESPONSE)
    assert result.status is ResultStatus.SUCCESS
    assert result.output_payload == {"price": 175.22, "currency": "USD",
                                     "timestamp": "2023-11-01T14:30:00Z"}
    assert result.dialect is ResultDialect.YIELD_CONTROL
    assert result.error_report is None


def test_it_keeps_the_refactors_partial_completion_and_its_error_report() -> None:
    result = parse_result(HANDOFF_PARTIAL_RESPONSE)
    assert result.status is ResultStatus.PARTIAL_COMPLETION
    assert result.output_payload["skipped_files"] == ["src/legacy.py"]
    assert result.error_report is not None
    assert result.error_report.code == "ERR_FS_PERM"
    assert result.error_report.message == "Permission denied: src/legacy.py"


def test_it_reads_yield_control_from_json_text_and_tool_call_wrappers() -> None:
    arguments = json.dumps(HANDOFF_SUCCESS_RESPONSE)
    wrappers: list[Any] = [
        arguments,
        {"name": "yield_control", "arguments": arguments},
        {"name": "yield_control", "arguments": HANDOFF_SUCCESS_RESPONSE},
        {"type": "function", "function": {"name": "yield_control", "arguments": arguments}},
        {"type": "tool_use", "name": "yield_control", "input": HANDOFF_SUCCESS_RESPONSE},
        {"tool_calls": [{"name": "yield_control", "arguments": arguments}]},
        arguments.encode(),
    ]
    for wrapped in wrappers:
        assert parse_result(wrapped).output_payload["price"] == 175.22


def test_it_finds_a_json_result_inside_prose_or_a_fence() -> None:
    body = json.dumps(HANDOFF_SUCCESS_RESPONSE)
    assert parse_result(f"Here is my answer: {body} Thanks!").output_payload["currency"] == "USD"
    assert parse_result(f"Answer:\n```json\n{body}\n```\n").status is ResultStatus.SUCCESS


def test_it_reads_agloop_executor_output_fields_in_yield_control() -> None:
    result = parse_result({"status": "SUCCESS", "output_payload": {}, **AGLOOP_EXECUTOR_OUTPUT})
    assert result.files_modified == AGLOOP_EXECUTOR_OUTPUT["files_modified"]
    assert result.acceptance_criteria_confirmation[1].criterion == "Missing q returns 400"
    assert result.acceptance_criteria_confirmation[1].met is True
    assert result.summary is not None and result.summary.startswith("Created search endpoint")
    assert result.warnings == AGLOOP_EXECUTOR_OUTPUT["warnings"]


def test_it_requires_an_output_payload_for_success() -> None:
    error = invalid({"status": "SUCCESS"})
    assert error.issues[0].field == "output_payload"
    assert "required for SUCCESS" in error.message


def test_it_allows_a_blocked_result_without_output_payload() -> None:
    result = parse_result({"status": "BLOCKED_AWAITING_CLARIFICATION",
                           "open_questions": ["Which currency?"]})
    assert result.status is ResultStatus.BLOCKED_AWAITING_CLARIFICATION
    assert result.open_questions == ["Which currency?"]


def test_a_failure_always_carries_an_error_report() -> None:
    result = parse_result({"status": "FAILURE", "output_payload": {}, "log_summary": "gave up"})
    assert result.error_report is not None
    assert result.error_report.code == "ERR_UNSPECIFIED"
    assert any("error_report" in warning for warning in result.warnings)


def test_it_validates_failed_reason_against_the_agloop_list() -> None:
    ok = parse_result({"status": "FAILURE", "output_payload": {},
                       "error_report": {"code": "ERR_TOOL_FAILURE", "message": "exit 1",
                                        "failed_reason": "TOOL_FAILURE"}})
    assert ok.failed_reason is FailedReason.TOOL_FAILURE
    error = invalid({"status": "FAILURE", "output_payload": {},
                     "error_report": {"code": "ERR_X", "failed_reason": "SOMETHING_ELSE"}})
    assert error.issues[0].field == "error_report.failed_reason"
    assert "VERIFICATION_FAILED" in error.issues[0].message


def test_it_names_the_field_and_the_expected_type() -> None:
    error = invalid({"status": "SUCCESS", "output_payload": [1, 2]})
    assert error.message.startswith("output_payload: expected a JSON object; got a list")
    error = invalid({"status": "SUCCESS", "output_payload": {}, "files_modified": "a.py",
                     "acceptance_criteria_confirmation": [{"criterion": "x", "met": "yes"}]})
    fields = [issue.field for issue in error.issues]
    assert fields == ["acceptance_criteria_confirmation[0].met"]


def test_it_reports_every_problem_at_once() -> None:
    error = invalid({"status": "SUCCESS", "output_payload": {}, "summary": 3,
                     "evidence": "nope", "handoff": 7})
    assert {issue.field for issue in error.issues} == {"summary", "evidence", "handoff"}


# --- the agloop delegation protocol: RESULT block ----------------------------------------------

def test_it_reads_the_agloop_result_block_after_prose() -> None:
    result = parse_result(AGLOOP_RESULT_BLOCK)
    assert result.status is ResultStatus.SUCCESS
    assert result.dialect is ResultDialect.RESULT_BLOCK
    assert result.files_modified == ["src/api/handlers/search.ts", "src/types/api.ts",
                                     "src/config/routes.ts"]
    assert result.key_decisions == ["Used zod for query validation", "Reused the Prisma search service"]
    assert result.deliverables == ["GET /api/search endpoint with pagination"]
    assert result.needs_followup == [] and result.blockers == []
    assert result.summary == "I created the search endpoint following the users.ts handler pattern."
    assert result.error_report is None


def test_a_failed_block_maps_to_failure_with_its_reason_and_blockers() -> None:
    result = parse_result(AGLOOP_RESULT_BLOCK_FAILED)
    assert result.status is ResultStatus.FAILURE
    assert result.error_report is not None
    assert result.error_report.failed_reason is FailedReason.VERIFICATION_FAILED
    assert result.error_report.message == "page_size > 100 returns 500 instead of 400"
    assert result.files_modified == [] and result.key_decisions == []
    assert result.needs_followup[0].agent == "executor"
    assert result.handoff is not None and result.handoff.recommended_role == "executor"
    assert result.handoff.reason == "page_size validation missing"


def test_it_reads_a_result_block_with_every_bullet() -> None:
    result = parse_result(AGLOOP_RESULT_BLOCK_EVERY_BULLET)
    assert result.status is ResultStatus.PARTIAL_COMPLETION
    assert result.failed_reason is FailedReason.DEPENDENCY_MISSING
    assert result.files_modified == ["src/api/handlers/search.ts", "src/types/api.ts"]
    assert result.key_decisions == ["Used zod for validation", "Kept the users.ts handler shape"]
    assert result.deliverables == ["GET /api/search handler"]
    assert result.needs_followup[0].agent == "planner"
    assert result.needs_followup[0].reason == "routes.ts belongs to task-004, which does not exist yet"
    assert result.blockers == ["src/config/routes.ts is owned by a task that is not planned"]


@pytest.mark.parametrize(("status", "expected"), [
    ("COMPLETE", ResultStatus.SUCCESS), ("PARTIAL", ResultStatus.PARTIAL_COMPLETION),
    ("FAILED", ResultStatus.FAILURE),
])
def test_block_statuses_map_to_canonical_ones(status: str, expected: ResultStatus) -> None:
    assert parse_result(f"## RESULT\n- **Status**: {status}\n").status is expected


@pytest.mark.parametrize(("value", "expected"), [
    ('"none"', []), ("none", []), ("[]", []), ("[a.py, b.py]", ["a.py", "b.py"]),
    ('["a.py", "b.py"]', ["a.py", "b.py"]), ("a.py, `b.py`", ["a.py", "b.py"]),
    ("\n  - a.py\n  - b.py", ["a.py", "b.py"]),
])
def test_files_modified_accepts_every_spelling(value: str, expected: list[str]) -> None:
    text = f"## RESULT\n- **Status**: COMPLETE\n- **Files Modified**: {value}\n"
    assert parse_result(text).files_modified == expected


def test_it_accepts_bold_with_colon_inside_and_plain_bullets() -> None:
    text = "## RESULT\n* **Status:** COMPLETE\n- Files Modified: a.py\n"
    result = parse_result(text)
    assert result.status is ResultStatus.SUCCESS and result.files_modified == ["a.py"]


def test_the_last_result_marker_wins() -> None:
    text = ("Earlier draft:\n## RESULT\n- **Status**: FAILED\n\nFinal:\n\n## RESULT\n"
            "- **Status**: COMPLETE\n")
    assert parse_result(text).status is ResultStatus.SUCCESS


def test_a_block_without_status_is_invalid_and_says_how_to_fix_it() -> None:
    error = invalid("## RESULT\n- **Files Modified**: a.py\n")
    assert error.issues[0].field == "Status"
    assert "- **Status**: COMPLETE | PARTIAL | FAILED" in error.message


def test_a_bad_status_or_failed_reason_is_named() -> None:
    error = invalid("## RESULT\n- **Status**: DONE-ISH\n- **Failed Reason**: BAD_LUCK\n")
    assert [issue.field for issue in error.issues] == ["Status", "Failed Reason"]


def test_it_merges_the_executor_output_fence_with_the_result_block() -> None:
    result = parse_result(agloop_executor_answer_with_output())
    assert result.status is ResultStatus.SUCCESS
    assert len(result.acceptance_criteria_confirmation) == 2
    assert result.summary == AGLOOP_EXECUTOR_OUTPUT["summary"]
    assert result.warnings == AGLOOP_EXECUTOR_OUTPUT["warnings"]
    assert result.files_modified == AGLOOP_EXECUTOR_OUTPUT["files_modified"]
    assert result.handoff is not None and result.handoff.recommended_role == "verifier"


def test_agloop_statuses_in_json_use_the_block_mapping() -> None:
    result = parse_result({"status": "FAILED", "failed_reason": "CONTEXT_INSUFFICIENT",
                           "blockers": ["no plan.yaml"]})
    assert result.status is ResultStatus.FAILURE
    assert result.error_report is not None
    assert result.error_report.code == "ERR_INSUFFICIENT_CONTEXT"
    assert result.dialect is ResultDialect.RESULT_BLOCK


# --- delegation contracts: the result envelope --------------------------------------------------

def test_it_reads_the_risk_matrix_envelope() -> None:
    result = parse_result(RESULT_ENVELOPE)
    assert result.status is ResultStatus.SUCCESS
    assert result.dialect is ResultDialect.ENVELOPE
    assert result.evidence[0].source == "tool:metrics-query"
    assert result.evidence[0].artifact_id == "art_123"
    assert result.open_questions == ["Does A support per-project cache isolation?"]
    assert result.handoff is not None
    assert result.handoff.recommended_role == "security-review"
    assert result.handoff.reason == "Isolation model needs verification"


@pytest.mark.parametrize(("status", "expected"), [
    ("completed", ResultStatus.SUCCESS), ("needs_input", ResultStatus.BLOCKED_AWAITING_CLARIFICATION),
    ("blocked", ResultStatus.BLOCKED_AWAITING_CLARIFICATION), ("failed", ResultStatus.FAILURE),
])
def test_envelope_statuses_map_to_canonical_ones(status: str, expected: ResultStatus) -> None:
    result = parse_result({**RESULT_ENVELOPE, "status": status})
    assert result.status is expected
    if expected is ResultStatus.FAILURE:
        assert result.error_report is not None


def test_envelope_evidence_needs_a_source_or_an_artifact_id() -> None:
    error = invalid({**RESULT_ENVELOPE, "evidence": [{"note": "trust me"}]})
    assert error.issues[0].field == "evidence[0]"
    assert "source" in error.issues[0].message


def test_an_envelope_needs_a_summary() -> None:
    envelope = {key: value for key, value in RESULT_ENVELOPE.items() if key != "summary"}
    assert invalid(envelope).issues[0].field == "summary"


def test_a_completed_envelope_without_evidence_is_accepted_with_a_warning() -> None:
    result = parse_result({"status": "completed", "summary": "A is fastest."})
    assert any("without evidence" in warning for warning in result.warnings)


# --- OpenClaw sub-agents: announce --------------------------------------------------------------

def test_it_reads_a_successful_announce_with_its_metrics() -> None:
    result = parse_result(OPENCLAW_ANNOUNCE)
    assert result.status is ResultStatus.SUCCESS
    assert result.dialect is ResultDialect.ANNOUNCE
    assert result.summary == OPENCLAW_ANNOUNCE["result"]
    assert result.log_summary == OPENCLAW_ANNOUNCE["notes"]
    assert result.metrics["runtimeSeconds"] == 42.5
    assert result.metrics["usage"] == {"inputTokens": 1800, "outputTokens": 350}


def test_an_announce_timeout_is_a_failure_with_err_timeout() -> None:
    result = parse_result(OPENCLAW_ANNOUNCE_TIMEOUT)
    assert result.status is ResultStatus.FAILURE
    assert result.error_report is not None
    assert result.error_report.code == "ERR_TIMEOUT"
    assert result.error_report.message == "run exceeded runTimeoutSeconds (300)"


def test_an_announce_error_is_a_failure() -> None:
    result = parse_result(OPENCLAW_ANNOUNCE_ERROR)
    assert result.status is ResultStatus.FAILURE
    assert result.error_report is not None
    assert result.error_report.message == "GitHub API returned 403 (rate limited)"


def test_an_unknown_announce_is_invalid() -> None:
    error = invalid({"status": "unknown", "result": ""})
    assert error.issues[0].field == "status"
    assert "unknown" in error.message


# --- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("source", [
    None, 42, 4.2, True, [], ["status"], "", "   ", "just some prose", b"\xff\xfe",
    "{", '{"status": 1}', {"status": "MAYBE", "output_payload": {}}, {"no": "status"},
    {"status": "SUCCESS", "output_payload": {"x": float("nan")}}, {"status": "SUCCESS", "output_payload": {1: object()}},
    '{"status": "SUCCESS", "output_payload": {"x": NaN}}', '{"status": "SUCCESS", "output_payload": {"x": "\\ud800"}}',
    "[" * 100_000, "{" * 100_000, "x" * 1_500_000, '{"name": "yield_control", "arguments": "{not json"}',
])
def test_bad_input_raises_only_an_invalid_result_error(source: object) -> None:
    error = invalid(source)
    assert error.message
    assert error.issues


def test_a_status_that_is_no_status_lists_the_accepted_ones() -> None:
    error = invalid({"status": "MAYBE", "output_payload": {}})
    assert "completed" in error.message and "COMPLETE" in error.message and "SUCCESS" in error.message


# --- round trips and properties -------------------------------------------------------------------

ALL_EXAMPLES: list[Any] = [
    HANDOFF_SUCCESS_RESPONSE, HANDOFF_PARTIAL_RESPONSE, AGLOOP_RESULT_BLOCK,
    AGLOOP_RESULT_BLOCK_FAILED, AGLOOP_RESULT_BLOCK_EVERY_BULLET, RESULT_ENVELOPE,
    OPENCLAW_ANNOUNCE, OPENCLAW_ANNOUNCE_TIMEOUT, OPENCLAW_ANNOUNCE_ERROR,
]


@pytest.mark.parametrize("source", ALL_EXAMPLES)
def test_every_example_result_round_trips_through_json_unchanged(source: Any) -> None:
    result = parse_result(source)
    text = result.model_dump_json()
    assert ResponsePackage.model_validate_json(text) == result
    assert parse_result(text) == result
    assert parse_result(json.loads(text)) == result


def test_a_response_package_passes_through_unchanged() -> None:
    result = parse_result(RESULT_ENVELOPE)
    assert parse_result(result) is result


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)
result_keys = st.sampled_from(["status", "output_payload", "summary", "evidence", "error_report",
                               "handoff", "files_modified", "needs_followup", "openQuestions",
                               "acceptance_criteria_confirmation", "result", "error", "arguments",
                               "dialect", "warnings", "metrics"])
statuses = st.sampled_from(["SUCCESS", "FAILURE", "PARTIAL_COMPLETION", "BLOCKED_AWAITING_CLARIFICATION",
                            "completed", "needs_input", "blocked", "failed", "success", "error",
                            "timeout", "unknown", "COMPLETE", "PARTIAL", "FAILED", "success "])
result_like = st.dictionaries(result_keys, json_values, max_size=6).flatmap(
    lambda data: st.builds(lambda status: {**data, "status": status}, statuses) | st.just(data))


def _only_protocol_errors(source: object) -> ResponsePackage | None:
    try:
        return parse_result(source)
    except ProtocolError as exc:
        assert exc.code is ErrorCode.INVALID_RESULT
        assert exc.message
        return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400))
def test_arbitrary_text_raises_nothing_but_protocol_errors(text: str) -> None:
    _only_protocol_errors(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="#-*:[]{}\"`_ \nRESULTSatusCOMPLEFIDNeo", max_size=200))
def test_markdown_shaped_noise_raises_nothing_but_protocol_errors(text: str) -> None:
    _only_protocol_errors("## RESULT\n" + text)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_arbitrary_json_raises_nothing_but_protocol_errors(value: object) -> None:
    _only_protocol_errors(value)
    _only_protocol_errors(json.dumps(value))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(result_like)
def test_result_shaped_json_either_parses_and_round_trips_or_raises_a_protocol_error(data: dict[str, Any]) -> None:
    result = _only_protocol_errors(data)
    if result is not None:
        text = result.model_dump_json()
        assert ResponsePackage.model_validate_json(text) == result
        assert parse_result(text) == result


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_nothing_but_protocol_errors(raw: bytes) -> None:
    _only_protocol_errors(raw)


# --- performance -------------------------------------------------------------------------------

def test_parsing_a_result_block_takes_under_100_microseconds_median() -> None:
    parse_result(AGLOOP_RESULT_BLOCK)  # warm caches
    # CPU time, not wall time: the suite shares two cores with other work.
    timer = timeit.Timer(lambda: parse_result(AGLOOP_RESULT_BLOCK), timer=time.process_time)
    runs = timer.repeat(number=200, repeat=15)
    median_us = statistics.median(runs) / 200 * 1e6
    assert median_us < 100, f"median {median_us:.1f} µs"
