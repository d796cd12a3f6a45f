"""What people do with runs that need them, on a real `manage.py serve` started as `make
run` starts it (uvicorn, the embedded worker, Django's async-safety check on), through the
REST API a program or the inbox page uses: approve, reject with a comment, answer a
clarification, accept or reject a parked invalid result, a rule deciding an item, an item
that needs two approvers, cancelling a parked run, and the built-in skill that fetches a
page after a person approves it.

Each journey ran into `SynchronousOnlyOperation` on the server before the inbox's async
code was fixed: the suite had switched the check off for itself and every server it
started, so none of these waited for a person on `make run`."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from django.core.management import call_command

from tests.conftest import bearer, make_user
from tests.delegations import scripts
from tests.services import http_on_loopback, page_handler

pytestmark = [pytest.mark.slow]

TERMINAL = {"COMPLETE", "FAILED", "REJECTED", "TIMEOUT", "CANCELLED", "RETURNED"}


class Site:
    """The live server and the people who use it, each with an API token."""

    def __init__(self, url: str, people: dict[str, Any]) -> None:
        self.url = url
        self.people = people
        self.headers = {name: bearer(user) for name, user in people.items()}

    def post(self, path: str, who: str, **body: Any) -> httpx.Response:
        return httpx.post(f"{self.url}{path}", json=body, headers=self.headers[who], timeout=30)

    def get(self, path: str, who: str = "composer") -> Any:
        answer = httpx.get(f"{self.url}{path}", headers=self.headers[who], timeout=30)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def start(self, packet: dict[str, Any], script: dict[str, Any]) -> str:
        answer = self.post("/api/runs", "composer", packet=packet,
                           adapter={"name": "scripted", "config": script})
        assert answer.status_code == 201, answer.text
        return str(answer.json()["id"])

    def run(self, run_id: str) -> dict[str, Any]:
        return dict(self.get(f"/api/runs/{run_id}"))

    def until(self, run_id: str, *states: str, seconds: float = 30) -> dict[str, Any]:
        """The run once it is in one of ``states`` (or fails the test, saying where it is)."""
        deadline = time.monotonic() + seconds
        run = self.run(run_id)
        while run["state"] not in states and time.monotonic() < deadline:
            time.sleep(0.1)
            run = self.run(run_id)
        assert run["state"] in states, (f"run {run_id} is {run['state']}, not {states}: "
                                        f"{run.get('error') or run.get('result')}")
        return run

    def waiting_item(self, run_id: str, seconds: float = 30) -> dict[str, Any]:
        """The one inbox item the parked run waits on (once it has one: a run just resumed
        may still read AWAITING_APPROVAL before it asks again)."""
        deadline = time.monotonic() + seconds
        while True:
            run = self.until(run_id, "AWAITING_APPROVAL", seconds=seconds)
            items = self.get(f"/api/approvals?run={run_id}&status=pending", "approver")["results"]
            if items or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert len(items) == 1, (items, run["state"])
        return dict(items[0])

    def decide(self, item_id: int, who: str = "approver", **body: Any) -> dict[str, Any]:
        answer = self.post(f"/api/approvals/{item_id}/decision", who, **body)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def events(self, run_id: str) -> list[dict[str, Any]]:
        return list(self.get(f"/api/runs/{run_id}/events")["events"])


@pytest.fixture
def site(live_url: str, django_user_model: Any) -> Site:
    return Site(live_url, {
        "composer": make_user(django_user_model, "carol", "composers", password=None),
        "approver": make_user(django_user_model, "alice", "approvers", password=None),
        "second_approver": make_user(django_user_model, "bob", "approvers", password=None),
        "author": make_user(django_user_model, "rita", "approvers", "rule_authors", password=None),
    })


def tool_results(site: Site, run_id: str, tool: str) -> list[dict[str, Any]]:
    return [event["data"] for event in site.events(run_id)
            if event["type"] == "tool_result" and event["data"].get("name") == tool]


# -- a tool call that needs an approval-required capability -----------------------------------

def test_a_tool_call_waits_for_a_person_and_goes_ahead_once_approved(site: Site) -> None:
    run_id = site.start(scripts.approval_packet(), scripts.needs_approval())
    item = site.waiting_item(run_id)
    assert item["kind"] == "capability" and item["status"] == "pending"
    # it stays parked: nobody decided, so nothing goes ahead (it resumed at once before)
    assert site.run(run_id)["state"] == "AWAITING_APPROVAL"
    assert not tool_results(site, run_id, "delete_file")

    decided = site.decide(item["id"], decision="approve", comment="stale file, fine")
    assert decided["status"] == "approved" and decided["decided_by"] == "alice"
    run = site.until(run_id, *TERMINAL)
    assert run["state"] == "COMPLETE", run
    [result] = tool_results(site, run_id, "delete_file")
    assert "SynchronousOnlyOperation" not in str(result)


def test_a_rejected_tool_call_tells_the_subagent_the_comment_and_the_run_goes_on(site: Site) -> None:
    run_id = site.start(scripts.approval_packet(), scripts.needs_approval())
    item = site.waiting_item(run_id)
    refused = site.post(f"/api/approvals/{item['id']}/decision", "approver", decision="reject")
    assert refused.status_code == 422 and "comment" in refused.text   # a reject says why

    site.decide(item["id"], decision="reject", comment="keep that file, it is the audit trail")
    run = site.until(run_id, *TERMINAL)
    assert run["state"] == "COMPLETE", run
    [result] = tool_results(site, run_id, "delete_file")
    assert "ERR_CONSTRAINT_VIOLATION" in str(result) and "audit trail" in str(result)


# -- a clarification -----------------------------------------------------------------------------

def test_a_clarification_waits_for_the_answer_and_the_same_run_resumes_with_it(site: Site) -> None:
    script = {"script": [
        {"text": "Which region?", "tool_calls": [{"name": "yield_control", "arguments": {
            "status": "BLOCKED_AWAITING_CLARIFICATION", "output_payload": {},
            "open_questions": ["Which region should I compare?"]}}]},
        scripts.yield_turn()]}
    run_id = site.start(scripts.packet(), script)
    item = site.waiting_item(run_id)
    assert item["kind"] == "clarification"
    assert "Which region should I compare?" in str(item["payload"])

    site.decide(item["id"], decision="answer", answer="Europe only.")
    run = site.until(run_id, *TERMINAL)
    assert run["state"] == "COMPLETE", run
    assert run["result"]["output_payload"] == scripts.ANSWER
    assert any("Europe only." in str(event["data"]) for event in site.events(run_id)
               if event["type"] in ("message", "approval"))


# -- a result still invalid after the self-correction turn --------------------------------------

INVALID = {"script": [scripts.yield_turn({"answer": "many"}), scripts.yield_turn({"answer": "lots"})]}


def test_an_invalid_result_parks_for_a_person_who_accepts_it_as_partial(site: Site) -> None:
    run_id = site.start(scripts.packet(), INVALID)
    item = site.waiting_item(run_id)
    assert item["kind"] == "invalid_result" and set(item["allowed"]) == {"approve", "retry", "reject"}

    site.decide(item["id"], decision="approve", comment="good enough for now")
    run = site.until(run_id, *TERMINAL)
    assert run["state"] == "COMPLETE", run
    assert run["result"]["status"] == "PARTIAL_COMPLETION"
    assert run["result"]["output_payload"] == {"answer": "lots"}


def test_an_invalid_result_rejected_by_a_person_fails_the_run_saying_why(site: Site) -> None:
    run_id = site.start(scripts.packet(), INVALID)
    item = site.waiting_item(run_id)
    site.decide(item["id"], decision="reject", comment="the answer must be a number")
    run = site.until(run_id, *TERMINAL)
    assert run["state"] == "FAILED", run
    message = str(run["error"]["message"])
    assert "the answer must be a number" in message
    assert "Exception" not in message and "Error:" not in message.replace("ERR_", "")


# -- approval rules ---------------------------------------------------------------------------

def add_rule(site: Site, **body: Any) -> dict[str, Any]:
    rule = {"name": "stale deletes", "reason": "routine clean-up in the run's own folder",
            "effect": "approve", "match": {"kinds": ["capability"], "capabilities": ["file_delete"],
                                           "tools": ["delete_file"],
                                           "arguments": [{"name": "path", "op": "under", "value": "."}]},
            **body}
    answer = site.post("/api/approval-rules", "author", **rule)
    assert answer.status_code == 201, answer.text
    return dict(answer.json()["rule"])


def test_a_rule_decides_the_item_as_it_opens_and_the_run_never_waits(site: Site) -> None:
    add_rule(site)
    run_id = site.start(scripts.approval_packet(), scripts.needs_approval())
    run = site.until(run_id, *TERMINAL)
    assert run["state"] == "COMPLETE", run
    [item] = site.get(f"/api/approvals?run={run_id}", "approver")["results"]
    shown = site.get(f"/api/approvals/{item['id']}", "approver")
    assert shown["status"] == "approved" and shown["decided_by"] == "rule 'stale deletes' v1"
    assert shown["rule"]["matched"]["tool"] == "delete_file"


def test_an_item_a_rule_sends_to_two_approvers_goes_ahead_after_the_second(site: Site) -> None:
    add_rule(site, name="two for deletes", effect="two_approvers")
    run_id = site.start(scripts.approval_packet(), scripts.needs_approval())
    item = site.waiting_item(run_id)

    first = site.decide(item["id"], decision="approve", comment="looks fine")
    assert first["status"] == "pending"    # one more approver, someone else
    again = site.post(f"/api/approvals/{item['id']}/decision", "approver", decision="approve")
    assert again.status_code == 409 and "You approved this already" in again.text
    assert site.run(run_id)["state"] == "AWAITING_APPROVAL"

    second = site.decide(item["id"], "second_approver", decision="approve", comment="agreed")
    assert second["status"] == "approved"
    assert site.until(run_id, *TERMINAL)["state"] == "COMPLETE"


# -- cancelling ---------------------------------------------------------------------------------

def test_cancelling_a_parked_run_ends_it_and_closes_its_item(site: Site) -> None:
    run_id = site.start(scripts.approval_packet(), scripts.needs_approval())
    item = site.waiting_item(run_id)
    answer = site.post(f"/api/runs/{run_id}/cancel", "composer")
    assert answer.status_code == 200, answer.text
    run = site.until(run_id, "CANCELLED")
    assert run["result"]["status"] == "FAILURE"
    assert site.get(f"/api/approvals/{item['id']}", "approver")["status"] == "cancelled"
    late = site.post(f"/api/approvals/{item['id']}/decision", "approver", decision="approve")
    assert late.status_code == 409


# -- the built-in skill that fetches a page ---------------------------------------------------

MUSEUM = ("<html><body><h1>Harbour Museum</h1><p>The museum is open from Tuesday to Sunday. "
          "On Sundays it opens at 11:00 and closes at 17:00.</p></body></html>")


MuseumPage = page_handler(MUSEUM)


def page_facts_run(site: Site, url: str, answer: dict[str, Any]) -> str:
    """page-facts as the catalog's composer starts it, with a model that fetches the page
    and then answers ``answer``."""
    call_command("load_builtin_skills", verbosity=0)
    packet = {"skill": "page-facts", "goal": "Find when the museum opens on Sundays.",
              "input_data": {"url": url, "question": "When does the museum open on Sundays?"},
              "allowed_inputs": ["url", "question"], "capabilities": ["network_outbound"],
              "success_criteria": ["JSON is schema-valid"], "timeout_s": 60,
              "budget": {"max_model_calls": 6}}
    script = {"script": [{"text": "Reading the page.", "tool_calls": [
        {"name": "http_get", "arguments": {"url": url}}]}, scripts.yield_turn(answer), scripts.yield_turn(answer)]}
    return site.start(packet, script)


def test_page_facts_fetches_the_page_a_person_approves_and_its_answer_is_checked_against_it(site: Site) -> None:
    right = {"answer": "11:00", "evidence": "On Sundays it opens at 11:00 and closes at 17:00.", "found": True}
    with http_on_loopback(MuseumPage) as base:
        run_id = page_facts_run(site, f"{base}/museum", right)
        item = site.waiting_item(run_id)
        assert item["kind"] == "capability" and item["payload"]["tool"] == "http_get"
        assert item["payload"]["arguments"] == {"url": f"{base}/museum"}
        site.decide(item["id"], decision="approve")
        run = site.until(run_id, *TERMINAL)
    assert run["state"] == "COMPLETE", run
    assert run["result"]["output_payload"] == right
    report = run["criteria_report"]
    assert report and all(row["met"] for row in report["items"]), report
    assert any("fetched_pages" in row["criterion"] for row in report["items"])


def test_page_facts_with_an_answer_the_page_does_not_hold_waits_in_the_inbox_saying_why(site: Site) -> None:
    invented = {"answer": "10:00", "evidence": "It opens at 10:00 on Sundays.", "found": True}
    with http_on_loopback(MuseumPage) as base:
        run_id = page_facts_run(site, f"{base}/museum", invented)
        site.decide(site.waiting_item(run_id)["id"], decision="approve")
        item = site.waiting_item(run_id)
    assert item["kind"] == "invalid_result"
    assert "is not a quote of fetched_pages" in str(item["payload"])
