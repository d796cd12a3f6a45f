"""/api/approvals (the decision endpoint resumes parked runs) and /api/protocol/parse-result."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from delegations.models import Approval, Run
from delegations.runs.workflows import run_create
from tests.delegations import scripts

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
    assert again.status_code == 409 and "already" in again.json()["detail"]


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
])
def test_incomplete_decisions_are_422_and_leave_the_item_pending(
        client: Client, parked: Run, approver_api: dict[str, str], body: dict[str, Any], reason: str) -> None:
    approval = Approval.objects.get()
    response = decide(client, approver_api, approval, **body)
    assert response.status_code == 422 and reason in str(response.json()["detail"])
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_only_approvers_decide(client: Client, parked: Run, composer_api: dict[str, str],
                               outsider_api: dict[str, str]) -> None:
    approval = Approval.objects.get()
    assert decide(client, composer_api, approval, decision="approve").status_code == 403  # owner sees it
    assert decide(client, outsider_api, approval, decision="approve").status_code == 404  # sees nothing
    assert client.get("/api/approvals", headers=outsider_api).json()["count"] == 0
    assert decide(client, {}, approval, decision="approve").status_code == 401


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
