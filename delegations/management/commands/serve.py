from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

if TYPE_CHECKING:
    import uvicorn


def server_config(app: Any, *, host: str, port: int) -> uvicorn.Config:
    """uvicorn's configuration for ``app`` (an ASGI app or its import string).

    uvloop and the websockets protocol: a frame is written to its socket from C at once,
    where Daphne/Twisted queued it for the next loop pass (an epoll_ctl per socket each
    way, the GIL released per write); with a hundred viewers of a busy run that was most
    of the server's time (README, Benchmarks). HTTP is parsed by h11, whose buffer limit
    bounds a request's line and headers (HANDOFF_MAX_HEADER_BYTES) while they arrive (a
    431, http_protocol.py); httptools buffers headers of any size. Django's LOGGING applies (log_config=None).
    X-Forwarded-For and -Proto are believed only from FORWARDED_ALLOW_IPS: uvicorn's own
    default trusts 127.0.0.1, which let any local client pick the address the login and
    token limits count.
    """
    import uvicorn

    from delegations.management.http_protocol import HeadLimitedH11

    proxies = settings.FORWARDED_ALLOW_IPS
    return uvicorn.Config(app, host=host, port=port, loop="uvloop", http=HeadLimitedH11, ws="websockets-sansio",
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
        parser.add_argument("--processes", type=int, default=1, choices=range(1, 33), metavar="N",
                            help="Server processes sharing the address and the database, each with its "
                                 "embedded worker: one process uses one core (default 1).")
        parser.add_argument("--listen-fd", type=int, help=argparse_suppress())

    def handle(self, *args: Any, host: str, port: int, no_worker: bool, processes: int,
               listen_fd: int | None, **options: Any) -> None:
        if processes > 1:
            sys.exit(_supervise(self, host=host, port=port, processes=processes, no_worker=no_worker))
        if listen_fd is not None:
            _end_with_the_supervisor()
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
        if listen_fd is None:
            self.stdout.write(f"Handoff is serving on http://{host}:{port}/ (Ctrl+C to stop).")
        # uvicorn stops gracefully on SIGTERM, then raises the signal again with the handler it
        # found: with Python's default the process died there, before the worker stopped and
        # before exit hooks ran (the last trees' traces were lost). This one exits properly.
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
        try:
            uvicorn.Server(config).run(sockets=None if listen_fd is None else [socket.socket(fileno=listen_fd)])
        finally:
            if worker is not None:
                worker.stop()
                worker.join(timeout=10)


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    sys.exit(128 + signum)   # the status a shell reports for a process ended by the signal


def argparse_suppress() -> str:
    import argparse

    return argparse.SUPPRESS   # --listen-fd: how the supervisor hands its socket to a process


# -- several processes ------------------------------------------------------------------------

def _end_with_the_supervisor() -> None:
    """A process of ``serve --processes`` gets SIGTERM when its supervisor dies, however it
    died (SIGKILL included): left running, it would keep serving the port with no hub.
    Linux's prctl; elsewhere only a supervisor that stops normally stops its processes."""
    import ctypes

    prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
    if prctl is None:
        return
    pr_set_pdeathsig = 1
    prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() == 1:   # it died before the request took effect
        sys.exit(0)


def _supervise(command: BaseCommand, *, host: str, port: int, processes: int, no_worker: bool) -> int:
    """``serve --processes N``: bind the address N times, start a ``serve`` process on each
    socket, link their channel layers through a hub in this process
    (delegations/live/siblings.py), start a process again when one dies, and stop them all
    on Ctrl+C or SIGTERM. Returns the exit status.

    Each process has a socket of its own on the port (SO_REUSEPORT), among which the kernel
    spreads new connections evenly: on one shared socket the process that happened to be
    idle took most of the keep-alive connections (8 clients: 46 runs/s against 67 spread).
    This process keeps the sockets, so a process started again finds the connections that
    came meanwhile waiting on its own."""
    try:
        listeners = [socket.create_server((host, port), backlog=2048, reuse_port=True) for _ in range(processes)]
    except (OSError, ValueError) as error:
        raise CommandError(f"Could not listen on {host}:{port} for {processes} processes: {error}. Is another "
                           "server on that port? Choose another with --port.") from None
    for listener in listeners:
        listener.set_inheritable(True)
    folder = tempfile.mkdtemp(prefix="handoff-siblings-")
    hub_path = str(Path(folder) / "hub.sock")
    env = {**os.environ, "HANDOFF_SIBLINGS_HUB": hub_path}
    stopping: list[int] = []
    children: dict[int, asyncio.subprocess.Process] = {}

    async def keep(index: int) -> None:
        fd = listeners[index].fileno()
        argv = [sys.executable, sys.argv[0], "serve", "--host", host, "--port", str(port),
                "--listen-fd", str(fd), *(["--no-worker"] if no_worker else [])]
        while not stopping:
            child = children[index] = await asyncio.create_subprocess_exec(*argv, env=env, pass_fds=(fd,))
            status = await child.wait()
            if stopping:
                return
            command.stderr.write(f"Server process {index + 1} (pid {child.pid}) ended with status {status}; "
                                 "starting it again. Its runs are taken over when their lease runs out.")
            await asyncio.sleep(1.0)

    async def main() -> int:
        from delegations.live.siblings import serve_hub

        hub = await serve_hub(hub_path)
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()

        def on_signal(signum: int) -> None:
            stopping.append(signum)
            stop.set()

        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal, signum)
        keepers = [asyncio.ensure_future(keep(index)) for index in range(processes)]
        command.stdout.write(f"Handoff is serving on http://{host}:{port}/ with {processes} processes "
                             "(Ctrl+C to stop).")
        await stop.wait()
        for child in children.values():
            if child.returncode is None:
                child.terminate()   # uvicorn stops gracefully on SIGTERM
        await asyncio.wait(keepers, timeout=20)
        hub.close()
        return 128 + signal.SIGTERM if stopping[0] == signal.SIGTERM else 0

    try:
        return asyncio.run(main())
    finally:
        for listener in listeners:
            listener.close()
        Path(hub_path).unlink(missing_ok=True)
        os.rmdir(folder)
