"""What other processes ask of the trees a worker executes: cancel requests and messages,
picked up twice a second, and the trees' leases renewed every few seconds, for every tree
of the process in one poll.

One poll per tree made a process's cost grow with the runs it had in flight, not with the
work they did: 250 runs waiting on a 500 ms model made 500 polls a second, and nothing
else got done (load_probe.py --mode slow). A :class:`Watchman` polls once for all the
trees watched on its loop, and tells each what concerns it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Protocol

from django.utils import timezone

from delegations.models import Run, RunMessage
from delegations.models.runs import TERMINAL
from delegations.runs.database_thread import DatabaseThread
from delegations.runs.leases import lease_seconds, renew_lease

logger = logging.getLogger(__name__)

WATCH_SECONDS = 0.5          # how often cancel requests and messages are picked up


@dataclass
class TreeNews:
    """What one poll found for one tree."""

    lease_held: bool | None = None     # None: not renewed this time
    cancel: list[str] = field(default_factory=list)
    messages: list[tuple[int, str, str]] = field(default_factory=list)   # (id, run id, text)


class Watched(Protocol):
    """A tree under watch: its root, the lease owner, and what it does with its news
    (returns the ids of the messages its runner took)."""

    root_id: str
    owner: str

    def take(self, news: TreeNews) -> list[int]: ...


def poll(roots: list[str], renewals: list[tuple[str, str]]) -> dict[str, TreeNews]:
    """Renew the leases of ``renewals`` ((root id, owner), those due) and read the cancel
    requests and undelivered messages of every tree of ``roots``: a query each, whatever
    their number."""
    news = {root_id: TreeNews() for root_id in roots}
    for root_id, owner in renewals:
        news[root_id].lease_held = renew_lease(root_id, owner)
    for run_id, tree in (Run.objects.filter(root_id__in=roots, cancel_requested_at__isnull=False)
                         .exclude(state__in=TERMINAL).values_list("pk", "root_id")):
        news[str(tree)].cancel.append(run_id)
    for message_id, addressee, text, addressee_root in (
            RunMessage.objects.filter(run__root_id__in=roots, delivered_at__isnull=True)
            .order_by("pk").values_list("pk", "run_id", "text", "run__root_id")):
        news[str(addressee_root)].messages.append((message_id, str(addressee), text))
    return news


def mark_delivered(message_ids: list[int]) -> None:
    RunMessage.objects.filter(pk__in=message_ids).update(delivered_at=timezone.now())


class Watchman:
    """Polls for every tree watched on one event loop (a process's run host, or one command's
    own loop), through ``db`` past the trees' fences: the renewal is what tells whether a
    lease is still held."""

    def __init__(self, db: DatabaseThread) -> None:
        self.db = db
        self.watched: dict[str, tuple[Watched, float]] = {}   # root id -> (tree, last renewal)
        self._task: asyncio.Task[None] | None = None

    def watch(self, tree: Watched) -> None:
        loop = asyncio.get_running_loop()
        self.watched[tree.root_id] = (tree, loop.time())
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._patrol(), name="handoff-watchman")

    def unwatch(self, tree: Watched) -> None:
        if self.watched.get(tree.root_id, (None, 0.0))[0] is tree:
            del self.watched[tree.root_id]

    async def _patrol(self) -> None:
        loop = asyncio.get_running_loop()
        renew_every = max(1.0, lease_seconds() / 3)
        while self.watched:
            await asyncio.sleep(WATCH_SECONDS)
            now = loop.time()
            watched = dict(self.watched)
            due = [(root_id, tree.owner) for root_id, (tree, renewed) in watched.items()
                   if now - renewed >= renew_every]
            try:
                news = await self.db.call(poll, list(watched), due)
            except Exception:
                logger.warning("Polling %d run trees for requests failed", len(watched), exc_info=True)
                continue
            delivered: list[int] = []
            for root_id, (tree, _) in watched.items():
                if root_id not in self.watched:
                    continue   # it ended meanwhile
                tree_news = news[root_id]
                if tree_news.lease_held is not None:
                    self.watched[root_id] = (tree, now)
                delivered += tree.take(tree_news)
            if delivered:
                try:
                    await self.db.call(mark_delivered, delivered)
                except Exception:
                    logger.warning("Marking %d messages delivered failed", len(delivered), exc_info=True)
