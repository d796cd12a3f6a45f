from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

if TYPE_CHECKING:
    import uvicorn


def server_config(app: Any, *, host: str, port: int) -> uvicorn.Config:
    """uvicorn's configuration for ``app`` (an ASGI app or its import string).

    uvloop and the websockets protocol: a frame is written to its socket from C at once,
    where Daphne/Twisted queued it for the next loop pass (an epoll_ctl per socket each
    way, the GIL released per write); with a hundred viewers of a busy run that was most
    of the server's time (README, Benchmarks). HTTP is parsed by h11, whose buffer limit
    bounds a request's line and headers (HANDOFF_MAX_HEADER_BYTES) while they arrive;
    httptools buffers headers of any size. Django's LOGGING applies (log_config=None).
    X-Forwarded-For and -Proto are believed only from FORWARDED_ALLOW_IPS: uvicorn's own
    default trusts 127.0.0.1, which let any local client pick the address the login and
    token limits count.
    """
    import uvicorn

    proxies = settings.FORWARDED_ALLOW_IPS
    return uvicorn.Config(app, host=host, port=port, loop="uvloop", http="h11", ws="websockets-sansio",
                          lifespan="off", log_config=None, access_log=False,
                          h11_max_incomplete_event_size=settings.HANDOFF_MAX_HEADER_BYTES,
                          proxy_headers=bool(proxies), forwarded_allow_ips=proxies or None)


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

        config = server_config("handoff_site.asgi:application", host=host, port=port)
        config.load()  # imports the application and the protocols before the heap is settled
        worker = None
        if not no_worker and settings.HANDOFF_EMBEDDED_WORKER and uses_database_backend():
            worker = WorkerThread(kind="embedded")
            worker.start()
            self.stdout.write(f"Embedded worker {worker.worker_id} started.")
        settle_heap()
        self.stdout.write(f"Handoff is serving on http://{host}:{port}/ (Ctrl+C to stop).")
        # uvicorn stops gracefully on SIGTERM, then raises the signal again with the handler it
        # found: with Python's default the process died there, before the worker stopped and
        # before exit hooks ran (the last trees' traces were lost). This one exits properly.
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
        try:
            uvicorn.Server(config).run()
        finally:
            if worker is not None:
                worker.stop()
                worker.join(timeout=10)


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    sys.exit(128 + signum)   # the status a shell reports for a process ended by the signal
