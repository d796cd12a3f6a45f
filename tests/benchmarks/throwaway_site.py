"""The Django site on a throwaway SQLite database, for the benchmarks that time pages.

Importing it (before anything imports Django models) points HANDOFF_DATA_DIR at a new
temporary folder that is removed at exit, sets up Django and puts the project root on
``sys.path``; :data:`DATA_DIR` is that folder. A server started from the benchmark in a
subprocess inherits the environment, so it serves the same database
(:func:`serve_without_worker` starts one).
"""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DATA_DIR = tempfile.mkdtemp(prefix="handoff-bench-")
atexit.register(shutil.rmtree, DATA_DIR, ignore_errors=True)
os.environ["HANDOFF_DATA_DIR"] = DATA_DIR
os.environ.pop("DATABASE_URL", None)  # always the throwaway SQLite file
os.environ["ALLOWED_HOSTS"] = "testserver,127.0.0.1"
os.environ["DJANGO_SETTINGS_MODULE"] = "handoff_site.settings"
os.environ.setdefault("LOG_LEVEL", "WARNING")

import django  # noqa: E402

django.setup()


def time_page(client: Any, url: str, rounds: int) -> tuple[float, float, int]:
    """GET ``url`` ``rounds`` times (after one warm-up GET the caller made): the median and
    p95 milliseconds, and how many queries one GET makes."""
    from django.db import connection

    queries: list[str] = []

    def count(execute: Any, sql: str, *rest: Any) -> Any:
        queries.append(sql)   # a wrapper, not the debug log: each request closes the connection
        return execute(sql, *rest)

    with connection.execute_wrapper(count):
        client.get(url)
    timings = []
    gc.collect()
    for _ in range(rounds):
        started = time.perf_counter()
        response = client.get(url)
        timings.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.status_code
    return (*median_and_p95(timings), len(queries))


def median_and_p95(values: list[float]) -> tuple[float, float]:
    return statistics.median(values), sorted(values)[max(0, round(0.95 * len(values)) - 1)]


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve_without_worker(**env: str) -> tuple[subprocess.Popen[bytes], str]:
    """``manage.py serve --no-worker`` on a free loopback port over this database, with no
    bound on waiting runs (runs are written and wait; what a benchmark times is the call),
    and ``env`` on top: the process and its base URL once /api/health answers."""
    import httpx

    port = free_port()
    env = {**os.environ, "HANDOFF_DATA_DIR": DATA_DIR, "HANDOFF_MAX_PENDING_RUNS_PER_OWNER": "100000",
           "HANDOFF_MAX_PENDING_RUNS": "100000", "LOG_LEVEL": "WARNING", **env}
    process = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port), "--no-worker"],
                               cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            if httpx.get(f"{url}/api/health", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit("manage.py serve did not start")
