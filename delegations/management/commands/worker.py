from __future__ import annotations

import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = ("Run a background worker process for runs (django-tasks-db). With "
            "HANDOFF_TASK_BACKEND=rq use `rqworker --job-class django_tasks_rq.Job` instead.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval", type=float, default=0.5,
                            help="Seconds between polls of the task table when idle.")

    def handle(self, *args: Any, interval: float, **options: Any) -> None:
        from delegations.runs import queue  # noqa: F401  (the runner, imported before settling)
        from delegations.runs.worker import WorkerThread, settle_heap, uses_database_backend

        if not uses_database_backend():
            raise CommandError("HANDOFF_TASK_BACKEND is not 'db': start that backend's own workers "
                               "(for rq: `rqworker --job-class django_tasks_rq.Job default`).")
        worker = WorkerThread(kind="process", interval=interval)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: worker.stop())
        settle_heap()
        worker.start()
        self.stdout.write(f"Worker {worker.worker_id} running; Ctrl+C to stop.")
        while worker.is_alive():
            worker.join(timeout=0.5)
