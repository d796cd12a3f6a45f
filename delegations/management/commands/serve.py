from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Serve Handoff over HTTP and websockets (Daphne), with an embedded background worker."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-worker", action="store_true",
                            help="Do not start the embedded worker (run `manage.py worker` instead).")

    def handle(self, *args: Any, host: str, port: int, no_worker: bool, **options: Any) -> None:
        from daphne.cli import CommandLineInterface

        import handoff_site.asgi  # noqa: F401  (everything the server runs, imported before settling)
        from delegations.worker import WorkerThread, settle_heap, uses_database_backend

        worker = None
        if not no_worker and settings.HANDOFF_EMBEDDED_WORKER and uses_database_backend():
            worker = WorkerThread(kind="embedded")
            worker.start()
            self.stdout.write(f"Embedded worker {worker.worker_id} started.")
        settle_heap()
        self.stdout.write(f"Handoff is serving on http://{host}:{port}/ (Ctrl+C to stop).")
        try:
            CommandLineInterface().run(["--bind", host, "--port", str(port),
                                        "--proxy-headers", "handoff_site.asgi:application"])
        finally:
            if worker is not None:
                worker.stop()
                worker.join(timeout=10)
