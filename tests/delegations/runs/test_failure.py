"""The one sentence a run that did not finish leads with (``failure_headline``), per error code."""

from __future__ import annotations

from typing import Any

import pytest

from delegations.run_pages.failure import failure_headline


def runner_result(code: str, message: str, model_calls: int = 0) -> dict[str, Any]:
    """The FAILURE result the runner writes for a run that ended without one."""
    return {"status": "FAILURE", "error_report": {
        "code": code, "message": message, "details": {"written_by": "runner", "model_calls": model_calls}}}


@pytest.mark.parametrize("state", ["COMPLETE", "WORKING", "AWAITING_APPROVAL", "RETURNED"])
def test_a_run_that_finished_or_still_goes_has_no_headline(state: str) -> None:
    assert failure_headline(state, {"code": "ERR_TOOL_FAILURE", "message": "x"}, None) is None


def test_an_input_that_breaks_the_skills_schema_names_the_field_and_the_pinned_skill() -> None:
    error = {"code": "ERR_INVALID_PACKET",
             "message": "input_data does not match the skill's input_schema: input_data.query: '' should be non-empty",
             "issues": [{"field": "input_data.query", "message": "'' should be non-empty"}]}
    assert failure_headline("REJECTED", error, None, skill="price-research@1.1.0") == (
        "Rejected: input_data.query does not fit skill price-research@1.1.0's input_schema: "
        "'' should be non-empty. Fix the input and start again.")


def test_a_lint_error_names_the_packet_field_from_the_findings() -> None:
    findings = [{"code": "COMPLETION_CRITERIA_MISSING", "severity": "warning", "field": "success_criteria",
                 "message": "No success criteria."},
                {"code": "DEPTH_LIMIT_EXCEEDED", "severity": "error", "field": "depth",
                 "message": "depth is 9 but its own max_depth is 3."}]
    error = {"code": "ERR_INVALID_PACKET", "message": "The delegation was rejected (1 lint error); first: ..."}
    assert failure_headline("REJECTED", error, None, findings=findings) == (
        "Rejected: depth: depth is 9 but its own max_depth is 3. Fix the packet and start again.")


def test_a_skill_the_registry_cannot_run_is_named_with_the_registrys_advice() -> None:
    why = ("skill caching@1.0.0's instruction file instructions.md is missing from its bundle; "
           "import the bundle with both files under a new version, then name that version")
    error = {"code": "ERR_INVALID_PACKET", "message": f"skill: {why}",
             "issues": [{"field": "skill", "message": why}]}
    assert failure_headline("REJECTED", error, None) == f"Rejected: {why}."
    unknown = {"code": "ERR_INVALID_PACKET",
               "message": "Skill 'nope' is not in the registry; import it or name an existing skill@version."}
    assert failure_headline("REJECTED", unknown, None) == (
        "Rejected: skill 'nope' is not in the registry; import it or name an existing skill@version. "
        "Fix the packet and start again.")


def test_asking_for_more_than_the_parent_has_says_so() -> None:
    error = {"code": "ERR_CONSTRAINT_VIOLATION", "message": "The delegation was rejected (1 lint error); ..."}
    findings = [{"severity": "error", "field": "capabilities[0]",
                 "message": "'network_outbound' is not in the parent's capabilities."}]
    assert failure_headline("REJECTED", error, None, findings=findings) == (
        "Rejected: capabilities[0]: 'network_outbound' is not in the parent's capabilities. "
        "A delegation gets no more than its parent has left; ask for less or give the parent more.")


def test_running_out_of_model_calls_says_how_many_and_what_to_raise() -> None:
    message = ("The run used its last model call allowed (max_model_calls) without returning a result: "
               "only yield_control was offered, and the model called list_files instead.")
    error = {"code": "ERR_RESOURCE_EXHAUSTED", "message": message}
    assert failure_headline("FAILED", error, runner_result("ERR_RESOURCE_EXHAUSTED", message, 5)) == (
        "Failed: the run used all 5 of its model calls before handing back a result; "
        "raise budget.max_model_calls or max_iterations.")


def test_a_used_up_token_budget_names_the_limit_from_the_errors_details() -> None:
    error = {"code": "ERR_RESOURCE_EXHAUSTED", "message": "Budget exhausted: its max_tokens limit of 100 is used up (120).",
             "details": {"axis": "max_tokens", "run_id": "r1"}}
    assert failure_headline("FAILED", error, None) == (
        "Failed: the run used up its token budget before handing back a result; raise budget.max_tokens.")


def test_an_ancestors_used_up_budget_points_at_that_run() -> None:
    error = {"code": "ERR_RESOURCE_EXHAUSTED",
             "message": "Budget exhausted: ancestor run abc123's max_cost_usd limit of 0.5 is used up (0.6).",
             "details": {"axis": "max_cost_usd", "run_id": "abc123"}}
    assert failure_headline("FAILED", error, None) == (
        "Failed: ancestor run abc123 used up its max_cost_usd limit; raise budget.max_cost_usd "
        "where that run starts.")


def test_a_hard_timeout_names_its_length_and_the_field_to_raise() -> None:
    error = {"code": "ERR_TIMEOUT", "message": "The run hit its hard timeout of 30 s before returning a "
                                               "result; its unfinished children were cancelled."}
    assert failure_headline("TIMEOUT", error, None) == (
        "Timed out: the run hit its hard timeout of 30 s before handing back a result; raise timeout_s "
        "(or budget.max_runtime_s) and start again.")


def test_a_tool_failure_leads_with_its_own_message() -> None:
    message = ("The local model file /models/x.gguf does not exist. Set config 'model_path' to an "
               "existing .gguf file.")
    error = {"code": "ERR_TOOL_FAILURE", "message": message}
    assert failure_headline("FAILED", error, runner_result("ERR_TOOL_FAILURE", message)) == (
        "Failed: the local model file /models/x.gguf does not exist. Set config 'model_path' to an "
        "existing .gguf file.")


def test_a_failure_the_model_reported_is_read_from_its_result_when_the_run_has_no_error() -> None:
    result = {"status": "FAILURE", "error_report": {"code": "ERR_TOOL_FAILURE",
                                                    "message": "OpenAI: 503 after 3 retries"}}
    assert failure_headline("FAILED", None, result) == "Failed: OpenAI: 503 after 3 retries."


def test_a_cancellation_says_who_or_why() -> None:
    by_person = {"code": "CANCELLED", "message": "Cancelled by alice in the browser."}
    assert failure_headline("CANCELLED", by_person, None) == "Cancelled by alice in the browser."
    assert failure_headline("CANCELLED", {"code": "CANCELLED", "message": "Stopped from the command line."},
                            None) == "Cancelled: stopped from the command line."


def test_a_run_that_recorded_no_reason_says_where_to_look() -> None:
    assert failure_headline("FAILED", None, None) == (
        "Failed: the run recorded no reason; its timeline below shows how far it got.")
