"""Publishing persisted run events and inbox changes to websocket clients (channel layer).

Events are published after they are stored, to the group of their run and of every
ancestor, so a client watching a root sees the whole tree. One group message carries a
batch of events as ready-made JSON frames (``"<run_id> <seq> <json>"`` lines): a string is
not deep-copied per subscriber by the in-memory layer, and the consumer sends the frames
as they are.

The in-memory layer is process-local and built on asyncio queues, which are not
thread-safe: a worker thread (its own event loop) cannot put into the queues the server's
loop waits on. Consumers therefore register the server's loop when they connect, and
publishers on other threads hand the send over to that loop. With Redis the publisher
sends from wherever it runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer

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


def group_messages(events: Iterable[dict[str, Any]], lineage: dict[str, list[str]],
                   texts: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """One `run.events` message per group: each event goes to its run's group and to the
    groups of the run's ancestors (``lineage[run_id]``, nearest first). ``texts`` are the
    events already serialized (the event log writer has them), in the same order."""
    lines: dict[str, list[str]] = {}
    serialized = iter(texts) if texts is not None else None
    for event in events:
        text = next(serialized) if serialized is not None else \
            json.dumps(event, separators=(",", ":"), default=str)
        line = f"{event['run_id']} {event['seq']} {text}"
        run_id = event["run_id"]
        for target in (run_id, *lineage.get(run_id, ())):
            lines.setdefault(run_group(target), []).append(line)
    return {group: {"type": "run.events", "frames": "\n".join(batch)}
            for group, batch in lines.items()}


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


def _needs_server_loop() -> asyncio.AbstractEventLoop | None:
    """The consumers' loop when in-memory messages must be handed over to it, else None."""
    layer = get_channel_layer()
    if not isinstance(layer, InMemoryChannelLayer):
        return None
    loop = _server_loop
    if loop is None or loop.is_closed():
        return None
    return loop


async def publish(messages: list[tuple[str, dict[str, Any]]]) -> None:
    """Send group messages in order, from async code on any thread."""
    if not messages:
        return
    layer = get_channel_layer()
    if isinstance(layer, InMemoryChannelLayer):
        loop = _needs_server_loop()
        if loop is None:
            return  # no consumer in this process has ever connected: nobody to tell
        if loop is not asyncio.get_running_loop():
            asyncio.run_coroutine_threadsafe(_send_all(messages), loop)
            return
    await _send_all(messages)


def publish_sync(messages: list[tuple[str, dict[str, Any]]]) -> None:
    """Send group messages in order from synchronous code (requests, commands, sweeper)."""
    if not messages:
        return
    layer = get_channel_layer()
    if isinstance(layer, InMemoryChannelLayer):
        loop = _needs_server_loop()
        if loop is None:
            return
        future: Future[None] = asyncio.run_coroutine_threadsafe(_send_all(messages), loop)
        del future  # fire and forget: the server loop owns delivery
        return
    from asgiref.sync import async_to_sync

    async_to_sync(_send_all)(messages)


def publish_events_sync(events: list[dict[str, Any]], lineage: dict[str, list[str]],
                        texts: list[str] | None = None) -> None:
    publish_sync(list(group_messages(events, lineage, texts).items()))


def inbox_message(kind: str, approval: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """An `approval.created` / `approval.decided` notice for the inbox group."""
    return [(INBOX_GROUP, {"type": "inbox.event", "event": kind, "approval": approval})]
