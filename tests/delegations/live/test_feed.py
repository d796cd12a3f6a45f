"""The run feed survives its channel layer going away: when Redis restarts it forgets the
feed's group memberships, so the feed subscribes again, and its viewers read from the log
what was published while it was away."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from channels.db import database_sync_to_async

from delegations.live import feed as live
from delegations.runs.eventlog import PendingEvent, persist_batch
from tests.delegations.live.test_consumers import connect, frames_until_synced, make_root

pytestmark = [pytest.mark.django_db(transaction=True)]


async def test_after_the_layer_fails_the_feed_rejoins_and_its_viewers_refill(composer: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(live.RunFeed, "RETRY_SECONDS", 0.05)
    root = await database_sync_to_async(make_root)(composer)
    communicator, _, _ = await connect(composer, f"/ws/runs/{root.pk}/")
    await frames_until_synced(communicator)
    feed = live.run_feed()
    layer = feed.layer
    assert feed._channel in layer.groups[live.run_group(root.pk)]

    # the layer goes away: it forgets every membership, and the next receive fails
    layer.groups.clear()
    receive, failures = layer.receive, []

    async def failing_once(channel: str) -> dict[str, Any]:
        if not failures:
            failures.append(channel)
            raise ConnectionError("Redis went away")
        return await receive(channel)

    monkeypatch.setattr(layer, "receive", failing_once)
    # published while it was away: stored, but no message reaches the feed
    await database_sync_to_async(persist_batch)(
        [PendingEvent(root.pk, "log", {"n": i}, time.time()) for i in range(3)])
    await layer.send(feed._channel, {"type": "wake", "group": "nobody"})   # the pending receive returns

    frames = [json.loads(await communicator.receive_from(timeout=5)) for _ in range(3)]
    assert [frame["seq"] for frame in frames] == [1, 2, 3]
    assert failures and feed._channel in layer.groups[live.run_group(root.pk)]

    stored = await database_sync_to_async(persist_batch)([PendingEvent(root.pk, "log", {"n": 3}, time.time())])
    await live.publish(list(live.group_messages(stored.events, stored.lineage).items()))
    assert json.loads(await communicator.receive_from(timeout=5))["seq"] == 4   # subscribed again
    await communicator.disconnect()
