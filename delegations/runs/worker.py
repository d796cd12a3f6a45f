"""Background workers: a django-tasks-db worker with a heartbeat row, runnable as a thread
inside the server process (`manage.py serve`) or as its own process (`manage.py worker`),
and the RQ worker class for scale-out (`manage.py rqworker --job-class django_tasks_rq.Job`,
which picks it up from ``RQ["WORKER_CLASS"]``).

Run-level leases live with the execution; this module keeps workers alive and visible
(GET /api/health reports them) and runs the periodic jobs (the sweeper for runs whose
worker died, the archiver) on every heartbeat, in every worker of either kind: when one
machine dies, the others sweep its runs."""

from __future__ import annotations

import gc
import logging
import os
import socket
import threading
import uuid
from typing import Any

from django.conf import settings
from django.db import close_old_connections
from django.tasks.signals import task_enqueued
from django.utils import timezone
from django_tasks_db.management.commands.db_worker import Worker
from django_tasks_db.models import DBTaskResult
from rq import SimpleWorker

from delegations.models import WorkerHeartbeat
from delegations.runs.execution import RunHost
from delegations.runs.maintenance import archive_job, sweep_job

# Young collections at CPython's default (every 700 new containers) ran about ten
# times a second in a server streaming a busy tree, at a few ms each; every 10,000 they
# are rare and no slower.
YOUNG_COLLECTION_THRESHOLD = 10_000


def settle_heap() -> None:
    """For long-running server and worker processes, once startup imported everything:
    the objects that exist now (Django, the apps, the SDKs: well over 100,000) live until
    the process exits, so they are frozen out of the garbage collector's view. A full
    collection that walks them took 130 ms or more on a 2-core machine, and it stops
    every thread: a run's events waited that long to be stored and sent."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *gc.get_threshold()[1:])

logger = logging.getLogger(__name__)
HEARTBEAT_SECONDS = 5.0

# called with the worker's id on every heartbeat
PERIODIC_JOBS = (sweep_job, archive_job)


def new_worker_id() -> str:
    return f"{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Heartbeat(threading.Thread):
    """Keeps the worker's ``WorkerHeartbeat`` row fresh and runs the periodic jobs every
    HEARTBEAT_SECONDS; the row is deleted when it stops."""

    def __init__(self, worker_id: str, kind: str) -> None:
        super().__init__(name="handoff-heartbeat", daemon=True)
        self.worker_id = worker_id
        self.kind = kind
        self._stop_event = threading.Event()

    def touch(self) -> None:
        WorkerHeartbeat.objects.update_or_create(
            worker_id=self.worker_id,
            defaults={"hostname": socket.gethostname()[:255], "pid": os.getpid(), "kind": self.kind,
                      "last_seen": timezone.now()})

    def run(self) -> None:
        while not self._stop_event.wait(HEARTBEAT_SECONDS):
            try:
                self.touch()
                for job in PERIODIC_JOBS:
                    job(self.worker_id)
            except Exception:
                logger.exception("Heartbeat of worker %s failed", self.worker_id)
            finally:
                close_old_connections()
        WorkerHeartbeat.objects.filter(worker_id=self.worker_id).delete()
        close_old_connections()

    def stop(self) -> None:
        self._stop_event.set()


class WorkerThread(threading.Thread):
    """Polls the task database and runs tasks; a second thread keeps the heartbeat.

    A task enqueued in this process (an API request to the server the worker is embedded
    in, a decision that resumes a parked run) wakes the worker at once; the poll
    ``interval`` only bounds how late it sees tasks other processes enqueued."""

    def __init__(self, *, kind: str = "embedded", interval: float = 0.2, queue: str = "default") -> None:
        super().__init__(name="handoff-worker", daemon=True)
        self.worker_id = new_worker_id()
        self.kind = kind
        self.interval = interval
        self._stop_event = threading.Event()
        self._wake = threading.Event()
        # batch: run() returns once no task is ready, and this thread waits for the next
        self._worker = Worker(queue_names=[queue], interval=interval, batch=True,
                              backend_name="default", startup_delay=False, max_tasks=None,
                              worker_id=self.worker_id, excluded_queue_names=[])
        self._heartbeat = Heartbeat(self.worker_id, kind)

    def run(self) -> None:
        self._heartbeat.touch()
        self._heartbeat.start()
        task_enqueued.connect(self._task_enqueued)
        RunHost.takes_new_runs = True   # runs created in this process start here at once
        try:
            while not self._stop_event.is_set():
                self._wake.clear()  # before polling: an enqueue during the poll polls again
                self._poll_once()
                self._wake.wait(self.interval)
        finally:
            RunHost.takes_new_runs = False
            task_enqueued.disconnect(self._task_enqueued)
            close_old_connections()

    def _poll_once(self) -> None:
        """Run the ready tasks. An error here (the database locked or gone for a moment, a
        task's own row deleted under it) costs this round, not the worker: it used to end
        the thread, and the server then took runs that nothing would ever start."""
        try:
            if self._task_ready():
                self._worker.run()
        except Exception:
            logger.exception("Worker %s: a round of tasks failed; polling again", self.worker_id)
            close_old_connections()
            self._stop_event.wait(self.interval)   # no hot loop while the error lasts

    def _task_ready(self) -> bool:
        """A plain read, before the worker's poll: the poll takes SQLite's write lock (and
        reconnects) every time, and five times a second that made the runs' event writes
        queue behind it."""
        return bool(DBTaskResult.objects.ready().filter(
            backend_name=self._worker.backend_name, queue_name__in=self._worker.queue_names).exists())

    def _task_enqueued(self, sender: Any, **kwargs: Any) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._worker.running = False
        self._stop_event.set()
        self._wake.set()
        self._heartbeat.stop()


class HandoffRQWorker(SimpleWorker):
    """An RQ worker (scale-out) that is also a Handoff worker: while it works, a heartbeat
    thread keeps it visible and sweeps for runs whose worker died, so that when one
    machine's workers are killed another worker resumes their runs.

    RQ's non-forking worker: a job hands its tree to this process's run host and returns,
    so one worker process executes many trees at once, up to HANDOFF_WORKER_CAPACITY, and
    a run that waits on its model holds no worker. A forked work horse per job (RQ's
    default) cost a fork and a new connection per run and held the worker for the whole
    tree: 1.35 trees/s with two workers (README, Scale-out)."""

    def work(self, *args: Any, **kwargs: Any) -> bool:
        heartbeat = Heartbeat(f"rq-{new_worker_id()}", "rq")
        heartbeat.touch()
        heartbeat.start()
        try:
            return bool(super().work(*args, **kwargs))
        finally:
            heartbeat.stop()
            heartbeat.join(timeout=HEARTBEAT_SECONDS + 5)


def uses_database_backend() -> bool:
    return settings.HANDOFF_TASK_BACKEND == "db"
