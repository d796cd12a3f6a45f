"""Executing a run tree in a worker: lease, runner, heartbeat, cancel and message pickup.

A task (``delegations.runs.queue.execute_run``) takes the root run's lease and hands the tree
to this process's :class:`RunHost`: one thread with an asyncio loop on which every tree
this process executes runs concurrently (children are asyncio tasks of their root, as
the runner makes them). With a long-lived worker (django-tasks-db, embedded or
``manage.py worker``) the task returns at once, so one worker thread serves a whole lane
of runs; with backends whose jobs die with the task (RQ's work horses, the immediate
backend) the task waits for the tree to finish or park.

While a tree executes, a watcher renews the lease every few seconds and, twice a
second, picks up what other processes asked for: cancel requests (``runner.cancel``)
and messages (``runner.send_message``). When the tree ends or parks the lease is
released and the caller's ``on_finished`` says what follows (the queue makes room in the
owner's lane, or queues a tree again whose items were decided while it parked).

A worker that loses its lease (it could not renew it for a whole lease period: the
process was paused, the database unreachable) stops working on the tree at once and
writes nothing more, since the sweeper may have handed the tree to another worker: every
database call of the execution passes a :class:`LeaseFence`, which renews the lease
before a call whenever the last renewal is more than half a lease old and refuses the
call once the lease is gone.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db import close_old_connections
from django.db.models import Q
from django.utils import timezone

from delegations.models import Approval, Run, RunMessage
from delegations.models.runs import TERMINAL
from delegations.protocol.adapters import make_adapter
from delegations.protocol.approvals import ApprovalGate
from delegations.protocol.errors import ErrorCode, ProtocolError
from delegations.protocol.lifecycle import RunState
from delegations.protocol.manifest import SkillManifest
from delegations.protocol.runner import Runner, RunOutcome
from delegations.runs.approval_gate import DjangoApprovalGate
from delegations.runs.cancelling import end_cancels_asked_meanwhile
from delegations.runs.checkpoints import DjangoCheckpointStore
from delegations.runs.database_thread import DatabaseThread
from delegations.runs.record import record_end
from delegations.runs.runner_setup import adapter_config, mcp_tools, remote_agents, runner_settings
from delegations.runs.sink import DjangoEventSink, EventListener
from skills.models import Skill

logger = logging.getLogger(__name__)

WATCH_SECONDS = 0.5          # how often cancel requests and messages are picked up
LEASE_LOST = "lease_lost"    # what execute() returns when this worker lost the tree's lease

T = TypeVar("T")

# what follows a worker's turn on a tree: called with the root's id and state
FinishedHook = Callable[[str, str], None]


def lease_seconds() -> float:
    return float(settings.HANDOFF_LEASE_SECONDS)


def new_lease_owner() -> str:
    return f"{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


# -- leases ------------------------------------------------------------------------------

def acquire_lease(run_id: str, owner: str) -> Run | None:
    """Take the root run's lease unless a live worker holds it or the run is over."""
    now = timezone.now()
    free = Q(lease_owner="") | Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)
    taken = (Run.objects.filter(pk=run_id, parent__isnull=True).exclude(state__in=TERMINAL)
             .filter(free).update(lease_owner=owner,
                                  lease_expires_at=now + timedelta(seconds=lease_seconds())))
    return Run.objects.get(pk=run_id) if taken else None


def release_lease(run_id: str, owner: str) -> None:
    Run.objects.filter(pk=run_id, lease_owner=owner).update(lease_owner="", lease_expires_at=None)


def renew_lease(run_id: str, owner: str) -> bool:
    """Extend the lease by a lease period; False when this owner no longer holds it (the
    sweeper took it back after it expired, or another worker holds it now)."""
    return bool(Run.objects.filter(pk=run_id, lease_owner=owner).update(
        lease_expires_at=timezone.now() + timedelta(seconds=lease_seconds())))


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


class FencedDatabaseThread(DatabaseThread):
    """The execution's database thread, every call behind the lease fence."""

    def __init__(self, fence: LeaseFence) -> None:
        super().__init__()
        self.fence = fence

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await super().call(self.fence.guard, fn, *args)


@dataclass
class WatchReport:
    lease_held: bool
    cancel: list[str] = field(default_factory=list)
    messages: list[tuple[int, str, str]] = field(default_factory=list)   # (id, run id, text)


def _watch_poll(root_id: str, owner: str, renew: bool) -> WatchReport:
    held = renew_lease(root_id, owner) if renew else True
    tree = Q(pk=root_id) | Q(root_id=root_id)
    cancel = list(Run.objects.filter(tree, cancel_requested_at__isnull=False)
                  .exclude(state__in=TERMINAL).values_list("pk", flat=True))
    messages = list(RunMessage.objects.filter(Q(run_id=root_id) | Q(run__root_id=root_id),
                                              delivered_at__isnull=True)
                    .values_list("pk", "run_id", "text"))
    return WatchReport(held, cancel, messages)


def _mark_delivered(message_ids: list[int]) -> None:
    RunMessage.objects.filter(pk__in=message_ids).update(delivered_at=timezone.now())


# -- one execution -------------------------------------------------------------------------

class Execution:
    """One worker (or the run_delegation command) executing one run tree under its lease."""

    def __init__(self, run: Run, owner: str, *, on_finished: FinishedHook | None = None,
                 gate: ApprovalGate | None = None, listener: EventListener | None = None) -> None:
        self.run = run
        self.root_id = run.pk
        self.owner = owner
        self.on_finished = on_finished
        self.fence = LeaseFence(self.root_id, owner)
        self.db = FencedDatabaseThread(self.fence)
        self.sink = DjangoEventSink(self.db, listener=listener)
        self.checkpoints = DjangoCheckpointStore(self.sink)
        self.gate = gate if gate is not None else DjangoApprovalGate(self.sink)
        self.runner = Runner(sink=self.sink, gate=self.gate, checkpoints=self.checkpoints,
                             settings=runner_settings(), skills=self.skill_manifest, mcp=mcp_tools(),
                             remote=remote_agents())
        self._cancelled: set[str] = set()
        self._resume = run.has_checkpoint

    async def skill_manifest(self, ref: str) -> SkillManifest | None:
        """The runner's skill lookup (the root's skill, a ``delegate_task`` naming one): the
        registry's version as the protocol's manifest, read in the database thread."""
        return await self.db.call(Skill.objects.manifest_for, ref)

    async def execute(self) -> str:
        """A worker's whole turn: run or resume the tree, store everything, release the
        lease and say what follows; returns the root's state when it ended or parked, or
        LEASE_LOST when this worker lost the lease on the way (it wrote nothing after)."""
        try:
            state = await self.drive()
            await self.db.call(finish_execution, self.root_id, self.owner, state, self.on_finished)
            return state
        except LeaseLost:
            # not an error of the run: the sweeper gave the tree to another worker, which
            # goes on from the last checkpoint and says what follows
            logger.warning("Run %s: this worker (%s) lost its lease and stopped working on the "
                           "tree; another worker resumes it from its last checkpoint.",
                           self.root_id, self.owner)
            return LEASE_LOST
        finally:
            self.db.close()

    async def drive(self) -> str:
        """Start the tree (or resume it from its checkpoint) until it ends or parks, with
        every event stored; the lease stays held. Returns the root's state."""
        run = self.run
        try:
            adapter = make_adapter(run.adapter_name, adapter_config(run.adapter_name, run.adapter_config))
        except ProtocolError as exc:
            await self.sink.aclose()
            await self.db.call(fail_unstarted, run.pk, {
                "code": ErrorCode.TOOL_FAILURE.value,
                "message": f"The model adapter could not be set up: {exc.message}"})
            return RunState.FAILED.value
        # the tree's calls carry its trace context when it is traced: by this server, or by
        # the caller whose request started it
        trace = run.trace if settings.HANDOFF_TRACES_ENABLED or run.traceparent else None
        if self._resume:
            work = self.runner.resume(run.pk, adapter=adapter, trace=trace)
        else:
            workspace = settings.HANDOFF_WORKSPACE_ROOT / run.pk
            work = self.runner.start(run.packet, adapter=adapter, run_id=run.pk, workspace=workspace,
                                     trace=trace)
        self._resume = True  # from here on the tree has a checkpoint
        main = asyncio.ensure_future(work)
        watcher = asyncio.ensure_future(self._watch(main))
        try:
            await asyncio.wait({main, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if self.fence.lost:
                # another worker may own the tree now: stop it here; whatever it tries to
                # write on its way out is refused by the fence
                main.cancel()
                main.add_done_callback(_consume_result)
                raise LeaseLost(self.root_id)
            outcome = await main
        except ProtocolError as exc:
            # resume refused (no checkpoint after all): the worker that had it is gone
            await self.sink.aclose()
            await self.db.call(fail_unstarted, run.pk, exc.as_dict())
            return RunState.FAILED.value
        except asyncio.CancelledError:
            # the host is stopping (Ctrl+C in run_delegation): the runner cancelled the
            # tree; keep what it reported
            await asyncio.shield(self.sink.aclose())
            raise
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        await self.sink.aclose()
        return outcome.state.value

    async def renew_lease(self) -> bool:
        report = await self.db.call(_watch_poll, self.root_id, self.owner, True)
        return report.lease_held

    async def _watch(self, main: asyncio.Future[RunOutcome]) -> None:
        renew_every = max(1.0, lease_seconds() / 3)
        loop = asyncio.get_running_loop()
        renewed = loop.time()
        while not main.done():
            await asyncio.sleep(WATCH_SECONDS)
            renew = loop.time() - renewed >= renew_every
            try:
                # past the fence: the renewal is what tells whether the lease is still ours
                report = await DatabaseThread.call(self.db, _watch_poll, self.root_id, self.owner, renew)
            except Exception:
                logger.warning("Run %s: polling for requests failed", self.root_id, exc_info=True)
                continue
            if renew:
                renewed = loop.time()
                self.fence.renewed(report.lease_held)
            if self.fence.lost:
                return  # drive() stops the tree
            for run_id in report.cancel:
                if run_id not in self._cancelled and self.runner.cancel(run_id):
                    self._cancelled.add(run_id)
            delivered = [pk for pk, run_id, text in report.messages
                         if self.runner.send_message(run_id, text)]
            if delivered:
                await self.db.call(_mark_delivered, delivered)


def finish_execution(root_id: str, owner: str, state: str, on_finished: FinishedHook | None) -> None:
    release_lease(root_id, owner)
    if state == RunState.AWAITING_APPROVAL:
        end_cancels_asked_meanwhile(root_id)
    if on_finished is not None:
        on_finished(root_id, state)
    close_old_connections()


def fail_unstarted(run_id: str, error: dict[str, Any]) -> None:
    run = Run.objects.get(pk=run_id)
    if not run.is_terminal:
        record_end(run, RunState.FAILED, error=error)


# -- the process's run host ------------------------------------------------------------------

class RunHost:
    """A daemon thread running an asyncio loop on which this process executes its trees."""

    _instance: RunHost | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._serve, name="handoff-run-host", daemon=True)
        self.thread.start()

    @classmethod
    def get(cls) -> RunHost:
        with cls._lock:
            if cls._instance is None or not cls._instance.thread.is_alive():
                cls._instance = RunHost()
            return cls._instance

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, execution: Execution) -> Future[str]:
        future = asyncio.run_coroutine_threadsafe(execution.execute(), self.loop)
        future.add_done_callback(_log_failure)
        return future


def _consume_result(future: asyncio.Future[Any]) -> None:
    """A tree stopped after its lease was lost ends with an error (its last writes were
    refused); that is expected and already reported."""
    if not future.cancelled():
        future.exception()


def _log_failure(future: Future[str]) -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.error("A run execution failed", exc_info=future.exception())


def execute(run_id: str, *, wait: bool, on_finished: FinishedHook | None = None) -> str:
    """Take the lease of root run ``run_id`` and execute its tree on the run host.

    Returns the root's state when ``wait`` (after it finished or parked), else
    ``"started"``; LEASE_LOST when this worker lost the lease before the tree ended or parked;
    ``"skipped"`` when another worker holds it, it is over, it waits for
    a lane slot, or it is parked on an undecided inbox item. ``on_finished(root_id, state)``
    runs in the execution's database thread once the tree ended or parked."""
    owner = new_lease_owner()
    run = acquire_lease(run_id, owner)
    if run is None:
        return "skipped"
    waiting_for_slot = run.state == RunState.PENDING and run.allocated_at is None
    parked = run.state == RunState.AWAITING_APPROVAL and Approval.objects.pending_in_tree(run_id).exists()
    if waiting_for_slot or parked:
        release_lease(run_id, owner)
        return "skipped"
    future = RunHost.get().submit(Execution(run, owner, on_finished=on_finished))
    if not wait:
        return "started"
    return future.result()

