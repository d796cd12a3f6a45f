"""The queue: runs handed to workers through Django's Tasks framework (``django.tasks``),
and the owner's lane (OpenClaw sub-agents: at most ``HANDOFF_LANE_SIZE`` runs at once).

The task only ever receives a root run id; it is idempotent (it does nothing when the
run is over, held by a live worker, waiting for a lane slot or parked on an undecided
item), so enqueueing a run twice is harmless and the sweeper may re-enqueue freely.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import close_old_connections, connection, transaction
from django.tasks import task
from django.tasks.backends.immediate import ImmediateBackend
from django.utils import timezone

from delegations.models import Approval, Run
from delegations.models.runs import LANE_STATES
from delegations.protocol.lifecycle import RunState
from delegations.runs import traces
from delegations.runs.execution import RunHost, execute, start_new
from delegations.runs.leases import lease_new_run, release_lease


@task()
def execute_run(run_id: str) -> str:
    """Start or resume the run tree rooted at ``run_id`` (from its checkpoint if it has one)."""
    # Workers that outlive their tasks (django-tasks-db's, RQ's non-forking one) hand the
    # tree to the process's run host and take the next task; the immediate backend runs
    # the task in its caller, which waits for the tree.
    long_lived = not runs_in_caller()
    try:
        return execute(run_id, wait=not long_lived, on_finished=after_execution)
    finally:
        close_old_connections()
        if settings.HANDOFF_TASK_BACKEND == "rq":
            # a work horse ends with its job, without exit hooks: its tree's trace goes first
            traces.flush_at_exit()


def runs_in_caller() -> bool:
    """Whether a queued run runs in the code that queued it (the immediate backend): then
    a run started in a transaction has run by the time the transaction commits."""
    return isinstance(execute_run.get_backend(), ImmediateBackend)


def enqueue_run(run_id: str) -> None:
    """Queue ``execute_run`` once the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: execute_run.enqueue(run_id))


def start_when_committed(run: Run) -> None:
    """Start new root run ``run``, its lane slot taken, once the transaction commits; called
    before its row is inserted. Where this process's run host takes new runs (an embedded
    worker runs here) the row is inserted holding a lease of this host and the run starts
    there as the transaction commits (:func:`~.execution.start_new`): a one-turn run's
    task (its insert, the worker's claim, its lease taken, its finish: three write
    transactions of SQLite's one writer) was a third of the server's time a run
    (load_probe.py, py-spy). Otherwise, and when the host is full, through the queue."""
    if not RunHost.takes_new_runs:
        enqueue_run(run.pk)
        return
    owner = lease_new_run(run)
    # a copy: the caller goes on using (and refreshing) its own while the host executes.
    # Robust: the run is stored whatever happens here (its lease runs out, the sweeper queues it)
    transaction.on_commit(lambda: _start_here(copy.copy(run), owner), robust=True)


def _start_here(run: Run, owner: str) -> None:
    if not start_new(run, owner, on_finished=after_execution):
        release_lease(run.pk, owner)
        execute_run.enqueue(run.pk)


def after_execution(root: Run, state: str) -> None:
    """What follows a worker's turn on a tree, its lease released: the finished or parked
    root makes room in its owner's lane, and a tree that parked while every item it waits
    for was decided meanwhile is queued again at once (its state read anew: a cancel may
    have ended it meanwhile)."""
    dispatch_lane(root.owner_id)
    if state == RunState.AWAITING_APPROVAL:
        current = Run.objects.only("state").get(pk=root.pk)
        if not current.is_terminal and not Approval.objects.pending_in_tree(root.pk).exists():
            enqueue_run(root.pk)


@dataclass(frozen=True)
class LaneCounts:
    """An owner's root runs, counted for a new one (in one query: each query of a run's
    creation is paid by every run)."""

    mine_waiting_to_start: int   # PENDING: in line for a slot, or handed to a worker not started
    waiting_to_start: int        # everyone's
    mine_in_lane: int            # holding a slot: running, or handed to a worker
    mine_in_line: int            # waiting for a slot

    @property
    def room_now(self) -> bool:
        """A new run may take a slot at once: there is one, and nothing waits before it."""
        return self.mine_in_lane < settings.HANDOFF_LANE_SIZE and not self.mine_in_line


def lane_counts(owner_id: int | None, *, lock: bool = True) -> LaneCounts:
    """The owner's lane as it stands; inside a transaction, with the owner's row locked
    (PostgreSQL: one dispatcher per owner at a time; SQLite serializes writers anyway),
    unless not ``lock`` (a look that decides nothing)."""
    if lock and owner_id is not None and connection.features.has_select_for_update:
        list(get_user_model().objects.select_for_update().filter(pk=owner_id).values_list("pk"))
    with connection.cursor() as cursor:
        cursor.execute(_LANE_COUNTS_SQL, {"owner": owner_id, **_LANE_STATE_PARAMS})
        return LaneCounts(*cursor.fetchone())


# Every run's creation pays for this query. Written once here: the ORM built and compiled the
# same aggregate (four filtered counts) on every call, 2.2 ms against 0.1 ms to run it
# (2,171 µs a call against 82 µs for the compiled text, this machine, 2026-12-05).
# IS NOT DISTINCT FROM puts the runs without an owner in one lane, as owner_id = NULL would not.
# Rows in a state other than PENDING hold a slot (LANE_STATES).
_LANE_COUNTS_SQL = """
    SELECT COUNT(*) FILTER (WHERE mine AND state = %(pending)s),
           COUNT(*) FILTER (WHERE state = %(pending)s),
           COUNT(*) FILTER (WHERE mine AND (state <> %(pending)s OR allocated_at IS NOT NULL)),
           COUNT(*) FILTER (WHERE mine AND state = %(pending)s AND allocated_at IS NULL)
    FROM (SELECT state, allocated_at, owner_id IS NOT DISTINCT FROM %(owner)s AS mine
          FROM {table}
          WHERE parent_id IS NULL AND state IN (%(pending)s, {lane})) AS lane
""".format(table=Run._meta.db_table, lane=", ".join(f"%(lane{i})s" for i in range(len(LANE_STATES))))
_LANE_STATE_PARAMS = {"pending": str(RunState.PENDING),
                      **{f"lane{i}": state for i, state in enumerate(LANE_STATES)}}


def dispatch_lane(owner_id: int | None) -> list[str]:
    """Hand the owner's oldest waiting root runs to workers while the lane has room."""
    if not lane_counts(owner_id, lock=False).mine_in_line:
        return []   # the usual case (a run ended, none of its owner's waits): no lock taken
    with transaction.atomic():
        if owner_id is not None:
            # one dispatcher per owner at a time (PostgreSQL; SQLite serializes writers anyway)
            list(get_user_model().objects.select_for_update().filter(pk=owner_id).values_list("pk"))
        owner_runs = Run.objects.filter(owner_id=owner_id)
        free = settings.HANDOFF_LANE_SIZE - owner_runs.in_lane().count()
        if free <= 0:
            return []
        ids = list(owner_runs.waiting_in_lane().values_list("pk", flat=True)[:free])
        Run.objects.filter(pk__in=ids, allocated_at__isnull=True).update(allocated_at=timezone.now())
        for run_id in ids:
            enqueue_run(run_id)
    return ids
