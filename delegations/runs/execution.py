"""Executing a run tree in a worker: lease, runner, heartbeat, cancel and message pickup.

A task (``delegations.runs.queue.execute_run``) takes the root run's lease and hands the tree
to this process's :class:`RunHost`: one thread with an asyncio loop on which every tree
this process executes runs concurrently (children are asyncio tasks of their root, as
the runner makes them). With a long-lived worker (django-tasks-db, embedded or
``manage.py worker``) the task returns at once, so one worker thread serves a whole lane
of runs; with backends whose jobs die with the task (RQ's work horses, the immediate
backend) the task waits for the tree to finish or park.

While a tree executes, the process's :class:`~delegations.runs.watching.Watchman` renews
its lease every few seconds and, twice a second, picks up what other processes asked for:
cancel requests (``runner.cancel``) and messages (``runner.send_message``). When the tree
ends or parks the lease is released and the caller's ``on_finished`` says what follows
(the queue makes room in the owner's lane, or queues a tree again whose items were decided
while it parked). A tree whose lease was lost stops at once and writes nothing more
(``leases.py``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import uvloop
from django.conf import settings

from delegations.models import Approval, Run
from delegations.protocol.adapters import make_adapter
from delegations.protocol.approvals import ApprovalGate
from delegations.protocol.errors import ErrorCode, ProtocolError
from delegations.protocol.lifecycle import RunState
from delegations.protocol.manifest import SkillManifest
from delegations.protocol.runner import Runner
from delegations.runs.approval_gate import DjangoApprovalGate
from delegations.runs.cancelling import end_cancels_asked_meanwhile
from delegations.runs.checkpoints import DjangoCheckpointStore
from delegations.runs.database_thread import DatabaseThread
from delegations.runs.leases import (
    FencedDatabaseThread,
    LeaseFence,
    LeaseLost,
    acquire_lease,
    new_lease_owner,
    release_lease,
    renew_lease,
)
from delegations.runs.record import record_end
from delegations.runs.runner_setup import adapter_config, execution_tools, runner_settings
from delegations.runs.sink import DjangoEventSink, EventListener
from delegations.runs.watching import TreeNews, Watchman
from skills.models import Skill

logger = logging.getLogger(__name__)

LEASE_LOST = "lease_lost"    # what execute() returns when this worker lost the tree's lease

T = TypeVar("T")

# what follows a worker's turn on a tree: called with the root as the execution began with it
# (its id and owner never change) and the state the turn left it in
FinishedHook = Callable[[Run, str], None]


# -- one execution -------------------------------------------------------------------------

class Execution:
    """One worker (or the run_delegation command) executing one run tree under its lease."""

    def __init__(self, run: Run, owner: str, *, on_finished: FinishedHook | None = None,
                 gate: ApprovalGate | None = None, listener: EventListener | None = None,
                 db_thread: DatabaseThread | None = None, watchman: Watchman | None = None,
                 resume: bool | None = None) -> None:
        self.run = run
        self.root_id = run.pk
        self.owner = owner
        self.on_finished = on_finished
        self.fence = LeaseFence(self.root_id, owner)
        self.db = FencedDatabaseThread(self.fence, db_thread)
        self.watchman = watchman if watchman is not None else Watchman(self.db.thread)
        self._lease_lost = asyncio.Event()
        self.sink = DjangoEventSink(self.db, listener=listener)
        self.checkpoints = DjangoCheckpointStore(self.sink)
        self.gate = gate if gate is not None else DjangoApprovalGate(self.sink)
        mcp, remote = execution_tools()
        self.runner = Runner(sink=self.sink, gate=self.gate, checkpoints=self.checkpoints,
                             settings=runner_settings(), skills=self.skill_manifest, mcp=mcp,
                             remote=remote)
        self._cancelled: set[str] = set()
        # a new run (eager start) has no checkpoint: asking the database was a query a run
        self._resume = run.has_checkpoint if resume is None else resume

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
            await self.db.call(finish_execution, self.run, self.owner, state, self.on_finished)
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
        lost = asyncio.ensure_future(self._lease_lost.wait())
        self.watchman.watch(self)
        try:
            await asyncio.wait({main, lost}, return_when=asyncio.FIRST_COMPLETED)
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
            self.watchman.unwatch(self)
            lost.cancel()
        await self.sink.aclose()
        return outcome.state.value

    async def renew_lease(self) -> bool:
        held = await self.db.unfenced(renew_lease, self.root_id, self.owner)
        self.fence.renewed(held)
        return held

    def take(self, news: TreeNews) -> list[int]:
        """The watchman's news of this tree: its lease renewed (or lost: drive() stops the
        tree), cancel requests and messages for its runs; the ids of the messages taken."""
        if news.lease_held is not None:
            self.fence.renewed(news.lease_held)
        if self.fence.lost:
            self._lease_lost.set()
            return []
        for run_id in news.cancel:
            if run_id not in self._cancelled and self.runner.cancel(run_id):
                self._cancelled.add(run_id)
        return [pk for pk, run_id, text in news.messages if self.runner.send_message(run_id, text)]


def finish_execution(root: Run, owner: str, state: str, on_finished: FinishedHook | None) -> None:
    release_lease(root.pk, owner)
    if state == RunState.AWAITING_APPROVAL:
        end_cancels_asked_meanwhile(root.pk)
    if on_finished is not None:
        on_finished(root, state)


def fail_unstarted(run_id: str, error: dict[str, Any]) -> None:
    run = Run.objects.get(pk=run_id)
    if not run.is_terminal:
        record_end(run, RunState.FAILED, error=error)


# -- the process's run host ------------------------------------------------------------------

class RunHost:
    """A daemon thread running an asyncio loop on which this process executes its trees."""

    _instance: RunHost | None = None
    _lock = threading.Lock()
    # Whether runs created in this process start on its host at once (:func:`start_new`):
    # only while a worker of this process takes tasks, so a web process without one (the
    # scale-out stack's, a shell) never executes runs.
    takes_new_runs = False

    def __init__(self) -> None:
        # uvloop, as the server's own loop: the server's CPU a run, against the clients' in
        # the same pass, fell from 7.58-7.66 times to 7.20-7.44 (load_probe.py, 32 clients,
        # four alternating passes, 2026-12-06)
        self.loop = uvloop.new_event_loop()
        self.db = DatabaseThread()
        self.watchman = Watchman(self.db)
        # the trees this process takes at once: a worker that is full takes no more tasks
        # (they wait in the queue for it or another worker) until one ends or parks
        self.room = threading.BoundedSemaphore(settings.HANDOFF_WORKER_CAPACITY)
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

    def start(self, run: Run, owner: str, on_finished: FinishedHook | None, *,
              resume: bool | None = None) -> Future[str]:
        """Execute root run ``run``, whose lease ``owner`` holds, on this host's loop with
        its database thread and watchman (see :meth:`submit`)."""
        return self.submit(Execution(run, owner, on_finished=on_finished, db_thread=self.db,
                                     watchman=self.watchman, resume=resume))

    def submit(self, execution: Execution) -> Future[str]:
        """Execute the tree on this host's loop; the caller holds a place in ``room``, which
        is given back when the tree ends or parks."""
        future = asyncio.run_coroutine_threadsafe(execution.execute(), self.loop)
        future.add_done_callback(_log_failure)
        future.add_done_callback(lambda _: self.room.release())
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
    host = RunHost.get()
    host.room.acquire()    # before the lease: a worker waiting for room holds no run
    owner = new_lease_owner()
    run = acquire_lease(run_id, owner)
    waiting_for_slot = run is not None and run.state == RunState.PENDING and run.allocated_at is None
    parked = (run is not None and run.state == RunState.AWAITING_APPROVAL
              and Approval.objects.pending_in_tree(run_id).exists())
    if run is None or waiting_for_slot or parked:
        if run is not None:
            release_lease(run_id, owner)
        host.room.release()
        return "skipped"
    if not wait:
        host.start(run, owner, on_finished)
        return "started"
    # a caller that waits may itself be in the host's database thread (the immediate backend
    # runs a tree queued by another's finish there): its tree gets a thread of its own
    return host.submit(Execution(run, owner, on_finished=on_finished)).result()


def start_new(run: Run, owner: str, on_finished: FinishedHook | None = None) -> bool:
    """Eager start: execute root run ``run``, just created holding a lease of ``owner``, on
    this process's run host at once, without a trip through the task queue, as Temporal's
    Eager Workflow Start hands a new workflow's first task to the starter's own worker.
    False when the host is full (or the execution could not be set up): the caller gives
    the lease back and queues the run. Should this process die before the tree ends, the
    lease runs out and the sweeper queues the run again, as for any worker lost."""
    if not RunHost.takes_new_runs:   # the worker stopped since the run was written
        return False
    host = RunHost.get()
    if not host.room.acquire(blocking=False):
        return False
    try:
        host.start(run, owner, on_finished, resume=False)
    except Exception:
        logger.exception("Run %s could not start on this process's run host; queueing it", run.pk)
        host.room.release()
        return False
    return True

