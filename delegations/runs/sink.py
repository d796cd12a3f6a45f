"""The runner's event sink, backed by the event log.

The sink, the checkpoint store and the approval gate of an execution talk to the
database through one :class:`~delegations.runs.database_thread.DatabaseThread`, so what the
runner reports is stored in the order it happened. The sink does not write each event on its
own: events queue up and a flusher stores them in batches (one transaction each), then
publishes them; consecutive text deltas of a run are merged into one event while they
wait (about 50 ms), which keeps the event log and the channel layer small without
losing a character. A run's streamed text that may be the start of a secret waits for the
next delta (or the run's next other event), so that the event log, which redacts whole
secrets, never stores one in two pieces. Checkpoints travel through the same queue and
``save`` returns once the checkpoint (and every event before it) is stored, so a resumed
run never repeats a step it had recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from delegations.live import feed
from delegations.protocol.checkpoints import Checkpoint
from delegations.protocol.events import EventType
from delegations.runs.database_thread import DatabaseCalls
from delegations.runs.eventlog import PendingCheckpoint, PendingEvent, WriterMemory, persist_batch
from delegations.runs.redaction import redactor

logger = logging.getLogger(__name__)
# called with each stored batch of events (wire shape, in order): run_delegation prints them
EventListener = Callable[[list[dict[str, Any]]], None]

COALESCE_SECONDS = 0.05
# how long a busy tree's stored events may wait to be published with the next ones: one
# publication sends a frame to every viewer, so this trades the viewers' latency against
# the server's sends (100 viewers of a 1000-subagent tree: 50 ms gave p50/p99 50/98 ms,
# 15 ms 36/86 ms for 25% more server CPU; README, Benchmarks)
PUBLISH_SECONDS = 0.015
RETRY_SECONDS = 0.5
MAX_PERSIST_ATTEMPTS = 20


class DjangoEventSink:
    """Persist, then publish. ``flush()`` waits until everything emitted so far is stored;
    ``aclose()`` until it is stored and published."""

    def __init__(self, db: DatabaseCalls, *, coalesce_s: float = COALESCE_SECONDS,
                 publish_s: float = PUBLISH_SECONDS, listener: EventListener | None = None) -> None:
        self.db = db
        self.listener = listener
        self.publish_s = publish_s
        self._outbox: list[dict[str, Any]] = []
        self._outbox_texts: list[str] = []
        self._lineage_out: dict[str, list[str]] = {}
        self._outbox_ready: asyncio.Event | None = None
        self._publisher: asyncio.Task[None] | None = None
        self.coalesce_s = coalesce_s
        self._pending: list[PendingEvent | PendingCheckpoint] = []
        self._queued = 0          # items ever queued (merged text deltas count once)
        self._stored = 0          # items stored so far
        self._urgent = False
        self._text_since = 0.0
        self._wake: asyncio.Event | None = None
        self._stored_changed: asyncio.Condition | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._memory = WriterMemory()
        self._failure: BaseException | None = None
        self.events_stored = 0
        self._secrets = redactor()
        self._held_text: dict[str, str] = {}   # run id -> streamed text that may begin a secret

    # -- the EventSink protocol ----------------------------------------------------------
    async def emit(self, run_id: str, type: str, data: dict[str, Any]) -> None:
        if type == EventType.TEXT and self._secrets:
            delta, self._held_text[run_id] = self._secrets.stream(
                self._held_text.pop(run_id, "") + str(data.get("delta", "")))
            if not delta:
                return
            data = {"delta": delta}
        elif self._held_text.get(run_id):
            self._queue(run_id, EventType.TEXT, {"delta": self._held_text.pop(run_id)})
        self._queue(run_id, type, data)

    def _queue(self, run_id: str, type: str, data: dict[str, Any]) -> None:
        self._ensure_flusher()
        pending = self._pending
        if type == EventType.TEXT and pending:
            last = pending[-1]
            if isinstance(last, PendingEvent) and last.type == EventType.TEXT and last.run_id == run_id:
                last.data = {"delta": last.data.get("delta", "") + str(data.get("delta", ""))}
                return
        pending.append(PendingEvent(run_id, str(type), data, time.time()))
        self._queued += 1
        if type == EventType.TEXT:
            if not self._text_since:
                self._text_since = time.monotonic()
        else:
            self._urgent = True
        assert self._wake is not None
        self._wake.set()

    # -- checkpoints and flushing --------------------------------------------------------
    async def store_checkpoint(self, run_id: str, checkpoint: Checkpoint) -> None:
        self._ensure_flusher()
        self._pending.append(PendingCheckpoint(run_id, checkpoint))
        self._queued += 1
        self._urgent = True
        assert self._wake is not None
        self._wake.set()
        await self.flush()

    async def flush(self) -> None:
        """Return once everything queued before this call is stored (its publication follows
        within PUBLISH_SECONDS)."""
        if self._flusher is None:
            return
        target = self._queued
        self._urgent = True
        assert self._wake is not None and self._stored_changed is not None
        self._wake.set()
        async with self._stored_changed:
            await self._stored_changed.wait_for(lambda: self._stored >= target or self._failure is not None)
        if self._failure is not None and self._stored < target:
            raise RuntimeError("The event log could not be written") from self._failure

    async def aclose(self) -> None:
        """Store and publish what is left, and stop the flusher."""
        for run_id, text in self._held_text.items():
            if text:  # the stream ended on what might have begun a secret
                self._queue(run_id, EventType.TEXT, {"delta": text})
        self._held_text.clear()
        if self._flusher is None:
            return
        await self.flush()
        self._flusher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._flusher
        self._flusher = None
        await self._drain_outbox()

    def _ensure_flusher(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._wake = asyncio.Event()
            self._stored_changed = asyncio.Condition()
            self._outbox_ready = asyncio.Event()
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop(),
                                                                   name="handoff-event-sink")

    async def _flush_loop(self) -> None:
        assert self._wake is not None and self._stored_changed is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._pending:
                continue
            if not self._urgent:
                # only text waiting: give more deltas up to 50 ms to join it
                delay = self._text_since + self.coalesce_s - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            batch, self._pending = self._pending, []
            count = len(batch)
            self._urgent, self._text_since = False, 0.0
            stored = await self._persist(batch)
            if stored is not None and stored.events:
                self.events_stored += len(stored.events)
                if self.listener is not None:
                    self.listener(stored.events)
                self._outbox.extend(stored.events)
                self._outbox_texts.extend(stored.texts)
                self._lineage_out.update(stored.lineage)
                self._ensure_publisher()
            async with self._stored_changed:
                self._stored += count
                self._stored_changed.notify_all()

    def _ensure_publisher(self) -> None:
        assert self._outbox_ready is not None
        self._outbox_ready.set()
        if self._publisher is None or self._publisher.done():
            self._publisher = asyncio.get_running_loop().create_task(self._publish_loop(),
                                                                     name="handoff-event-publisher")

    async def _publish_loop(self) -> None:
        """Publish stored events at once, then at most every PUBLISH_SECONDS: a busy tree
        sends few large messages instead of one per batch to every viewer."""
        assert self._outbox_ready is not None
        while True:
            await self._outbox_ready.wait()
            self._outbox_ready.clear()
            events, self._outbox = self._outbox, []
            texts, self._outbox_texts = self._outbox_texts, []
            if events:
                await feed.publish(list(feed.group_messages(events, self._lineage_out, texts).items()))
            await asyncio.sleep(self.publish_s)
            if not self._outbox:
                return  # idle: the next stored batch starts a new publisher at once

    async def _drain_outbox(self) -> None:
        while self._outbox or (self._publisher is not None and not self._publisher.done()):
            if self._publisher is None or self._publisher.done():
                self._ensure_publisher()
            assert self._publisher is not None
            await asyncio.shield(self._publisher)

    async def _persist(self, batch: list[PendingEvent | PendingCheckpoint]) -> Any:
        for attempt in range(1, MAX_PERSIST_ATTEMPTS + 1):
            try:
                return await self.db.call(persist_batch, batch, self._memory)
            except (TypeError, ValueError):
                # an event carried a value JSON cannot hold (a path, a date, NaN): store its
                # text (or null) rather than lose the event
                for item in batch:
                    if isinstance(item, PendingEvent):
                        item.data = json.loads(json.dumps(item.data, default=str),
                                               parse_constant=lambda _: None)
                continue
            except Exception as exc:
                if attempt == MAX_PERSIST_ATTEMPTS:
                    logger.exception("Giving up on %d events after %d attempts", len(batch), attempt)
                    self._failure = exc
                    return None
                logger.warning("Storing events failed (attempt %d), retrying: %s", attempt, exc)
                await asyncio.sleep(RETRY_SECONDS)
        return None
