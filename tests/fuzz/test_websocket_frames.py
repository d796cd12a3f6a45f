"""Random, huge, binary and malformed frames to /ws/runs/<id>/ and /ws/inbox/ get error
frames; the socket stays up and another viewer of the same run keeps getting its events."""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from delegations.live import feed as live
from delegations.live.routing import websocket_urlpatterns
from delegations.runs.eventlog import PendingEvent, persist_batch
from tests.delegations.live.test_consumers import frames_until_synced, make_root

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

application = URLRouter(websocket_urlpatterns)


def hostile_frames(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    frames: list[dict[str, Any]] = [
        {"bytes_data": b"\x00\xff" * 1000},
        {"text_data": "{" * 50_000},
        {"text_data": "[" * 200_000},
        {"text_data": "[" * 60_000},        # under the size limit, past the JSON depth limit
        {"text_data": "x" * 2_000_000},
        {"text_data": json.dumps({"type": "x" * 100_000})},
        {"text_data": json.dumps({"type": ["ping"]})},
        {"text_data": json.dumps({"type": "ping", "data": {"a": [1] * 10_000}})},
        {"text_data": "null"}, {"text_data": "123"}, {"text_data": '"ping"'}, {"text_data": " "},
        {"text_data": "\ud800".encode("utf-8", "surrogatepass").decode("utf-8", "replace")},
        {"text_data": json.dumps({"type": "subscribe", "run_id": "../../etc"})},
    ]
    for _ in range(40):
        length = rng.randint(0, 300)
        frames.append({"text_data": "".join(chr(rng.randint(0, 0x2FFF)) for _ in range(length))})
    return frames


async def connect(user: Any, path: str) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(application, path)
    communicator.scope["user"] = user
    connected, _ = await communicator.connect()
    assert connected
    return communicator


async def survives(communicator: WebsocketCommunicator, frames: list[dict[str, Any]]) -> None:
    for frame in frames:
        await communicator.send_to(**frame)
        answer = json.loads(await communicator.receive_from(timeout=10))
        assert answer["type"] in ("error", "pong"), answer
    await communicator.send_json_to({"type": "ping"})
    assert json.loads(await communicator.receive_from(timeout=5)) == {"type": "pong"}


async def test_a_run_socket_survives_hostile_frames_and_the_other_viewer_is_unaffected(composer: Any) -> None:
    root = await database_sync_to_async(make_root)(composer)
    attacker = await connect(composer, f"/ws/runs/{root.pk}/")
    viewer = await connect(composer, f"/ws/runs/{root.pk}/")
    await frames_until_synced(attacker)
    await frames_until_synced(viewer)
    await survives(attacker, hostile_frames(seed=17))
    stored = await database_sync_to_async(persist_batch)(
        [PendingEvent(root.pk, "log", {"n": i}, time.time()) for i in range(3)])
    await live.publish(list(live.group_messages(stored.events, stored.lineage).items()))
    frames = [json.loads(await viewer.receive_from(timeout=5)) for _ in range(3)]
    assert [f["seq"] for f in frames] == [1, 2, 3]
    assert await viewer.receive_nothing(timeout=0.2)
    await attacker.disconnect()
    await viewer.disconnect()


async def test_the_inbox_socket_survives_hostile_frames(approver: Any) -> None:
    socket = await connect(approver, "/ws/inbox/")
    assert json.loads(await socket.receive_from(timeout=5))["type"] == "inbox.synced"
    await survives(socket, hostile_frames(seed=4))
    await socket.disconnect()
