"""Deciding inbox items end to end with scripted runs: raise -> park -> decide -> resume ->
result, for each kind and each decision it allows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from delegations.inbox.decisions import approval_decide, validate_edited_arguments
from delegations.models import Approval, Run, RunCheckpoint
from delegations.refusals import Refusal
from delegations.runs.workflows import run_create
from tests.delegations import scripts

pytestmark = [pytest.mark.django_db(transaction=True)]


def start(owner: Any, config: dict[str, Any], **packet: Any) -> Run:
    return run_create(packet=scripts.packet(**packet), adapter="scripted", config=config, owner=owner)


def parked_item(run: Run, kind: str) -> Approval:
    run.refresh_from_db()
    assert run.state == "AWAITING_APPROVAL", run.error
    return Approval.objects.select_related("run").get(kind=kind, status="pending")


def workspace_of(run: Run) -> Path:
    path = Path(settings.HANDOFF_WORKSPACE_ROOT) / run.pk
    path.mkdir(parents=True, exist_ok=True)
    return path


def tool_results(run: Run) -> list[dict[str, Any]]:
    return [e.data for e in run.events.filter(type="tool_result").order_by("seq")]


def final(run: Run) -> Run:
    run.refresh_from_db()
    return run


def delete_call(path: str) -> dict[str, Any]:
    return {"text": f"Removing {path}.", "tool_calls": [{"name": "delete_file", "arguments": {"path": path}}]}


# -- capability: approve, reject, edit, always allow --------------------------------------------

def test_an_approved_tool_call_runs_and_the_run_completes(composer, approver, immediate_tasks):
    run = start(composer, scripts.needs_approval(), capabilities=["file_delete"])
    (workspace_of(run) / "stale.txt").write_text("old\n")
    approval = parked_item(run, "capability")
    decided = approval_decide(approval=approval, user=approver, decision="approve", comment="fine")
    assert (decided.status, decided.decided_by, decided.comment) == ("approved", approver, "fine")
    assert final(run).state == "COMPLETE" and run.result["status"] == "SUCCESS"
    assert tool_results(run)[0]["ok"] is True
    assert not (workspace_of(run) / "stale.txt").exists()


def test_a_rejected_tool_call_returns_err_constraint_violation_with_the_comment(composer, approver,
                                                                               immediate_tasks):
    run = start(composer, scripts.needs_approval(), capabilities=["file_delete"])
    (workspace_of(run) / "stale.txt").write_text("old\n")
    approval_decide(approval=parked_item(run, "capability"), user=approver, decision="reject",
                    comment="The nightly report still reads it.")
    assert final(run).state == "COMPLETE"
    [refused] = tool_results(run)
    assert refused["error"]["code"] == "ERR_CONSTRAINT_VIOLATION"
    assert "The nightly report still reads it." in refused["error"]["message"]
    assert (workspace_of(run) / "stale.txt").exists()


def test_edited_arguments_are_checked_against_the_tools_schema_then_run(composer, approver, immediate_tasks):
    run = start(composer, scripts.needs_approval(), capabilities=["file_delete"])
    folder = workspace_of(run)
    (folder / "stale.txt").write_text("keep\n")
    (folder / "other.txt").write_text("old\n")
    approval = parked_item(run, "capability")
    assert validate_edited_arguments(approval, {"path": "other.txt"}) == []
    errors = validate_edited_arguments(approval, {"path": 7, "force": True})
    assert len(errors) == 2 and any("7" in e for e in errors) and any("force" in e for e in errors)
    with pytest.raises(Refusal) as refused:
        approval_decide(approval=approval, user=approver, decision="edit", edited_arguments={"path": 7, "force": True})
    assert refused.value.status == 422 and refused.value.details["errors"] == errors
    approval_decide(approval=approval, user=approver, decision="edit", edited_arguments={"path": "other.txt"})
    approval.refresh_from_db()
    assert (approval.status, approval.edited_arguments) == ("edited", {"path": "other.txt"})
    assert final(run).state == "COMPLETE"
    assert (folder / "stale.txt").exists() and not (folder / "other.txt").exists()


def test_always_allow_lets_later_calls_of_the_tool_in_the_run_and_its_child_go_ahead(
        composer, approver, immediate_tasks):
    child = {"script": [delete_call("c.txt"), scripts.yield_turn()]}
    config = {"script": [delete_call("a.txt"), delete_call("b.txt"), scripts.delegate_turn("kid"),
                         scripts.yield_turn()],
              "children": {"kid": child}}
    run = start(composer, config, capabilities=["file_delete"])
    folder = workspace_of(run)
    for name in ("a.txt", "b.txt", "c.txt"):
        (folder / name).write_text("x\n")
    approval = parked_item(run, "capability")
    approval_decide(approval=approval, user=approver, decision="approve", always_allow=True)
    assert final(run).state == "COMPLETE", run.error
    assert Approval.objects.count() == 1          # neither the second call nor the child's asked
    approval.refresh_from_db()
    assert approval.always_allow is True
    assert not any((folder / name).exists() for name in ("a.txt", "b.txt", "c.txt"))
    kid = Run.objects.get(parent=run)
    assert kid.events.filter(type="log", data__always_allowed_by="alice").exists()
    assert RunCheckpoint.data_of(run.pk)["always_allowed"] == {"delete_file": "alice"}


def test_always_allow_belongs_to_approving_a_tool_call(composer, approver, immediate_tasks):
    run = start(composer, scripts.needs_approval(), capabilities=["file_delete"])
    approval = parked_item(run, "capability")
    with pytest.raises(Refusal) as refused:
        approval_decide(approval=approval, user=approver, decision="reject", comment="no", always_allow=True)
    assert refused.value.status == 422 and "always_allow" in refused.value.message


# -- capability requests -----------------------------------------------------------------------

def request_config() -> dict[str, Any]:
    return {"script": [{"text": "I need to delete files.", "tool_calls": [{"name": "request_capability",
                        "arguments": {"capability": "file_delete", "reason": "remove stale output"}}]},
                       scripts.yield_turn()]}


@pytest.mark.parametrize(("decision", "granted"), [("approve", True), ("reject", False)])
def test_a_capability_request_is_granted_or_refused(composer, approver, immediate_tasks, decision, granted):
    run = start(composer, request_config())
    approval = parked_item(run, "capability_request")
    assert approval.allowed == ("approve", "reject")
    approval_decide(approval=approval, user=approver, decision=decision, comment="as you asked")
    assert final(run).state == "COMPLETE"
    [result] = tool_results(run)
    assert result["ok"] is granted
    if granted:
        assert result["result"]["tools"] == ["delete_file"]
    else:
        assert "as you asked" in result["error"]["message"]


# -- clarifications ------------------------------------------------------------------------------

def clarification_config() -> dict[str, Any]:
    return {"script": [{"text": "Which region?", "tool_calls": [{"name": "yield_control", "arguments": {
        "status": "BLOCKED_AWAITING_CLARIFICATION", "output_payload": {},
        "open_questions": ["Which region should I compare?"]}}]}, scripts.yield_turn()]}


def test_an_answer_joins_the_runs_context_and_the_same_run_resumes(composer, approver, immediate_tasks):
    run = start(composer, clarification_config())
    approval = parked_item(run, "clarification")
    with pytest.raises(Refusal) as refused:
        approval_decide(approval=approval, user=approver, decision="approve")
    assert refused.value.status == 422 and "answer" in refused.value.message
    approval_decide(approval=approval, user=approver, decision="answer", answer="Europe only.")
    assert final(run).state == "COMPLETE" and Run.objects.count() == 1
    messages = RunCheckpoint.data_of(run.pk)["messages"]
    assert any("Europe only." in str(m.get("content")) for m in messages if m["role"] == "user")


def test_an_answer_longer_than_a_message_is_refused_and_the_question_stays_open(
        composer, approver, immediate_tasks):
    run = start(composer, clarification_config())
    approval = parked_item(run, "clarification")
    with pytest.raises(Refusal) as refused:
        approval_decide(approval=approval, user=approver, decision="answer", answer="Europe. " * 2_501)
    assert refused.value.status == 422 and "at most 20,000" in refused.value.message
    approval.refresh_from_db()
    assert approval.status == "pending" and approval.answer == ""
    approval_decide(approval=approval, user=approver, decision="answer", answer="E" * 20_000)
    assert final(run).state == "COMPLETE"


def test_a_rejected_clarification_fails_the_run_with_the_comment(composer, approver, immediate_tasks):
    run = start(composer, clarification_config())
    approval_decide(approval=parked_item(run, "clarification"), user=approver, decision="reject",
                    comment="Out of scope for this study.")
    assert final(run).state == "FAILED"
    assert run.error["code"] == "ERR_INSUFFICIENT_CONTEXT" and "Out of scope" in run.error["message"]


def test_answer_on_a_tool_call_is_422(composer, approver, immediate_tasks):
    run = start(composer, scripts.needs_approval(), capabilities=["file_delete"])
    with pytest.raises(Refusal) as refused:
        approval_decide(approval=parked_item(run, "capability"), user=approver, decision="answer", answer="yes")
    assert refused.value.status == 422 and "approve, edit, reject" in refused.value.message


# -- budgets ------------------------------------------------------------------------------------

def spending(turns: int) -> dict[str, Any]:
    """Every turn spends 40 tokens: with max_tokens 100 the second crosses the soft threshold."""
    busy = {"tool_calls": [{"name": "list_files", "arguments": {}}],
            "usage": {"input_tokens": 40, "output_tokens": 0}}
    return {"script": [*[busy] * (turns - 1), {**scripts.yield_turn(), "usage": {"input_tokens": 1,
                                                                                 "output_tokens": 0}}]}


def test_a_budget_item_continues_with_a_raised_limit(composer, approver, immediate_tasks):
    run = start(composer, spending(4), capabilities=["fs_read"], budget={"max_tokens": 100})
    approval = parked_item(run, "budget")
    approval_decide(approval=approval, user=approver, decision="approve", budget_limit={"max_tokens": 1000})
    approval.refresh_from_db()
    assert approval.budget_limit == {"max_tokens": 1000}
    assert final(run).state == "COMPLETE", run.error
    assert run.budget["max_tokens"] == 1000 and run.usage["total_tokens"] == 121
    assert run.events.filter(type="log", data__raised__max_tokens=1000).exists()


def test_stopping_at_the_budget_ends_the_run_as_an_exhausted_budget(composer, approver, immediate_tasks):
    run = start(composer, spending(4), capabilities=["fs_read"], budget={"max_tokens": 100})
    approval_decide(approval=parked_item(run, "budget"), user=approver, decision="reject", comment="Too costly.")
    assert final(run).state == "FAILED" and run.error["code"] == "ERR_RESOURCE_EXHAUSTED"


def test_a_raise_above_the_parents_remainder_is_422_and_decides_nothing(composer, approver, immediate_tasks):
    kid_turn = scripts.delegate_turn("kid")
    kid_turn["tool_calls"][0]["arguments"]["budget"] = {"max_tokens": 100}
    config = {"script": [kid_turn, scripts.yield_turn()], "children": {"kid": spending(4)}}
    run = start(composer, config, capabilities=["fs_read"], budget={"max_tokens": 500})
    approval = parked_item(run, "budget")
    assert approval.run.parent_id == run.pk
    with pytest.raises(Refusal) as refused:
        approval_decide(approval=approval, user=approver, decision="approve", budget_limit={"max_tokens": 5000})
    assert refused.value.status == 422 and "at most 500" in refused.value.message
    with pytest.raises(Refusal) as not_a_raise:
        approval_decide(approval=approval, user=approver, decision="approve", budget_limit={"max_tokens": 90})
    assert "not above" in not_a_raise.value.message
    approval.refresh_from_db()
    assert approval.is_pending
    approval_decide(approval=approval, user=approver, decision="approve", budget_limit={"max_tokens": 400})
    assert final(run).state == "COMPLETE", run.error


# -- results that failed validation ---------------------------------------------------------------

def invalid_config(*then: dict[str, Any]) -> dict[str, Any]:
    wrong = scripts.yield_turn({"answer": "forty-two"})
    return {"script": [wrong, wrong, *then]}


def test_an_invalid_result_accepted_as_partial_is_kept(composer, approver, immediate_tasks):
    run = start(composer, invalid_config())
    approval = parked_item(run, "invalid_result")
    assert approval.allowed == ("approve", "retry", "reject") and approval.payload["problems"]
    approval_decide(approval=approval, user=approver, decision="approve")
    assert final(run).state == "COMPLETE"
    assert run.result["status"] == "PARTIAL_COMPLETION" and run.result["output_payload"] == {"answer": "forty-two"}


def test_an_invalid_result_retried_gets_a_fresh_context(composer, approver, immediate_tasks):
    run = start(composer, invalid_config(scripts.yield_turn()))
    approval = parked_item(run, "invalid_result")
    approval_decide(approval=approval, user=approver, decision="retry", comment="An integer, please.")
    approval.refresh_from_db()
    assert (approval.status, approval.decision) == ("retried", "retry")
    assert final(run).state == "COMPLETE" and run.result["output_payload"] == scripts.ANSWER
    assert RunCheckpoint.data_of(run.pk)["packet"]["previous_failure"]["fix_instructions"] == "An integer, please."


def test_an_invalid_result_failed_by_a_person(composer, approver, immediate_tasks):
    run = start(composer, invalid_config())
    approval_decide(approval=parked_item(run, "invalid_result"), user=approver, decision="reject",
                    comment="Not usable.")
    assert final(run).state == "FAILED" and run.error["code"] == "ERR_INVALID_RESULT"
    assert "Not usable." in run.error["message"]


def test_the_fail_policy_skips_the_inbox(composer, immediate_tasks, settings):
    settings.HANDOFF_INVALID_RESULT_POLICY = "fail"
    run = start(composer, invalid_config())
    assert final(run).state == "FAILED" and not Approval.objects.exists()


def test_edited_arguments_are_checked_with_their_formats(composer):
    run = Run.objects.create(owner=composer, adapter_name="scripted", packet=scripts.packet())
    approval = Approval.objects.create(run=run, key=f"{run.pk}:capability:call_0_0", kind="capability",
                                       title="wants to http_get", payload={
                                           "tool": "http_get", "capability": "network_outbound",
                                           "arguments": {"url": "https://example.com/quote"}})
    assert validate_edited_arguments(approval, {"url": "https://example.com/other?page=2"}) == []
    assert validate_edited_arguments(approval, {"url": "not a url at all"}) == [
        "url: 'not a url at all' is not a 'uri'"]
