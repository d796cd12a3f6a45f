"""Handoff hands work to another Handoff over A2A: two `manage.py serve` processes on
loopback, each with its own database (tests/integration/handoff_peers.py). A run on A calls
B's review-sentiment skill as a remote subagent; the call waits in A's inbox until an
approver there approves it, then runs on B as B's composer and ends with B's answer in A's
tree. A token B never issued, or B stopped, fails the remote child with the reason while
A's run goes on without it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.handoff_peers import (
    IMPOSTOR,
    REVIEW,
    SKILL,
    Handoff,
    QuotingModel,
    approve_remote_call,
    point_agents_at,
    remote_child,
    review_run,
    start_caller,
    start_remote,
    wait_for_run,
)
from tests.services import http_on_loopback

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def peers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Handoff, Handoff]]:
    """A (the caller) and B (the remote), shared by the module: each start costs seconds."""
    folder = tmp_path_factory.mktemp("peers")
    with (folder / "servers.log").open("w") as log, http_on_loopback(QuotingModel) as model:
        remote = start_remote(folder, log, model)
        try:
            caller = start_caller(folder, log, remote)
            try:
                yield caller, remote
            finally:
                caller.stop()
        finally:
            remote.stop()


@pytest.fixture
def caller(peers: tuple[Handoff, Handoff]) -> Handoff:
    return peers[0]


@pytest.fixture
def remote(peers: tuple[Handoff, Handoff]) -> Handoff:
    return peers[1]


def remote_task_of(caller: Handoff, child_id: str) -> str:
    """The id of the task the child's message started on the remote (logged when it is known)."""
    events = caller.get(f"/api/runs/{child_id}/events")["events"]
    [task_id] = [event["data"]["remote_task_id"] for event in events if "remote_task_id" in event["data"]]
    return str(task_id)


def skill_runs_on(remote: Handoff) -> list[dict[str, Any]]:
    return list(remote.get(f"/api/runs?skill={SKILL.split('@')[0]}&page_size=200")["results"])


def test_b_s_card_offers_the_skill_a_delegates_to(remote: Handoff) -> None:
    card = httpx.get(f"{remote.url}/.well-known/agent-card.json", timeout=10).json()
    assert SKILL in [skill["id"] for skill in card["skills"]]


def test_a_run_on_a_waits_for_a_s_approver_then_finishes_with_the_answer_b_s_run_gave(
        caller: Handoff, remote: Handoff) -> None:
    before = len(skill_runs_on(remote))
    run_id = review_run(caller)
    item = approve_remote_call(caller, run_id)
    assert item["kind"] == "capability" and "network_outbound" in item["title"] + str(item["payload"])
    assert len(skill_runs_on(remote)) == before, "B was asked before A's approver approved"

    run = wait_for_run(caller, run_id)
    child = remote_child(caller, run_id)
    assert child["state"] == "COMPLETE", child["error"]
    assert run["state"] == "COMPLETE", run["error"]
    answer = {"sentiment": "mixed", "evidence": REVIEW.split(",")[0]}
    assert child["result"]["output_payload"] == answer
    [entry] = run["result"]["output_payload"]["children"]
    assert entry["run_id"] == child["id"] and entry["result"]["output_payload"] == answer

    on_b = remote.get(f"/api/runs/{remote_task_of(caller, child['id'])}")
    assert (on_b["state"], on_b["skill"], on_b["owner"]) == ("COMPLETE", SKILL, "carol")
    assert on_b["packet"]["input_data"] == {"review": REVIEW}
    assert on_b["result"]["output_payload"] == answer
    # B's quote is checked; its sentiment cannot be, by a model that gives no logprobs, and says so
    report = on_b["criteria_report"]
    assert report["checkable_met"] and report["summary"] == "2 of 3 criteria met", report
    assert "cannot be checked with this model" in report["items"][-1]["detail"]


def test_a_token_b_never_issued_fails_the_remote_child_and_a_s_run_goes_on(
        caller: Handoff, remote: Handoff) -> None:
    before = len(skill_runs_on(remote))
    run_id = review_run(caller, IMPOSTOR, with_fallback=True)
    approve_remote_call(caller, run_id)
    run = wait_for_run(caller, run_id)
    child = remote_child(caller, run_id, IMPOSTOR)
    assert child["state"] == "FAILED"
    reason = child["error"]["message"]
    assert "remote agent impostor" in reason and "401" in reason, reason
    assert "hnd_not-a-token-b-issued" not in str(child)
    assert run["state"] == "COMPLETE", run["error"]
    assert len(skill_runs_on(remote)) == before


@pytest.fixture
def remote_stopped(caller: Handoff, remote: Handoff) -> Iterator[Handoff]:
    """B stopped for one test, then started again on its database (on a new port, which
    A's records are pointed at) for the tests after it."""
    remote.stop()
    try:
        yield remote
    finally:
        remote.start()
        point_agents_at(caller, remote.url)


def test_b_stopped_fails_the_remote_child_because_its_card_could_not_be_read(
        caller: Handoff, remote_stopped: Handoff) -> None:
    run_id = review_run(caller, with_fallback=True)
    approve_remote_call(caller, run_id)
    run = wait_for_run(caller, run_id)
    child = remote_child(caller, run_id)
    assert child["state"] == "FAILED"
    assert f"its card at {remote_stopped.url} could not be read" in child["error"]["message"]
    assert run["state"] == "COMPLETE", run["error"]
