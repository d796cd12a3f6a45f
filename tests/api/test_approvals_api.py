"""/api/approvals (the decision endpoint resumes parked runs) and /api/protocol/parse-result."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client, override_settings

from delegations.accounts.roles import OWN_RUN
from delegations.models import Approval, Run
from delegations.runs.workflows import run_create
from tests.conftest import bearer
from tests.delegations import scripts
from tests.delegations.inbox.test_context import ask
from tests.delegations.runs.test_run_pages import make_run

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def parked(composer: Any, immediate_tasks: None) -> Run:
    run = run_create(packet=scripts.approval_packet(), adapter="scripted",
                     config=scripts.needs_approval(), owner=composer)
    assert run.state == "AWAITING_APPROVAL"
    return run


def decide(client: Client, headers: dict[str, str], approval: Approval, **body: Any) -> Any:
    return client.post(f"/api/approvals/{approval.pk}/decision", body,
                       content_type="application/json", headers=headers)


def test_approvers_list_pending_items_with_their_context(client: Client, parked: Run,
                                                         approver_api: dict[str, str]) -> None:
    page = client.get("/api/approvals?status=pending&kind=capability", headers=approver_api).json()
    assert page["count"] == 1
    item = page["results"][0]
    assert item["run_id"] == parked.pk and item["root_run_id"] == parked.pk
    assert item["payload"]["tool"] == "delete_file" and item["payload"]["arguments"] == {"path": "stale.txt"}
    assert item["risk"] == "high" and "delete_file" in item["title"]
    assert client.get(f"/api/approvals/{item['id']}", headers=approver_api).json()["status"] == "pending"
    assert client.get("/api/approvals?status=approved", headers=approver_api).json()["count"] == 0


@pytest.mark.parametrize("query", ["status=maybe", "kind=bribe", "page=0"])
def test_bad_approval_filters_are_422(client: Client, approver_api: dict[str, str], query: str) -> None:
    assert client.get(f"/api/approvals?{query}", headers=approver_api).status_code == 422


def test_an_approval_resumes_the_parked_run_to_its_result(client: Client, parked: Run,
                                                          approver_api: dict[str, str]) -> None:
    approval = Approval.objects.get()
    response = decide(client, approver_api, approval, decision="approve", comment="fine")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["decision"], body["decided_by"]) == ("approved", "approve", "alice")
    parked.refresh_from_db()
    assert parked.state == "COMPLETE"


def test_a_second_decision_is_409(client: Client, parked: Run, approver_api: dict[str, str]) -> None:
    approval = Approval.objects.get()
    assert decide(client, approver_api, approval, decision="reject", comment="no").status_code == 200
    again = decide(client, approver_api, approval, decision="approve")
    assert again.status_code == 409 and again.json()["detail"].startswith("Already rejected by alice at ")


def test_a_rejection_goes_back_to_the_run(client: Client, parked: Run, approver_api: dict[str, str]) -> None:
    approval = Approval.objects.get()
    decide(client, approver_api, approval, decision="reject", comment="Keep that file.")
    parked.refresh_from_db()
    assert parked.is_terminal
    refused = [e for e in parked.events.filter(type="tool_result")]
    assert refused and refused[0].data["ok"] is False


@pytest.mark.parametrize(("body", "reason"), [
    ({"decision": "reject"}, "comment"),
    ({"decision": "reject", "comment": "   "}, "comment"),
    ({"decision": "answer"}, "answer"),
    ({"decision": "edit"}, "edited_arguments"),
    ({"decision": "shrug"}, "decision"),
    ({"decision": "retry"}, "does not fit"),
    ({"decision": "approve", "budget_limit": {"max_tokens": 10}}, "budget_limit"),
])
def test_incomplete_decisions_are_422_and_leave_the_item_pending(
        client: Client, parked: Run, approver_api: dict[str, str], body: dict[str, Any], reason: str) -> None:
    approval = Approval.objects.get()
    response = decide(client, approver_api, approval, **body)
    assert response.status_code == 422 and reason in str(response.json()["detail"])
    approval.refresh_from_db()
    assert approval.status == "pending"


@pytest.mark.parametrize("budget_limit", [{"max_model_calls": 500},
                                          {"max_tokens": 2000, "max_cost_usd": 5.0}])
def test_a_budget_item_is_not_approved_with_a_raise_on_another_limit_than_it_asks_about(
        client: Client, composer: Any, approver_api: dict[str, str], queued_tasks: None,
        budget_limit: dict[str, Any]) -> None:
    run = make_run(composer, state="AWAITING_APPROVAL")
    approval = ask(run, "budget", payload={"axis": "max_tokens", "limit": 1000, "used": 850})
    response = decide(client, approver_api, approval, decision="approve", budget_limit=budget_limit)
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert "asks about max_tokens" in detail and "max_tokens" in detail.split("not ")[0]
    approval.refresh_from_db()
    assert approval.is_pending and approval.budget_limit is None and approval.decided_by is None
    run.refresh_from_db()
    assert run.budget == {"max_model_calls": 10, "max_tokens": 1000, "max_runtime_s": None, "max_cost_usd": 0.5}
    raised = decide(client, approver_api, approval, decision="approve", budget_limit={"max_tokens": 2000})
    assert raised.status_code == 200 and raised.json()["budget_limit"] == {"max_tokens": 2000}


def test_only_approvers_decide(client: Client, parked: Run, composer_api: dict[str, str],
                               outsider_api: dict[str, str]) -> None:
    approval = Approval.objects.get()
    refused = decide(client, composer_api, approval, decision="approve")   # the owner sees it
    assert refused.status_code == 403 and "approver role" in refused.json()["detail"]
    assert decide(client, outsider_api, approval, decision="approve").status_code == 404  # sees nothing
    assert client.get("/api/approvals", headers=outsider_api).json()["count"] == 0
    assert decide(client, {}, approval, decision="approve").status_code == 401
    approval.refresh_from_db()
    assert approval.is_pending


def test_nobody_approves_the_risky_actions_of_their_own_run(client: Client, admin_user: Any,
                                                            immediate_tasks: None) -> None:
    run_create(packet=scripts.approval_packet(), adapter="scripted", config=scripts.needs_approval(),
               owner=admin_user)
    approval = Approval.objects.get()
    refused = decide(client, bearer(admin_user), approval, decision="approve")
    assert refused.status_code == 403
    assert refused.json()["detail"] == OWN_RUN
    assert client.get(f"/api/approvals/{approval.pk}", headers=bearer(admin_user)).json()["refusal"] \
        == refused.json()["detail"]
    with override_settings(HANDOFF_ALLOW_SELF_APPROVAL=True):
        assert decide(client, bearer(admin_user), approval, decision="approve").status_code == 200


def test_unknown_items_are_404(client: Client, approver_api: dict[str, str]) -> None:
    assert client.get("/api/approvals/999999", headers=approver_api).status_code == 404
    assert decide_id(client, approver_api, 999999, decision="approve").status_code == 404


def decide_id(client: Client, headers: dict[str, str], approval_id: int, **body: Any) -> Any:
    return client.post(f"/api/approvals/{approval_id}/decision", body, content_type="application/json",
                       headers=headers)


def test_edited_arguments_that_break_the_tools_schema_are_422_with_every_error(
        client: Client, parked: Run, approver_api: dict[str, str]) -> None:
    approval = Approval.objects.get()
    response = decide(client, approver_api, approval, decision="edit",
                      edited_arguments={"path": 3, "recursive": True})
    assert response.status_code == 422
    errors = response.json()["errors"]
    assert len(errors) == 2 and any("path" in e for e in errors) and any("recursive" in e for e in errors)
    answered = decide(client, approver_api, approval, decision="answer", answer="yes")
    assert answered.status_code == 422 and "approve, edit, reject" in answered.json()["detail"]
    approval.refresh_from_db()
    assert approval.is_pending
    edited = decide(client, approver_api, approval, decision="edit", edited_arguments={"path": "other.txt"},
                    always_allow=True)
    assert edited.status_code == 200
    assert (edited.json()["status"], edited.json()["always_allow"]) == ("edited", True)
    assert edited.json()["edited_arguments"] == {"path": "other.txt"}


def test_the_detail_has_the_lineage_grants_budget_and_recent_activity(
        client: Client, composer: Any, approver_api: dict[str, str], immediate_tasks: None) -> None:
    run = run_create(packet=scripts.approval_packet(budget={"max_tokens": 5000}), adapter="scripted",
                     config=scripts.with_child(scripts.needs_approval()), owner=composer)
    approval = Approval.objects.get()
    body = client.get(f"/api/approvals/{approval.pk}", headers=approver_api).json()
    assert [node["depth"] for node in body["lineage"]] == [0, 1]
    assert body["lineage"][0]["run_id"] == run.pk and body["lineage"][1]["run_id"] == approval.run_id
    assert body["lineage"][1]["label"] == "kid" and body["lineage"][1]["role"] == "researcher"
    assert any("delete_file" in line for line in body["grants"])
    assert body["budget"]["root"]["max_tokens"]["limit"] == 5000
    assert body["budget"]["ancestors_left"]["max_tokens"] == 5000
    assert body["recent_events"] and body["recent_events"][-1]["type"] in ("approval", "state")
    assert body["allowed"] == ["approve", "edit", "reject"] and body["refusal"] is None
    assert body["expires_at"] and 0 < body["time_left_s"] <= 24 * 3600
    assert isinstance(body["context"], dict) and body["context"]


def test_the_list_filters_by_run_and_risk(client: Client, parked: Run, composer: Any,
                                          approver_api: dict[str, str]) -> None:
    run_create(packet=scripts.packet(), adapter="scripted", config={"script": [
        {"text": "Which region?", "tool_calls": [{"name": "yield_control", "arguments": {
            "status": "BLOCKED_AWAITING_CLARIFICATION", "output_payload": {},
            "open_questions": ["Which region?"]}}]}]}, owner=composer)
    everything = client.get("/api/approvals", headers=approver_api).json()
    assert everything["count"] == 2
    of_run = client.get(f"/api/approvals?run={parked.pk}", headers=approver_api).json()
    assert [item["run_id"] for item in of_run["results"]] == [parked.pk]
    assert client.get("/api/approvals?risk=high", headers=approver_api).json()["count"] == 1
    assert client.get("/api/approvals?risk=low", headers=approver_api).json()["results"][0]["kind"] \
        == "clarification"
    assert client.get("/api/approvals?risk=extreme", headers=approver_api).status_code == 422


def two_items(owner: Any) -> Run:
    config = {"script": [scripts.delegate_turn("a", "b"), scripts.yield_turn()],
              "children": {"a": scripts.needs_approval(), "b": scripts.needs_approval()}}
    return run_create(packet=scripts.approval_packet(), adapter="scripted", config=config, owner=owner)


def batch(client: Client, headers: dict[str, str], **body: Any) -> Any:
    return client.post("/api/approvals/batch", body, content_type="application/json", headers=headers)


def test_a_batch_decides_the_items_of_one_run(client: Client, composer: Any, approver_api: dict[str, str],
                                              immediate_tasks: None) -> None:
    run = two_items(composer)
    ids = sorted(Approval.objects.values_list("pk", flat=True))
    response = batch(client, approver_api, ids=ids, decision="approve", comment="both")
    assert response.status_code == 200
    assert [(a["id"], a["status"]) for a in response.json()] == [(ids[0], "approved"), (ids[1], "approved")]
    run.refresh_from_db()
    assert run.state == "COMPLETE"


def test_a_bad_batch_names_the_item_and_decides_nothing(client: Client, composer: Any, parked: Run,
                                                        approver_api: dict[str, str]) -> None:
    two_items(composer)
    tree = sorted(Approval.objects.exclude(run=parked).values_list("pk", flat=True))
    other = Approval.objects.get(run=parked).pk
    mixed = batch(client, approver_api, ids=[tree[0], other], decision="approve")
    assert mixed.status_code == 422 and f"#{other}" in mixed.json()["detail"]
    assert batch(client, approver_api, ids=[tree[0], 999999], decision="approve").status_code == 404
    assert batch(client, approver_api, ids=tree, decision="reject").status_code == 422   # no comment
    assert Approval.objects.filter(status="pending").count() == 3
    decide_id(client, approver_api, tree[1], decision="reject", comment="no")
    held = batch(client, approver_api, ids=tree, decision="reject", comment="no")
    assert held.status_code == 409 and f"#{tree[1]}" in held.json()["detail"]
    assert Approval.objects.get(pk=tree[0]).is_pending


def test_the_approvals_api_is_in_the_openapi_document(client: Client) -> None:
    paths = client.get("/api/openapi.json").json()["paths"]
    assert "/api/approvals/batch" in paths and "/api/approvals/{approval_id}/decision" in paths
    decision = paths["/api/approvals/{approval_id}/decision"]["post"]
    assert decision["summary"] == "Decide an inbox item"


def test_an_answer_continues_a_run_that_asked_for_clarification(
        client: Client, composer: Any, approver_api: dict[str, str], immediate_tasks: None) -> None:
    config = {"script": [
        {"text": "Which region?", "tool_calls": [{"name": "yield_control", "arguments": {
            "status": "BLOCKED_AWAITING_CLARIFICATION", "output_payload": {},
            "open_questions": ["Which region should I compare?"]}}]},
        scripts.yield_turn()]}
    run = run_create(packet=scripts.packet(), adapter="scripted", config=config, owner=composer)
    assert run.state == "AWAITING_APPROVAL"
    approval = Approval.objects.get(kind="clarification")
    assert decide(client, approver_api, approval, decision="answer",
                  answer="Europe only.").status_code == 200
    run.refresh_from_db()
    assert run.state == "COMPLETE"


def test_parse_result_normalizes_every_dialect(client: Client, composer_api: dict[str, str]) -> None:
    url = "/api/protocol/parse-result"
    envelope = {"status": "completed", "summary": "A is fastest.",
                "evidence": [{"source": "tool:metrics", "artifactId": "art_1"}]}
    parsed = client.post(url, envelope, content_type="application/json", headers=composer_api).json()
    assert parsed["status"] == "SUCCESS" and parsed["evidence"][0]["artifact_id"] == "art_1"
    block = "Done.\n\n## RESULT\n- Status: COMPLETE\n- Files Modified: a.py\n"
    as_text = client.post(url, block, content_type="text/plain", headers=composer_api).json()
    assert as_text["status"] == "SUCCESS" and as_text["files_modified"] == ["a.py"]
    wrapped = client.post(url, {"text": block}, content_type="application/json", headers=composer_api)
    assert wrapped.json()["status"] == "SUCCESS"


@pytest.mark.parametrize(("body", "content_type"), [
    ("just some prose", "text/plain"), ("{broken", "application/json"), ("[1, 2]", "application/json"),
    ('{"status": "WHATEVER"}', "application/json"), ("", "text/plain"),
])
def test_parse_result_says_why_an_unusable_result_is_refused(
        client: Client, composer_api: dict[str, str], body: str, content_type: str) -> None:
    response = client.post("/api/protocol/parse-result", body, content_type=content_type,
                           headers=composer_api)
    assert response.status_code == 422
    assert response.json()["detail"]
