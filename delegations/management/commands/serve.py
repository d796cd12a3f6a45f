from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Serve Handoff over HTTP and websockets (uvicorn), with an embedded background worker."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-worker", action="store_true",
                            help="Do not start the embedded worker (run `manage.py worker` instead).")

    def handle(self, *args: Any, host: str, port: int, no_worker: bool, **options: Any) -> None:
        import uvicorn

        from delegations.runs.worker import WorkerThread, settle_heap, uses_database_backend

        # uvloop and the websockets protocol: a frame is written to its socket from C at
        # once, where Daphne/Twisted queued it for the next loop pass (an epoll_ctl per
        # socket each way, the GIL released per write); with a hundred viewers of a busy
        # run that was most of the server's time (README, Benchmarks). Django's LOGGING
        # applies (log_config=None); proxy headers are trusted from FORWARDED_ALLOW_IPS
        # (uvicorn's default: 127.0.0.1).
        config = uvicorn.Config("handoff_site.asgi:application", host=host, port=port, loop="uvloop",
                                http="httptools", ws="websockets-sansio", lifespan="off", log_config=None,
                                access_log=False, proxy_headers=True)
        config.load()  # imports the application and the protocols before the heap is settled
        worker = None
        if not no_worker and settings.HANDOFF_EMBEDDED_WORKER and uses_database_backend():
            worker = WorkerThread(kind="embedded")
            worker.start()
            self.stdout.write(f"Embedded worker {worker.worker_id} started.")
        settle_heap()
        self.stdout.write(f"Handoff is serving on http://{host}:{port}/ (Ctrl+C to stop).")
        try:
            uvicorn.Server(config).run()
        finally:
            if worker is not None:
                worker.stop()
                worker.join(timeout=10)
