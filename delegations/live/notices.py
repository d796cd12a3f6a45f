"""Waiting on a run without holding a thread or a database connection: the run's live feed
says when something happened to it, and only then does the waiter look at the database.

`GET /api/runs/{id}?wait=S`, MCP's ``wait_for_run`` and A2A's blocking send and streams all
wait this way. A waiter joins the run's group on the process's :class:`feed.RunFeed` (the
channel layer carries notices from every process: a worker, another web process), then
looks; after that it looks again when the feed hears of the run, and at least every
FALLBACK_S, since a notice can be lost (a restarted Redis). Its client going away cancels
the wait, which leaves the feed on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any

from django.db import connection

from delegations.live.feed import register_consumer_loop, run_feed, run_group

# how often a waiter looks even when it heard nothing (a notice lost with a restarted Redis):
# each look is a query, and 32 clients waiting looked 32 times a second at 1 s
FALLBACK_S = 5.0


def release_connection() -> None:
    """Close this thread's database connection after a waiter's look (unless a transaction
    holds it, as a test's does), so a waiting client holds none."""
    if not connection.in_atomic_block:
        connection.close()


class Notices:
    """What the feed tells a waiter of one run: anything of its tree, or with ``states``
    only the run's own entry into one of those states (a streaming model's text, or a
    run's way through ACCEPTED and WORKING, would wake a waiter for its answer for
    nothing: under 32 clients a waiting request looked 3.0 times a run, now 2.1)."""

    def __init__(self, run_id: str, *, states: Collection[str] | None) -> None:
        self.run_id = run_id
        self.states = frozenset(states) if states is not None else None
        self.heard = asyncio.Event()

    def take(self, message: dict[str, Any]) -> None:
        if self.states is None or message.get("resync") or any(
                run_id == self.run_id and state in self.states
                for (run_id, _), state in zip(message.get("keys", ()), message.get("states", ()), strict=False)):
            self.heard.set()

    async def wait(self, seconds: float) -> bool:
        """Until the feed tells of the run (True) or ``seconds`` pass (False); clears what
        was heard before."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.heard.wait(), max(seconds, 0.0))
        heard = self.heard.is_set()
        self.heard.clear()
        return heard


@contextlib.asynccontextmanager
async def run_notices(run_id: str, *, states: Collection[str] | None = None) -> AsyncIterator[Notices]:
    """Notices of the run while the block runs; joined before the block starts, so what is
    published once the caller has looked reaches it."""
    register_consumer_loop()    # the in-memory layer delivers on this loop
    feed, group, notices = run_feed(), run_group(run_id), Notices(run_id, states=states)
    if not feed.can_name(group):   # nothing to hear: the waiter only looks, on its fallback
        yield notices
        return
    await feed.join(group, notices)
    try:
        yield notices
    finally:
        await feed.leave(group, notices)


async def wait_for[T](run_id: str, seconds: float, look: Callable[[bool], Awaitable[tuple[bool, T]]],
                      states: Collection[str]) -> T:
    """What ``look(heard)`` sees once it says the wait is over (True), or after ``seconds``:
    it is called once the feed is joined, then whenever the run enters one of ``states``
    (those in which the wait can be over; ``heard`` is True then, and after a resync), and
    at least every FALLBACK_S."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    heard = False
    async with run_notices(run_id, states=states) as notices:
        while True:
            done, seen = await look(heard)
            left = deadline - loop.time()
            if done or left <= 0:
                return seen
            heard = await notices.wait(min(FALLBACK_S, left))
