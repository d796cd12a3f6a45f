"""Run leases: a worker holds its root run's lease while it executes the tree, renews it
every few seconds, and writes nothing once it lost it (another worker may own the tree).

A worker that loses its lease (it could not renew it for a whole lease period: the
process was paused, the database unreachable) stops working on the tree at once and
writes nothing more, since the sweeper may have handed the tree to another worker: every
database call of the execution passes a :class:`LeaseFence`, which renews the lease
before a call whenever the last renewal is more than half a lease old and refuses the
call once the lease is gone.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.utils import timezone

from delegations.models import Run
from delegations.runs.database_thread import DatabaseThread

T = TypeVar("T")


def lease_seconds() -> float:
    return float(settings.HANDOFF_LEASE_SECONDS)


def new_lease_owner() -> str:
    return f"{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


# -- leases ------------------------------------------------------------------------------

def _lease_end(now: datetime) -> datetime:
    return now + timedelta(seconds=lease_seconds())


def acquire_lease(run_id: str, owner: str) -> Run | None:
    """Take the root run's lease unless a live worker holds it or the run is over."""
    now = timezone.now()
    return Run.objects.take_lease(run_id, owner, until=_lease_end(now), free_before=now)


def lease_new_run(run: Run) -> str:
    """Give a root run not inserted yet the lease of a new owner, which it is inserted
    holding (eager start); the owner."""
    run.lease_owner, run.lease_expires_at = new_lease_owner(), _lease_end(timezone.now())
    return run.lease_owner


def release_lease(run_id: str, owner: str) -> None:
    Run.objects.change_lease(run_id, owner, owner="", until=None)


def renew_lease(run_id: str, owner: str) -> bool:
    """Extend the lease by a lease period; False when this owner no longer holds it (the
    sweeper took it back after it expired, or another worker holds it now)."""
    return Run.objects.change_lease(run_id, owner, owner=owner, until=_lease_end(timezone.now()))


class LeaseLost(Exception):
    """This worker no longer holds the run's lease, so it must not write to the run."""


class LeaseFence:
    """Lets an execution's database calls through only while its lease is known to be
    held: renewed (by the watcher, or here before a call) within half a lease period.
    Once a renewal fails the fence stays shut."""

    def __init__(self, root_id: str, owner: str) -> None:
        self.root_id = root_id
        self.owner = owner
        self.renewed_at = time.monotonic()
        self.lost = False

    def renewed(self, held: bool) -> None:
        if held:
            self.renewed_at = time.monotonic()
        else:
            self.lost = True

    def guard(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` (in the database thread) if the lease is still ours."""
        if not self.lost and time.monotonic() - self.renewed_at > lease_seconds() / 2:
            self.renewed(renew_lease(self.root_id, self.owner))
        if self.lost:
            raise LeaseLost(f"Run {self.root_id}: this worker ({self.owner}) lost its lease; "
                            f"another worker may be executing the tree, so nothing is written.")
        return fn(*args)


class FencedDatabaseThread:
    """The execution's way to the database: every call made in ``thread`` (its process's
    run host's, shared by every tree it executes, or one of its own) behind the lease fence.

    One thread and one connection per process, not one per execution: a thread and a new
    SQLite connection for each run were a fifth of a one-turn run's cost on the server
    (load_probe.py), and SQLite takes one writer at a time anyway."""

    def __init__(self, fence: LeaseFence, thread: DatabaseThread | None = None) -> None:
        self.fence = fence
        self.thread = thread if thread is not None else DatabaseThread()
        self._owns_thread = thread is None

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await self.thread.call(self.fence.guard, fn, *args)

    async def unfenced(self, fn: Callable[..., T], *args: Any) -> T:
        """A call past the fence: the watcher's renewal, which tells whether the lease is ours."""
        return await self.thread.call(fn, *args)

    def close(self) -> None:
        if self._owns_thread:
            self.thread.close()
