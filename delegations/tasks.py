"""Background work through Django's Tasks framework (``django.tasks``), and the periodic
jobs every worker runs on its heartbeat.

The task only ever receives a root run id; it is idempotent (it does nothing when the
run is over, held by a live worker, waiting for a lane slot or parked on an undecided
item), so enqueueing a run twice is harmless and the sweeper may re-enqueue freely.
"""

from __future__ import annotations

import logging

from django.db import close_old_connections, transaction
from django.tasks import task

from delegations import services
from delegations.execution import execute

logger = logging.getLogger(__name__)


@task()
def execute_run(run_id: str) -> str:
    """Start or resume the run tree rooted at ``run_id`` (from its checkpoint if it has one)."""
    from django_tasks_db import DatabaseBackend

    # Long-lived db workers hand the tree to the process's run host and go on polling;
    # RQ work horses and the immediate backend end with the task, so they wait for it.
    long_lived = isinstance(execute_run.get_backend(), DatabaseBackend)
    try:
        return execute(run_id, wait=not long_lived)
    finally:
        close_old_connections()


def enqueue_run(run_id: str) -> None:
    """Queue ``execute_run`` once the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: execute_run.enqueue(run_id))


def sweep_job(worker_id: str) -> None:
    report = services.sweep_runs()
    if report["resumed"] or report["failed"]:
        logger.warning("Worker %s swept runs whose worker was lost: %s", worker_id, report)


def archive_job(worker_id: str) -> None:
    services.archive_runs()


def register_periodic_jobs() -> None:
    from delegations.worker import periodic_jobs

    for job in (sweep_job, archive_job):
        if job not in periodic_jobs:
            periodic_jobs.append(job)
