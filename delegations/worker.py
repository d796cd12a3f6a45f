"""Background workers: a django-tasks-db worker with a heartbeat row, runnable as a thread
inside the server process (`manage.py serve`) or as its own process (`manage.py worker`).

Run-level leases and the sweeper for runs whose worker died live with the runs; this
module only keeps workers alive and visible (GET /api/health reports them)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from .models import WorkerHeartbeat

logger = logging.getLogger(__name__)
HEARTBEAT_SECONDS = 5.0

# Called on every heartbeat tick (e.g. the sweeper for lost runs); registered by other modules.
periodic_jobs: list[Callable[[str], None]] = []


class WorkerThread(threading.Thread):
    """Polls the task database and runs tasks; a second thread keeps the heartbeat."""

    def __init__(self, *, kind: str = "embedded", interval: float = 0.2, queue: str = "default") -> None:
        super().__init__(name="handoff-worker", daemon=True)
        from django_tasks_db.management.commands.db_worker import Worker

        self.worker_id = f"{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.kind = kind
        self._stop_event = threading.Event()
        self._worker = Worker(queue_names=[queue], interval=interval, batch=False,
                              backend_name="default", startup_delay=False, max_tasks=None,
                              worker_id=self.worker_id, excluded_queue_names=[])
        self._heartbeat = threading.Thread(target=self._beat, name="handoff-heartbeat", daemon=True)

    def run(self) -> None:
        self._touch()
        self._heartbeat.start()
        try:
            self._worker.run()
        except Exception:
            logger.exception("Worker %s stopped on an error", self.worker_id)
        finally:
            close_old_connections()

    def stop(self) -> None:
        self._worker.running = False
        self._stop_event.set()

    def _touch(self) -> None:
        WorkerHeartbeat.objects.update_or_create(
            worker_id=self.worker_id,
            defaults={"hostname": socket.gethostname()[:255], "pid": os.getpid(), "kind": self.kind,
                      "last_seen": timezone.now()})

    def _beat(self) -> None:
        while not self._stop_event.wait(HEARTBEAT_SECONDS):
            try:
                self._touch()
                for job in list(periodic_jobs):
                    job(self.worker_id)
            except Exception:
                logger.exception("Heartbeat of worker %s failed", self.worker_id)
            finally:
                close_old_connections()
        WorkerHeartbeat.objects.filter(worker_id=self.worker_id).delete()
        close_old_connections()


def uses_database_backend() -> bool:
    return settings.HANDOFF_TASK_BACKEND == "db"
