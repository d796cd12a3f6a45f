"""Publishing persisted run events and inbox changes to websocket clients (channel layer).

Events are published after they are stored, to the group of their run and of every
ancestor, so a client watching a root sees the whole tree. One group message carries a
batch of events as ready-made JSON texts, and the frame most viewers will send built
once (see :func:`group_messages`): with a hundred viewers, per-viewer work is what the
server spends its time on. For the same reason viewers do not subscribe to the channel
layer one by one: a :class:`RunFeed` subscribes each watched group once per process (and
event loop) and hands every message to that process's viewers of the group in one pass.

The in-memory layer is process-local and built on asyncio queues, which are not
thread-safe: a worker thread (its own event loop) cannot put into the queues the server's
loop waits on. Consumers therefore register the server's loop when they connect, and
publishers on other threads hand the send over to that loop. With Redis the publisher
sends from wherever it runs.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any, Protocol

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

from delegations.live.siblings import SiblingChannelLayer
from delegations.protocol import json_text, text_limits

logger = logging.getLogger(__name__)

INBOX_GROUP = "inbox"
_server_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def run_group(run_id: str) -> str:
    return f"run.{run_id}"


def register_consumer_loop() -> None:
    """Called by consumers on connect: the loop in-memory group messages must be sent on."""
    global _server_loop
    loop = asyncio.get_running_loop()
    if _server_loop is not loop:
        with _loop_lock:
            _server_loop = loop


def event_text(event: dict[str, Any]) -> str:
    """An event in wire shape as the JSON text a websocket frame carries (a lone surrogate
    stored before the text limits is replaced: a frame must encode as UTF-8)."""
    return text_limits.printable(json_text.compact(event))


def group_messages(events: Iterable[dict[str, Any]], lineage: dict[str, list[str]],
                   texts: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """One `run.events` message per group: each event goes to its run's group and to the
    groups of the run's ancestors (``lineage[run_id]``, nearest first). ``texts`` are the
    events already serialized (the event log writer has them), in the same order.

    A message carries the events as JSON texts with their ``(run id, seq)`` keys and the
    states the state events enter ("" for other events), and, built
    once for every viewer, the batched frame (``batch``) and per run the seqs it holds
    (``spans``: ``(run id, first, last)``, None when a run's seqs have a hole). A viewer
    whose cursors are just before every span sends ``batch`` as it is."""
    grouped: dict[str, tuple[list[str], list[tuple[str, int]], list[str]]] = {}
    serialized = iter(texts) if texts is not None else None
    for event in events:
        text = next(serialized) if serialized is not None else event_text(event)
        run_id, seq = event["run_id"], event["seq"]
        state = str((event.get("data") or {}).get("state", "")) if event["type"] == "state" else ""
        for target in (run_id, *lineage.get(run_id, ())):
            group_texts, keys, states = grouped.setdefault(run_group(target), ([], [], []))
            group_texts.append(text)
            keys.append((run_id, seq))
            states.append(state)
    return {group: _events_message(group, *parts) for group, parts in grouped.items()}


def _events_message(group: str, texts: list[str], keys: list[tuple[str, int]],
                    states: list[str]) -> dict[str, Any]:
    spans: dict[str, list[int]] = {}
    contiguous = True
    for run_id, seq in keys:
        span = spans.get(run_id)
        if span is None:
            spans[run_id] = [seq, seq]
        elif seq == span[1] + 1:
            span[1] = seq
        else:
            contiguous = False
    return {"type": "run.events", "group": group, "texts": tuple(texts), "keys": tuple(keys),
            "states": tuple(states),   # a waiter for a run's answer wakes on the states that give it
            "spans": tuple((run_id, first, last) for run_id, (first, last) in spans.items())
            if contiguous else None,
            "batch": texts[0] if len(texts) == 1 else f"[{','.join(texts)}]"}


class Viewer(Protocol):
    def take(self, message: dict[str, Any]) -> None:
        """Take one ``run.events`` message without waiting: every viewer of the process
        is handed it in the same pass."""


class RunFeed:
    """This process's subscription to the run groups its viewers watch: one channel, added
    to each watched group once, whose messages are handed to the group's viewers in one
    pass. With a channel per viewer, as channels does it, each message woke a hundred
    consumer tasks, each through a wait on two futures and a new receive task, which was
    a third of a busy server's time. A group stays subscribed while it has a viewer; the
    feed stops receiving when it has none."""

    RETRY_SECONDS = 1.0

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.viewers: dict[str, list[Viewer]] = {}
        self._channel: str | None = None
        self._receiver: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    def can_name(self, group: str) -> bool:
        """Whether the channel layer takes this group name: a run id a client typed may be
        anything, and one it cannot carry names no run it announces."""
        return bool(self.layer.match_type_and_length(group) and self.layer.group_name_regex.match(group))

    async def join(self, group: str, viewer: Viewer) -> None:
        """Returns once the group's messages reach the viewer: a message published after
        this call is delivered (read the backlog after joining, not before)."""
        async with self._lock:
            if self._channel is None:
                self._channel = await self.layer.new_channel()
                self._receiver = asyncio.get_running_loop().create_task(
                    self._receive(self._channel), name="handoff-run-feed")
            # added on every join: refreshes the membership before the layer's group expiry
            await self.layer.group_add(group, self._channel)
            self.viewers.setdefault(group, []).append(viewer)

    async def leave(self, group: str, viewer: Viewer) -> None:
        async with self._lock:
            members = self.viewers.get(group, [])
            if viewer not in members:
                return
            members.remove(viewer)
            if members:
                return
            del self.viewers[group]
            assert self._channel is not None
            await self.layer.group_discard(group, self._channel)
            if not self.viewers and self._receiver is not None:
                self._receiver.cancel()
                self._receiver = self._channel = None

    async def _receive(self, channel: str) -> None:
        lost = False   # the layer failed: its memberships may be gone with it (Redis restarted)
        while True:
            if lost:
                lost = not await self._rejoin(channel)
            try:
                message = await self.layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.warning("The run feed could not receive; retrying", exc_info=True)
                lost = True
                await asyncio.sleep(self.RETRY_SECONDS)
                continue
            self._hand_out(message)

    async def _rejoin(self, channel: str) -> bool:
        """Subscribe to every watched group again (adding is idempotent) and have their
        viewers refill from the log what was published meanwhile; False while the layer is
        still away."""
        groups = tuple(self.viewers)
        try:
            for group in groups:
                await self.layer.group_add(group, channel)
        except Exception:
            return False
        logger.info("The run feed is back on %d group(s); its viewers refill from the log", len(groups))
        for group in groups:
            self._hand_out({"group": group, "resync": True})
        return True

    def _hand_out(self, message: dict[str, Any]) -> None:
        for viewer in tuple(self.viewers.get(message.get("group", ""), ())):
                try:
                    viewer.take(message)
                except Exception:
                    logger.warning("A viewer could not take live events", exc_info=True)


_feeds: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, RunFeed] = weakref.WeakKeyDictionary()


def run_feed() -> RunFeed:
    """The running loop's feed (a process serves its websockets from one loop; tests run
    one loop each), on the current channel layer."""
    loop = asyncio.get_running_loop()
    layer = get_channel_layer()
    current = _feeds.get(loop)
    if current is None or current.layer is not layer:
        current = _feeds[loop] = RunFeed(layer)
    return current


async def _send_all(messages: list[tuple[str, dict[str, Any]]]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    for group, message in messages:
        try:
            await layer.group_send(group, message)
        except Exception:
            # live delivery is best effort: clients refill from the event log (after=N)
            logger.warning("Could not publish to %s", group, exc_info=True)


def _delivery(messages: list[tuple[str, dict[str, Any]]]
              ) -> tuple[bool, asyncio.AbstractEventLoop | None]:
    """Whether to send at all, and the loop the send must be handed over to (None: send
    from here). Nothing is sent for no messages, nor on the in-memory layer before a
    consumer of this process has connected (nobody here to tell: the sibling processes
    of ``serve --processes`` are told at once); on the in-memory layer the send goes to
    the consumers' loop, on any other layer it is made where it is asked."""
    if not messages:
        return False, None
    layer = get_channel_layer()
    if not isinstance(layer, InMemoryChannelLayer):
        return True, None
    loop = _server_loop
    if loop is None or loop.is_closed():
        if isinstance(layer, SiblingChannelLayer):
            for group, message in messages:
                layer.tell_siblings(group, message)
        return False, None
    return True, loop


async def publish(messages: list[tuple[str, dict[str, Any]]]) -> None:
    """Send group messages in order, from async code on any thread."""
    send, loop = _delivery(messages)
    if not send:
        return
    if loop is None or loop is asyncio.get_running_loop():
        await _send_all(messages)
    else:
        asyncio.run_coroutine_threadsafe(_send_all(messages), loop)


def publish_sync(messages: list[tuple[str, dict[str, Any]]]) -> None:
    """Send group messages in order from synchronous code (requests, commands, sweeper)."""
    send, loop = _delivery(messages)
    if not send:
        return
    if loop is None:
        async_to_sync(_send_all)(messages)
    else:
        future: Future[None] = asyncio.run_coroutine_threadsafe(_send_all(messages), loop)
        del future  # fire and forget: the server loop owns delivery


def publish_events_sync(events: list[dict[str, Any]], lineage: dict[str, list[str]],
                        texts: list[str] | None = None) -> None:
    publish_sync(list(group_messages(events, lineage, texts).items()))


INBOX_EVENTS = ("approval.created", "approval.decided", "approval.expired", "approval.cancelled")


def inbox_message(kind: str, approval: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A notice for the inbox group: an item was created, decided, expired (its deadline
    passed) or cancelled (its run ended); ``approval`` is the item's ``as_event_data()``."""
    if kind not in INBOX_EVENTS:
        raise ValueError(f"unknown inbox event {kind!r}; one of {', '.join(INBOX_EVENTS)}")
    return [(INBOX_GROUP, {"type": "inbox.event", "event": kind, "approval": approval})]
