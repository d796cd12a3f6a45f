"""The scale-out stack, started for the `scaleout` tests: the ASGI server as its own process
(`manage.py serve --no-worker`), two RQ workers (`manage.py rqworker`, each in its own
process group so a test can kill a whole "machine"), a Redis of its own (so a test may
restart it) and the PostgreSQL test database this pytest process uses.

These tests run in .ci/run's scale-out stage (DATABASE_URL=postgres://..., REDIS_URL,
HANDOFF_TASK_BACKEND=rq); anywhere else they are skipped. With HANDOFF_REQUIRE_SERVICES=1
a missing PostgreSQL, Redis or redis-server fails them instead."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, _free_port, _test_database_url
from tests.services import missing, postgres_url, redis_url

START_TIMEOUT_S = 40


def _wait_until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not come up within {timeout:g} s")


def parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def children_of(pid: int) -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir()
            if entry.name.isdigit() and parent_of(int(entry.name)) == pid]


class ScaleOutStack:
    """The processes of a scale-out deployment on loopback, each stopped by its PID."""

    def __init__(self, workdir: Path, database_url: str, secret_key: str, lease_s: int) -> None:
        self.workdir = workdir
        self.redis_port = _free_port()
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.redis_url = f"redis://127.0.0.1:{self.redis_port}/0"
        self.env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": self.redis_url,
                    "HANDOFF_TASK_BACKEND": "rq", "HANDOFF_LEASE_SECONDS": str(lease_s),
                    "SECRET_KEY": secret_key, "HANDOFF_DEFAULT_ADAPTER": "scripted",
                    "HANDOFF_WORKSPACE_ROOT": str(workdir / "workspaces"),
                    "DJANGO_SETTINGS_MODULE": "handoff_site.settings", "LOG_LEVEL": "INFO",
                    "PYTHONUNBUFFERED": "1"}
        self.redis: subprocess.Popen[bytes] | None = None
        self.server: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []
        self._logs: list[Any] = []

    # -- processes ---------------------------------------------------------------------------
    def _spawn(self, name: str, args: list[str], *, group: bool = False) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("ab")
        self._logs.append(log)
        return subprocess.Popen(args, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=group)

    def start_redis(self) -> None:
        self.redis = self._spawn("redis", ["redis-server", "--bind", "127.0.0.1", "--port",
                                           str(self.redis_port), "--save", "", "--appendonly", "no",
                                           "--dir", str(self.workdir)])
        _wait_until(lambda: subprocess.run(["redis-cli", "-p", str(self.redis_port), "ping"],
                                           capture_output=True).stdout.strip() == b"PONG",
                    10, "redis-server")

    def start_server(self) -> None:
        self.server = self._spawn("server", [sys.executable, "manage.py", "serve", "--no-worker",
                                             "--port", str(self.port)])
        _wait_until(lambda: httpx.get(f"{self.url}/api/ready", timeout=2).status_code == 200,
                    START_TIMEOUT_S, f"the ASGI server (see {self.workdir}/server.log)")

    def start_worker(self, index: int) -> subprocess.Popen[bytes]:
        worker = self._spawn(f"worker{index}", [
            sys.executable, "manage.py", "rqworker", "--job-class", "django_tasks_rq.Job",
            "--name", f"handoff-test-{os.getpid()}-{index}-{time.monotonic_ns()}", "default"],
            group=True)
        if index < len(self.workers):
            self.workers[index] = worker
        else:
            self.workers.append(worker)
        return worker

    def start(self, workers: int = 2) -> None:
        self.start_redis()
        for index in range(workers):
            self.start_worker(index)
        self.start_server()
        self.wait_for_workers(workers)

    def wait_for_workers(self, count: int) -> None:
        from delegations.models import WorkerHeartbeat

        pids = {w.pid for w in self.workers if w.poll() is None}
        _wait_until(lambda: len(set(WorkerHeartbeat.objects.filter(kind="rq", pid__in=pids)
                                    .values_list("pid", flat=True))) >= count,
                    START_TIMEOUT_S, f"{count} RQ workers (see {self.workdir}/worker*.log)")

    def signal_worker(self, index: int, sig: int) -> None:
        """Signal the worker's process and any child of it, as when the machine it runs on
        dies (SIGKILL) or stalls (SIGSTOP)."""
        worker = self.workers[index].pid
        for pid in [*children_of(worker), worker]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def worker_of(self, pid: int) -> int | None:
        """The index of the worker whose process ``pid`` is (RQ's non-forking worker runs its
        jobs itself; a forking one would run them in a child)."""
        parent = parent_of(pid)
        for index, worker in enumerate(self.workers):
            if worker.pid in (pid, parent):
                return index
        return None

    def stop_process(self, process: subprocess.Popen[bytes] | None, *, group: bool = False) -> None:
        if process is None or process.poll() is not None:
            return
        horses = children_of(process.pid) if group else []
        if group:
            for pid in [*horses, process.pid]:
                self._kill(pid, signal.SIGCONT)
            self._kill(process.pid, signal.SIGTERM)
        else:
            process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        for pid in horses:
            self._kill(pid, signal.SIGKILL)  # a work horse left behind

    @staticmethod
    def _kill(pid: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)

    def restart_server(self) -> None:
        self.stop_process(self.server)
        self.start_server()

    def restart_redis(self) -> None:
        self.stop_process(self.redis)
        self.start_redis()

    def stop(self) -> None:
        self.stop_process(self.server)
        for worker in self.workers:
            self.stop_process(worker, group=True)
        self.stop_process(self.redis)
        for log in self._logs:
            log.close()

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")


@pytest.fixture(scope="session")
def scaleout_mode() -> None:
    """This pytest process must itself be in scale-out mode: the tests read the same
    PostgreSQL database the stack writes."""
    from django.conf import settings
    from django.db import connection

    if connection.vendor != "postgresql" or settings.HANDOFF_TASK_BACKEND != "rq":
        pytest.skip("scale-out tests run in .ci/run's scale-out stage (DATABASE_URL=postgres://..., "
                    "REDIS_URL, HANDOFF_TASK_BACKEND=rq)")
    postgres_url()
    redis_url()
    if not shutil.which("redis-server"):
        missing("redis-server not found (apt-get install redis-server)")


@pytest.fixture(scope="session")
def stack(scaleout_mode: None, django_db_setup: Any, django_db_blocker: Any,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScaleOutStack]:
    from django.conf import settings

    with django_db_blocker.unblock():
        database_url = _test_database_url()
        stack = ScaleOutStack(tmp_path_factory.mktemp("scaleout"), database_url, settings.SECRET_KEY,
                              settings.HANDOFF_LEASE_SECONDS)
        try:
            stack.start(workers=2)
        except BaseException:
            stack.stop()
            raise
    yield stack
    stack.stop()


@pytest.fixture
def live_stack(stack: ScaleOutStack, transactional_db: None) -> Iterator[ScaleOutStack]:
    """The stack, with every worker and the server up at the start of the test (a fault test
    may have killed one) and no run left unfinished by the previous test."""
    restarted = False
    for index, worker in enumerate(stack.workers):
        if worker.poll() is not None:
            stack.start_worker(index)
            restarted = True
    if stack.redis is None or stack.redis.poll() is not None:
        stack.start_redis()
    if stack.server is None or stack.server.poll() is not None:
        stack.start_server()
    if restarted:
        stack.wait_for_workers(len(stack.workers))
    yield stack
    # nothing of this test may still execute when the next one flushes the database
    from django.utils import timezone

    from delegations.models import Run
    from delegations.models.runs import TERMINAL

    for index in range(len(stack.workers)):
        stack.signal_worker(index, signal.SIGCONT)
    active = Run.objects.exclude(state__in=TERMINAL).exclude(state="AWAITING_APPROVAL")
    active.update(cancel_requested_at=timezone.now())
    _wait_until(lambda: not active.exists(), 30, "the test's runs to end")


@pytest.fixture
def session_cookie(composer: Any) -> str:
    from django.test import Client

    client = Client()
    client.force_login(composer)
    return f"sessionid={client.cookies['sessionid'].value}"


@pytest.fixture
def api(live_stack: ScaleOutStack, composer: Any) -> Iterator[httpx.Client]:
    from tests.conftest import bearer

    with httpx.Client(base_url=live_stack.url, headers=bearer(composer), timeout=15) as client:
        yield client
