"""The queue: runs handed to workers through Django's Tasks framework (``django.tasks``),
and the owner's lane (OpenClaw sub-agents: at most ``HANDOFF_LANE_SIZE`` runs at once).

The task only ever receives a root run id; it is idempotent (it does nothing when the
run is over, held by a live worker, waiting for a lane slot or parked on an undecided
item), so enqueueing a run twice is harmless and the sweeper may re-enqueue freely.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import close_old_connections, transaction
from django.tasks import task
from django.utils import timezone
from django_tasks_db import DatabaseBackend

from delegations.models import Approval, Run
from delegations.protocol.lifecycle import RunState
from delegations.runs import traces
from delegations.runs.execution import execute


@task()
def execute_run(run_id: str) -> str:
    """Start or resume the run tree rooted at ``run_id`` (from its checkpoint if it has one)."""
    # Long-lived db workers hand the tree to the process's run host and go on polling;
    # RQ work horses and the immediate backend end with the task, so they wait for it.
    long_lived = isinstance(execute_run.get_backend(), DatabaseBackend)
    try:
        return execute(run_id, wait=not long_lived, on_finished=after_execution)
    finally:
        close_old_connections()
        if settings.HANDOFF_TASK_BACKEND == "rq":
            # a work horse ends with its job, without exit hooks: its tree's trace goes first
            traces.flush_at_exit()


def enqueue_run(run_id: str) -> None:
    """Queue ``execute_run`` once the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: execute_run.enqueue(run_id))


def after_execution(root_id: str, state: str) -> None:
    """What follows a worker's turn on a tree, its lease released: the finished or parked
    root makes room in its owner's lane, and a tree that parked while every item it waits
    for was decided meanwhile is queued again at once."""
    root = Run.objects.get(pk=root_id)
    dispatch_lane(root.owner_id)
    if (state == RunState.AWAITING_APPROVAL and not root.is_terminal
            and not Approval.objects.pending_in_tree(root_id).exists()):
        enqueue_run(root_id)


def dispatch_lane(owner_id: int | None) -> list[str]:
    """Hand the owner's oldest waiting root runs to workers while the lane has room."""
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
