"""A program watches a run live with its API token: the run's websocket takes the token in
the handshake's Authorization header, as the REST API does. On a real `manage.py serve`."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from tests.delegations import scripts

pytestmark = [pytest.mark.slow]


def started_run(url: str, headers: dict[str, str]) -> str:
    answer = httpx.post(f"{url}/api/runs?wait=20", headers=headers, timeout=30, json={
        "packet": scripts.packet(), "adapter": {"name": "scripted", "config": {"script": [scripts.yield_turn()]}}})
    assert answer.status_code == 201 and answer.json()["state"] == "COMPLETE", answer.text
    return str(answer.json()["id"])


def socket_url(url: str, run_id: str) -> str:
    return url.replace("http://", "ws://") + f"/ws/runs/{run_id}/"


def events_until_result(socket: Any) -> list[dict[str, Any]]:
    """The run's events (frames with a seq; the others are control frames) up to its result."""
    events: list[dict[str, Any]] = []
    while not any(event["type"] == "result" for event in events):
        frame = json.loads(socket.recv(timeout=10))
        if "seq" in frame:
            events.append(frame)
    return events


def test_a_program_watches_its_run_with_its_api_token(live_url: str, composer_api: dict[str, str]) -> None:
    run_id = started_run(live_url, composer_api)
    # no Origin: a program is no page of another site, and a page cannot send this header
    with connect(socket_url(live_url, run_id), open_timeout=5, additional_headers=composer_api) as socket:
        events = events_until_result(socket)
    assert events[0]["seq"] == 1 and events[-1]["data"]["state"] == "COMPLETE"


def close_code(url: str, headers: dict[str, str]) -> int | None:
    """The code the server closes a socket with before it sends anything."""
    with connect(url, open_timeout=5, additional_headers=headers) as socket, \
            pytest.raises(ConnectionClosed) as closed:
        socket.recv(timeout=5)
    return closed.value.rcvd.code if closed.value.rcvd is not None else None


def test_a_wrong_token_closes_the_socket_as_unauthenticated(live_url: str, composer_api: dict[str, str]) -> None:
    run_id = started_run(live_url, composer_api)
    assert close_code(socket_url(live_url, run_id), {"Authorization": "Bearer not-a-token"}) == 4401


def test_another_users_token_does_not_open_my_run(live_url: str, composer_api: dict[str, str],
                                                   other_composer_api: dict[str, str]) -> None:
    run_id = started_run(live_url, composer_api)
    assert close_code(socket_url(live_url, run_id), other_composer_api) == 4404


def test_without_a_token_a_socket_from_another_site_is_still_refused(
        live_url: str, composer_api: dict[str, str]) -> None:
    run_id = started_run(live_url, composer_api)
    with pytest.raises(InvalidStatus) as refused:
        connect(socket_url(live_url, run_id), open_timeout=5, additional_headers={"Origin": "https://evil.example"})
    assert refused.value.response.status_code == 403
