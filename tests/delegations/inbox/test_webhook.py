"""The inbox webhook, against a receiver on the loopback interface."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from delegations.inbox.webhook import deliver
from delegations.models import Approval
from delegations.runs.workflows import run_create
from tests.delegations import scripts
from tests.services import http_on_loopback

pytestmark = [pytest.mark.django_db(transaction=True)]


@dataclass
class Receiver:
    """A webhook receiver on 127.0.0.1: answers ``statuses`` in turn (the last repeats),
    after ``delay_s``, and keeps every JSON body it got."""

    statuses: list[int] = field(default_factory=lambda: [200])
    delay_s: float = 0.0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)
    url: str = ""

    def wait_for(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(self.bodies) < count and time.monotonic() < deadline:
            self.arrived.wait(0.05)
            self.arrived.clear()
        return self.bodies


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length))
            time.sleep(state.delay_s)
            status = state.statuses[min(len(state.bodies), len(state.statuses) - 1)]
            state.bodies.append(body)
            state.arrived.set()
            self.send_response(status)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with http_on_loopback(Handler) as base_url:
        state.url = f"{base_url}/hook"
        yield state


@pytest.fixture
def webhook(settings: Any, receiver: Receiver) -> Receiver:
    settings.HANDOFF_INBOX_WEBHOOK_URL = receiver.url
    settings.HANDOFF_INBOX_WEBHOOK_BACKOFF_S = 0.05
    settings.HANDOFF_BASE_URL = "https://handoff.example.org"
    return receiver


def park(owner: Any) -> Approval:
    run = run_create(packet=scripts.approval_packet(), adapter="scripted", config=scripts.needs_approval(),
                     owner=owner)
    assert run.state == "AWAITING_APPROVAL"
    return Approval.objects.get(run=run)


def test_a_new_item_is_posted_with_its_summary_and_link(composer, webhook, immediate_tasks):
    approval = park(composer)
    [body] = webhook.wait_for(1)
    assert body == {"id": approval.pk, "kind": "capability", "title": approval.title, "risk": "high",
                    "run_id": approval.run_id,
                    "url": f"https://handoff.example.org/inbox/{approval.pk}/item/"}


def test_a_failing_receiver_is_tried_again_with_backoff(composer, webhook, immediate_tasks):
    webhook.statuses = [500, 503, 200]
    approval = park(composer)
    bodies = webhook.wait_for(3)
    assert [b["id"] for b in bodies] == [approval.pk] * 3


def test_delivery_gives_up_after_its_tries(receiver: Receiver) -> None:
    receiver.statuses = [500]
    assert deliver(receiver.url, {"id": 1}, tries=3, backoff_s=0.01) is False
    assert len(receiver.bodies) == 3
    assert deliver("http://127.0.0.1:9/unreachable", {"id": 1}, tries=2, backoff_s=0.01) is False


def test_a_slow_receiver_never_holds_up_the_run(composer, webhook, immediate_tasks):
    webhook.delay_s = 3.0
    started = time.monotonic()
    park(composer)
    assert time.monotonic() - started < 2.0
    assert webhook.wait_for(1)


def test_without_a_url_nothing_is_sent(composer, receiver, immediate_tasks):
    park(composer)
    time.sleep(0.3)
    assert receiver.bodies == []
