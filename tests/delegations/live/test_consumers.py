"""/ws/runs/{id}/ and /ws/inbox/ with channels' WebsocketCommunicator."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from delegations.live import feed as live
from delegations.live.consumers import CURSORS_IN_QUERY
from delegations.live.routing import websocket_urlpatterns
from delegations.models import Approval, Run, RunEvent
from delegations.models.runs import new_run_id
from delegations.runs.eventlog import PendingEvent, persist_batch
from tests.conftest import make_user

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

application = URLRouter(websocket_urlpatterns)


def make_root(owner: Any) -> Run:
    run_id = new_run_id()
    return Run.objects.create(id=run_id, root_id=run_id, owner=owner, adapter_name="scripted",
                              input_hash="0" * 64)


def append(run_id: str, count: int, kind: str = "log") -> None:
    persist_batch([PendingEvent(run_id, kind, {"n": i}, time.time()) for i in range(count)])


def add_child(root: Run) -> str:
    child_id = new_run_id()
    persist_batch([PendingEvent(root.pk, "child", {"child_run_id": child_id, "label": "kid",
                                                    "depth": 1, "packet": {}}, time.time())])
    return child_id


async def connect(user: Any, path: str) -> tuple[WebsocketCommunicator, bool, Any]:
    communicator = WebsocketCommunicator(application, path)
    communicator.scope["user"] = user
    connected, code = await communicator.connect()
    return communicator, connected, code


async def frames_until_synced(communicator: WebsocketCommunicator) -> list[dict[str, Any]]:
    frames = []
    while True:
        frame = json.loads(await communicator.receive_from(timeout=5))
        if frame.get("type") == "synced":
            return frames
        frames.append(frame)


async def closed_with(communicator: WebsocketCommunicator) -> int:
    message = await communicator.receive_output(timeout=5)
    assert message["type"] == "websocket.close"
    return int(message["code"])


async def test_a_client_gets_the_backlog_after_n_then_live_events_without_gaps_or_doubles(
        composer: Any) -> None:
    root = await database_sync_to_async(make_root)(composer)
    await database_sync_to_async(append)(root.pk, 5)
    communicator, connected, _ = await connect(composer, f"/ws/runs/{root.pk}/?after=2")
    assert connected
    backlog = await frames_until_synced(communicator)
    assert [f["seq"] for f in backlog] == [3, 4, 5]
    assert set(backlog[0]) == {"run_id", "seq", "type", "ts", "data"}
    # live: stored and published by another thread, as a worker would
    stored = await database_sync_to_async(persist_batch)(
        [PendingEvent(root.pk, "log", {"n": i}, time.time()) for i in range(3)])
    await live.publish(list(live.group_messages(stored.events, stored.lineage).items()))
    # a second copy of the same events (e.g. a backlog/live overlap) is dropped
    await live.publish(list(live.group_messages(stored.events, stored.lineage).items()))
    live_frames = [json.loads(await communicator.receive_from(timeout=5)) for _ in range(3)]
    assert [f["seq"] for f in live_frames] == [6, 7, 8]
    assert await communicator.receive_nothing(timeout=0.2)
    await communicator.disconnect()


async def test_watching_a_root_shows_its_descendants_events_too(composer: Any) -> None:
    root = await database_sync_to_async(make_root)(composer)
    child_id = await database_sync_to_async(add_child)(root)
    await database_sync_to_async(append)(child_id, 2)
    communicator, _, _ = await connect(composer, f"/ws/runs/{root.pk}/")
    backlog = await frames_until_synced(communicator)
    assert [(f["run_id"], f["seq"]) for f in backlog] == [(root.pk, 1), (child_id, 1), (child_id, 2)]
    stored = await database_sync_to_async(persist_batch)([PendingEvent(child_id, "text", {"delta": "hi"},
                                                                       time.time())])
    await live.publish(list(live.group_messages(stored.events, stored.lineage).items()))
    frame = json.loads(await communicator.receive_from(timeout=5))
    assert (frame["run_id"], frame["seq"], frame["data"]) == (child_id, 3, {"delta": "hi"})
    await communicator.disconnect()


def newest_event_id() -> int:
    return int(RunEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0)


async def test_since_resumes_a_big_tree_from_an_event_id_without_a_cursor_per_run(composer: Any) -> None:
    # a page of a big tree cannot name every run's cursor in its URL: since=<event id> says
    # it has everything up to there, and only later events come, each run's live ones in step
    root = await database_sync_to_async(make_root)(composer)
    children = [await database_sync_to_async(add_child)(root) for _ in range(CURSORS_IN_QUERY + 6)]
    for child_id in children:
        await database_sync_to_async(append)(child_id, 2)
    since = await database_sync_to_async(newest_event_id)()
    await database_sync_to_async(append)(children[3], 1)
    communicator, _, _ = await connect(composer, f"/ws/runs/{root.pk}/?batch=1&since={since}")
    backlog = await frames_until_synced(communicator)
    assert [(f["run_id"], f["seq"]) for f in backlog] == [(children[3], 3)]
    stored = await database_sync_to_async(persist_batch)([PendingEvent(children[7], "log", {"n": 9}, time.time())])
    await live.publish(list(live.group_messages(stored.events, stored.lineage).items()))
    frame = json.loads(await communicator.receive_from(timeout=5))
    assert (frame["run_id"], frame["seq"]) == (children[7], 3)   # no refill of seqs 1-2: it had them
    assert await communicator.receive_nothing(timeout=0.2)
    await communicator.disconnect()


async def test_many_per_run_cursors_are_applied_as_the_backlog_is_read(composer: Any) -> None:
    root = await database_sync_to_async(make_root)(composer)
    children = [await database_sync_to_async(add_child)(root) for _ in range(CURSORS_IN_QUERY + 6)]
    for child_id in children:
        await database_sync_to_async(append)(child_id, 2)
    query = "&".join(f"after.{child_id}=2" for child_id in children[1:])
    communicator, _, _ = await connect(composer, f"/ws/runs/{root.pk}/?after={len(children)}&{query}")
    backlog = await frames_until_synced(communicator)
    assert [(f["run_id"], f["seq"]) for f in backlog] == [(children[0], 1), (children[0], 2)]
    await communicator.disconnect()


async def test_a_bad_since_is_reported_and_the_whole_backlog_sent(composer: Any) -> None:
    root = await database_sync_to_async(make_root)(composer)
    await database_sync_to_async(append)(root.pk, 2)
    communicator, _, _ = await connect(composer, f"/ws/runs/{root.pk}/?since=soon")
    error = json.loads(await communicator.receive_from(timeout=5))
    assert error["type"] == "error" and "'since' must be a whole number" in error["data"]["message"]
    assert [f["seq"] for f in await frames_until_synced(communicator)] == [1, 2]
    await communicator.disconnect()


async def test_a_live_event_that_went_missing_is_refilled_from_the_log(composer: Any) -> None:
    root = await database_sync_to_async(make_root)(composer)
    communicator, _, _ = await connect(composer, f"/ws/runs/{root.pk}/")
    await frames_until_synced(communicator)
    stored = await database_sync_to_async(persist_batch)(
        [PendingEvent(root.pk, "log", {"n": i}, time.time()) for i in range(4)])
    # only the last event reaches the channel layer (the others were dropped on the way)
    await live.publish(list(live.group_messages(stored.events[-1:], stored.lineage).items()))
    frames = [json.loads(await communicator.receive_from(timeout=5)) for _ in range(4)]
    assert [f["seq"] for f in frames] == [1, 2, 3, 4]
    await communicator.disconnect()


async def test_a_batched_viewer_out_of_step_still_gets_every_event_once_in_order(composer: Any) -> None:
    root = await database_sync_to_async(make_root)(composer)
    communicator, _, _ = await connect(composer, f"/ws/runs/{root.pk}/?batch=1")
    await frames_until_synced(communicator)
    stored = await database_sync_to_async(persist_batch)(
        [PendingEvent(root.pk, "log", {"n": i}, time.time()) for i in range(4)])
    # the first two were lost on the way, then all four come again (an overlap)
    await live.publish(list(live.group_messages(stored.events[2:], stored.lineage).items()))
    await live.publish(list(live.group_messages(stored.events, stored.lineage).items()))
    assert [e["seq"] for e in json.loads(await communicator.receive_from(timeout=5))] == [1, 2, 3, 4]
    # back in step: the next publication's ready-made frame
    more = await database_sync_to_async(persist_batch)(
        [PendingEvent(root.pk, "log", {"n": i}, time.time()) for i in range(2)])
    await live.publish(list(live.group_messages(more.events, more.lineage).items()))
    assert [e["seq"] for e in json.loads(await communicator.receive_from(timeout=5))] == [5, 6]
    assert await communicator.receive_nothing(timeout=0.2)
    await communicator.disconnect()


async def test_an_anonymous_client_is_closed_with_4401() -> None:
    communicator, _, _ = await connect(AnonymousUser(), f"/ws/runs/{new_run_id()}/")
    assert await closed_with(communicator) == 4401


async def test_an_unknown_run_is_closed_with_4404(composer: Any) -> None:
    communicator, _, _ = await connect(composer, f"/ws/runs/{new_run_id()}/")
    assert await closed_with(communicator) == 4404


async def test_someone_elses_run_is_closed_with_4404_as_if_it_did_not_exist(
        composer: Any, outsider: Any) -> None:
    root = await database_sync_to_async(make_root)(composer)
    communicator, _, _ = await connect(outsider, f"/ws/runs/{root.pk}/")
    assert await closed_with(communicator) == 4404


async def test_malformed_frames_get_an_error_frame_and_the_connection_stays_up(composer: Any) -> None:
    root = await database_sync_to_async(make_root)(composer)
    communicator, _, _ = await connect(composer, f"/ws/runs/{root.pk}/?after=oops")
    bad_after = json.loads(await communicator.receive_from(timeout=5))
    assert bad_after["type"] == "error" and "after" in bad_after["data"]["message"]
    await frames_until_synced(communicator)
    for frame in ("not json", "[1, 2]", '{"no": "type"}', '{"type": "dance"}'):
        await communicator.send_to(text_data=frame)
        reply = json.loads(await communicator.receive_from(timeout=5))
        assert reply["type"] == "error" and reply["data"]["message"]
    await communicator.send_to(bytes_data=b"\x00\x01")
    assert json.loads(await communicator.receive_from(timeout=5))["type"] == "error"
    await communicator.send_json_to({"type": "ping"})
    assert json.loads(await communicator.receive_from(timeout=5)) == {"type": "pong"}
    await communicator.disconnect()


async def test_approvers_hear_of_new_and_decided_inbox_items(approver: Any, composer: Any) -> None:
    communicator, connected, _ = await connect(approver, "/ws/inbox/")
    assert connected
    assert json.loads(await communicator.receive_from(timeout=5)) == {"type": "inbox.synced", "pending": 0}
    root = await database_sync_to_async(make_root)(composer)
    approval = await database_sync_to_async(Approval.objects.create)(
        run=root, key=f"{root.pk}:capability:x", kind="capability", title="Delete a file?")
    data = await database_sync_to_async(approval.as_event_data)()   # reads who decided: the ORM
    await live.publish(live.inbox_message("approval.created", data))
    frame = json.loads(await communicator.receive_from(timeout=5))
    assert frame["type"] == "approval.created" and frame["approval"]["id"] == approval.pk
    await communicator.disconnect()


async def next_count(communicator: WebsocketCommunicator) -> int:
    """The pending count of the next ``inbox.count`` frame (the notices before it skipped)."""
    while True:
        frame = json.loads(await communicator.receive_from(timeout=5))
        if frame["type"] == "inbox.count":
            return int(frame["pending"])


async def test_each_approver_hears_the_count_of_the_items_they_may_decide(approver: Any,
                                                                          django_user_model: Any) -> None:
    other = await database_sync_to_async(make_user)(django_user_model, "bob", "approvers", password=None)
    alices, _, _ = await connect(approver, "/ws/inbox/")
    bobs, _, _ = await connect(other, "/ws/inbox/")
    for socket in (alices, bobs):
        assert json.loads(await socket.receive_from(timeout=5)) == {"type": "inbox.synced", "pending": 0}
    alices_run = await database_sync_to_async(make_root)(approver)   # alice may not decide its items
    approval = await database_sync_to_async(Approval.objects.create)(
        run=alices_run, key=f"{alices_run.pk}:capability:x", kind="capability", title="Delete a file?")
    data = await database_sync_to_async(approval.as_event_data)()
    await live.publish(live.inbox_message("approval.created", data))
    assert json.loads(await alices.receive_from(timeout=5))["type"] == "approval.created"
    assert await next_count(alices) == 0
    assert await next_count(bobs) == 1
    again, _, _ = await connect(approver, "/ws/inbox/")
    assert json.loads(await again.receive_from(timeout=5)) == {"type": "inbox.synced", "pending": 0}
    for socket in (alices, bobs, again):
        await socket.disconnect()


async def test_a_burst_of_inbox_notices_is_recounted_once_or_twice_per_viewer(approver: Any,
                                                                            composer: Any) -> None:
    socket, _, _ = await connect(approver, "/ws/inbox/")
    await socket.receive_from(timeout=5)
    root = await database_sync_to_async(make_root)(composer)
    notices = []
    for number in range(20):
        approval = await database_sync_to_async(Approval.objects.create)(
            run=root, key=f"{root.pk}:capability:{number}", kind="capability", title=f"Delete {number}?")
        notices += live.inbox_message("approval.created", await database_sync_to_async(approval.as_event_data)())
    await live.publish(notices)
    frames = [json.loads(await socket.receive_from(timeout=5))]
    while not await socket.receive_nothing(timeout=1):
        frames.append(json.loads(await socket.receive_from(timeout=5)))
    counts = [frame["pending"] for frame in frames if frame["type"] == "inbox.count"]
    assert len(frames) - len(counts) == 20
    assert 1 <= len(counts) <= 2 and counts[-1] == 20, counts
    await socket.disconnect()


async def test_someone_not_an_approver_gets_the_counts_of_their_own_questions_and_no_notices(
        composer: Any, django_user_model: Any) -> None:
    socket, connected, _ = await connect(composer, "/ws/inbox/")
    assert connected
    assert json.loads(await socket.receive_from(timeout=5)) == {"type": "inbox.synced", "pending": 0}
    other = await database_sync_to_async(make_user)(django_user_model, "someone-else", "composers",
                                                     password=None)
    for owner, kind, title in ((composer, "clarification", "Which region?"), (other, "capability", "Delete?")):
        root = await database_sync_to_async(make_root)(owner)
        approval = await database_sync_to_async(Approval.objects.create)(
            run=root, key=f"{root.pk}:{kind}:0", kind=kind, title=title)
        await live.publish(live.inbox_message("approval.created",
                                              await database_sync_to_async(approval.as_event_data)()))
        # the count of what they may decide (their own run's question), never the items
        assert json.loads(await socket.receive_from(timeout=5)) == {"type": "inbox.count", "pending": 1}
    assert await socket.receive_nothing(timeout=0.5)
    await socket.disconnect()
    anonymous, _, _ = await connect(AnonymousUser(), "/ws/inbox/")
    assert await closed_with(anonymous) == 4401



async def test_batch_mode_packs_the_events_of_one_publication_into_one_frame(composer: Any) -> None:
    root = await database_sync_to_async(make_root)(composer)
    await database_sync_to_async(append)(root.pk, 3)
    communicator, _, _ = await connect(composer, f"/ws/runs/{root.pk}/?batch=1")
    backlog = json.loads(await communicator.receive_from(timeout=5))
    assert isinstance(backlog, list) and [e["seq"] for e in backlog] == [1, 2, 3]
    assert json.loads(await communicator.receive_from(timeout=5))["type"] == "synced"
    stored = await database_sync_to_async(persist_batch)(
        [PendingEvent(root.pk, "log", {"n": i}, time.time()) for i in range(2)])
    await live.publish(list(live.group_messages(stored.events, stored.lineage).items()))
    frame = json.loads(await communicator.receive_from(timeout=5))
    assert [e["seq"] for e in frame] == [4, 5]
    await communicator.disconnect()


async def test_viewers_of_one_run_share_the_feed_and_it_stops_with_the_last_one(composer: Any) -> None:
    root = await database_sync_to_async(make_root)(composer)
    first, _, _ = await connect(composer, f"/ws/runs/{root.pk}/")
    second, _, _ = await connect(composer, f"/ws/runs/{root.pk}/")
    for communicator in (first, second):
        await frames_until_synced(communicator)
    feed = live.run_feed()
    assert len(feed.viewers[live.run_group(root.pk)]) == 2
    await first.disconnect()
    stored = await database_sync_to_async(persist_batch)([PendingEvent(root.pk, "log", {"n": 1}, time.time())])
    await live.publish(list(live.group_messages(stored.events, stored.lineage).items()))
    assert json.loads(await second.receive_from(timeout=5))["seq"] == 1  # the group stays subscribed
    await second.disconnect()
    assert feed.viewers == {} and feed._receiver is None


async def test_a_viewer_whose_socket_is_slow_does_not_hold_up_the_others(
        composer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from delegations.live.consumers import RunConsumer

    socket_free = asyncio.Event()
    send = RunConsumer.send

    async def slow_send(self: RunConsumer, text_data: str | None = None, **kwargs: Any) -> None:
        if b"slow" in self.scope["query_string"] and text_data and '"seq"' in text_data:
            await socket_free.wait()  # as a full socket buffer would make it wait
        await send(self, text_data=text_data, **kwargs)

    monkeypatch.setattr(RunConsumer, "send", slow_send)
    root = await database_sync_to_async(make_root)(composer)
    slow, _, _ = await connect(composer, f"/ws/runs/{root.pk}/?slow=1")  # first in the feed's pass
    fast, _, _ = await connect(composer, f"/ws/runs/{root.pk}/")
    for communicator in (slow, fast):
        await frames_until_synced(communicator)
    for n in range(2):
        stored = await database_sync_to_async(persist_batch)([PendingEvent(root.pk, "log", {"n": n}, time.time())])
        await live.publish(list(live.group_messages(stored.events, stored.lineage).items()))
    assert [json.loads(await fast.receive_from(timeout=5))["seq"] for _ in range(2)] == [1, 2]
    assert await slow.receive_nothing(timeout=0.2)
    socket_free.set()
    assert [json.loads(await slow.receive_from(timeout=5))["seq"] for _ in range(2)] == [1, 2]
    for communicator in (slow, fast):
        await communicator.disconnect()
