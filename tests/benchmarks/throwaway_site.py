"""The Django site on a throwaway SQLite database, for the benchmarks that time pages.

Importing it (before anything imports Django models) points HANDOFF_DATA_DIR at a new
temporary folder that is removed at exit, sets up Django and puts the project root on
``sys.path``; :data:`DATA_DIR` is that folder. A server started from the benchmark in a
subprocess inherits the environment, so it serves the same database.
"""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import statistics
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
    return statistics.median(timings), sorted(timings)[max(0, round(0.95 * len(timings)) - 1)], len(queries)
