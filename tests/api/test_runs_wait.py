"""`GET /api/runs/{id}?wait=S` and `POST /api/runs?wait=S`: a client waits for a run's
answer instead of polling. On a real `manage.py serve`, as `make run` starts it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from tests.delegations import scripts

pytestmark = [pytest.mark.slow]


def start(url: str, headers: dict[str, str], script: dict[str, Any], **packet: Any) -> str:
    answer = httpx.post(f"{url}/api/runs", headers=headers, timeout=30, json={
        "packet": scripts.packet(**packet), "adapter": {"name": "scripted", "config": script}})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def waited(url: str, headers: dict[str, str], run_id: str, wait: Any) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    answer = httpx.get(f"{url}/api/runs/{run_id}", params={"wait": wait}, headers=headers, timeout=60)
    return answer, time.monotonic() - started


def test_the_answer_comes_when_the_run_ends_not_when_the_wait_runs_out(
        live_url: str, composer_api: dict[str, str]) -> None:
    run_id = start(live_url, composer_api, {"script": [scripts.yield_turn(delay_ms=1500)]})
    answer, took = waited(live_url, composer_api, run_id, 20)
    assert answer.status_code == 200
    assert answer.json()["state"] == "COMPLETE" and answer.json()["result"]["output_payload"] == scripts.ANSWER
    assert 1.0 < took < 10, took


def test_a_run_still_working_is_answered_as_it_stands_once_the_wait_runs_out(
        live_url: str, composer_api: dict[str, str]) -> None:
    run_id = start(live_url, composer_api, {"script": [scripts.yield_turn(delay_ms=4000)]})
    answer, took = waited(live_url, composer_api, run_id, 1)
    assert answer.status_code == 200 and answer.json()["state"] in ("PENDING", "ACCEPTED", "WORKING")
    assert 0.9 < took < 3.5, took
    assert waited(live_url, composer_api, run_id, 20)[0].json()["state"] == "COMPLETE"


def test_a_run_that_waits_for_a_person_answers_at_once(live_url: str, composer_api: dict[str, str]) -> None:
    run_id = start(live_url, composer_api, scripts.needs_approval(), capabilities=["file_delete"])
    answer, took = waited(live_url, composer_api, run_id, 20)
    assert answer.json()["state"] == "AWAITING_APPROVAL"
    assert took < 10, took


@pytest.mark.parametrize("wait", ["31", "-1", "soon", "nan"])
def test_a_wait_past_the_cap_negative_or_not_a_number_is_422_naming_the_limit(
        live_url: str, composer_api: dict[str, str], wait: str) -> None:
    run_id = start(live_url, composer_api, {"script": [scripts.yield_turn()]})
    answer, _ = waited(live_url, composer_api, run_id, wait)
    assert answer.status_code == 422, answer.text
    assert "wait" in answer.text
    if wait in ("31", "-1"):
        assert ("30" in answer.text) if wait == "31" else ("0" in answer.text)


def test_another_persons_run_is_404_whether_or_not_one_waits(
        live_url: str, composer_api: dict[str, str], other_composer_api: dict[str, str]) -> None:
    run_id = start(live_url, composer_api, {"script": [scripts.yield_turn()]})
    answer, took = waited(live_url, other_composer_api, run_id, 5)
    assert answer.status_code == 404 and took < 3


@pytest.mark.parametrize("run_id", ["W%1C%C3%B7%C3%8B%3A%5B%C2%A5K", "x" * 120, "no-such-run"])
def test_a_run_id_that_names_no_run_is_404_whether_or_not_one_waits(
        live_url: str, composer_api: dict[str, str], run_id: str) -> None:
    """Whatever a client types for the id (control characters, colons, 120 characters: more
    than the live feed can name a group for), the answer is 404, at once."""
    for wait in (0, 1.5):
        answer, took = waited(live_url, composer_api, run_id, wait)
        assert answer.status_code == 404, answer.text
        assert took < 3, took


def started_and_waited(url: str, headers: dict[str, str], wait: Any, script: dict[str, Any],
                       **packet: Any) -> tuple[httpx.Response, float]:
    began = time.monotonic()
    answer = httpx.post(f"{url}/api/runs", params={"wait": wait}, headers=headers, timeout=60, json={
        "packet": scripts.packet(**packet), "adapter": {"name": "scripted", "config": script}})
    return answer, time.monotonic() - began


def test_a_run_started_with_a_wait_is_answered_once_it_ended_in_one_request(
        live_url: str, composer_api: dict[str, str]) -> None:
    answer, took = started_and_waited(live_url, composer_api, 20, {"script": [scripts.yield_turn(delay_ms=1500)]})
    assert answer.status_code == 201, answer.text
    assert answer.json()["state"] == "COMPLETE" and answer.json()["result"]["output_payload"] == scripts.ANSWER
    assert 1.0 < took < 10, took
    parked, took = started_and_waited(live_url, composer_api, 20, scripts.needs_approval(),
                                      capabilities=["file_delete"])
    assert parked.status_code == 201 and parked.json()["state"] == "AWAITING_APPROVAL" and took < 10
    working, took = started_and_waited(live_url, composer_api, 1, {"script": [scripts.yield_turn(delay_ms=4000)]})
    assert working.status_code == 201 and working.json()["state"] in ("PENDING", "ACCEPTED", "WORKING")
    assert 0.9 < took < 3.5, took


@pytest.mark.parametrize("wait", ["31", "-1", "soon"])
def test_a_start_with_a_wrong_wait_is_422_and_starts_nothing(
        live_url: str, composer_api: dict[str, str], wait: str) -> None:
    before = httpx.get(f"{live_url}/api/runs", headers=composer_api, timeout=30).json()["count"]
    answer, _ = started_and_waited(live_url, composer_api, wait, {"script": [scripts.yield_turn()]})
    assert answer.status_code == 422 and "wait" in answer.text
    assert httpx.get(f"{live_url}/api/runs", headers=composer_api, timeout=30).json()["count"] == before


@pytest.mark.parametrize(("path", "method"), [("/api/runs/{run_id}", "get"), ("/api/runs", "post")])
def test_the_wait_is_in_the_openapi_document_with_its_cap(client: Any, path: str, method: str) -> None:
    operation = client.get("/api/openapi.json").json()["paths"][path][method]
    [wait] = [parameter for parameter in operation["parameters"] if parameter["name"] == "wait"]
    assert wait["schema"]["maximum"] == 30 and wait["schema"]["minimum"] == 0
    assert "holds no server thread" in wait["description"]


async def test_a_waiter_that_goes_away_leaves_the_runs_feed() -> None:
    from delegations.live.feed import run_feed, run_group
    from delegations.live.notices import wait_for

    looks = 0

    async def look(heard: bool) -> tuple[bool, int]:
        nonlocal looks
        looks += 1
        return False, looks

    waiting = asyncio.ensure_future(wait_for("r-gone", 30, look, {"COMPLETE"}))
    await asyncio.sleep(0.05)
    assert run_feed().viewers.get(run_group("r-gone")), "the waiter joined the run's feed"
    waiting.cancel()    # the client disconnected: Django cancels the view
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert run_group("r-gone") not in run_feed().viewers


async def test_a_waiter_looks_again_told_that_the_feed_heard_the_run_settle() -> None:
    """The look after a notice knows it (the row is read at once, not the state first); a
    look on the fallback timer does not."""
    from delegations.live.feed import group_messages, publish
    from delegations.live.notices import wait_for

    heard_at_each_look: list[bool] = []

    async def look(heard: bool) -> tuple[bool, None]:
        heard_at_each_look.append(heard)
        return heard, None

    waiting = asyncio.ensure_future(wait_for("r-told", 30, look, {"COMPLETE"}))
    await asyncio.sleep(0.05)
    await publish(list(group_messages([{"run_id": "r-told", "seq": 1, "type": "state",
                                        "data": {"state": "COMPLETE"}}], {}).items()))
    await asyncio.wait_for(waiting, 5)
    assert heard_at_each_look == [False, True]


def test_a_waiter_for_an_answer_wakes_when_the_run_gives_one_not_on_its_way_there() -> None:
    from delegations.live.feed import group_messages
    from delegations.live.notices import Notices

    notices = Notices("r-1", states={"COMPLETE", "AWAITING_APPROVAL"})

    def told(*events: tuple[str, str, str]) -> bool:
        stored = [{"run_id": run_id, "seq": seq, "type": kind, "data": {"state": state} if kind == "state" else {}}
                  for seq, (run_id, kind, state) in enumerate(events, 1)]
        for message in group_messages(stored, {"r-2": ["r-1"]}).values():
            notices.take(message)
        heard = notices.heard.is_set()
        notices.heard.clear()
        return heard

    assert not told(("r-1", "state", "ACCEPTED"), ("r-1", "state", "WORKING"), ("r-1", "text", ""))
    assert not told(("r-2", "state", "COMPLETE"))   # a child's end is not the run's answer
    assert told(("r-1", "state", "AWAITING_APPROVAL"))
    assert told(("r-1", "state", "WORKING"), ("r-1", "state", "COMPLETE"))
    notices.take({"type": "run.events", "resync": True})
    assert notices.heard.is_set()
