"""What the MCP layer costs per call: the median time to start a run through ``/mcp``'s
start_run tool (the official ``mcp`` client, one connection) against ``POST /api/runs``
(httpx, one connection), the same packet, interleaved call by call in one sitting.

``manage.py serve --no-worker`` on a free loopback port against a throwaway SQLite
database, so runs are written and wait in their lane without being executed: what is timed
is the call, not the run. Each MCP call carries its own idempotency key (an identical call
would return the first run). Prints a table of median and p95 milliseconds.

    .venv/bin/python tests/benchmarks/bench_mcp.py [--calls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.throwaway_site import (  # first: it sets up Django
    median_and_p95,
    serve_without_worker,
)

# isort: split

from django.core.management import call_command
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from delegations.models import APIToken
from tests.conftest import make_user
from tests.delegations import scripts


async def _measure(url: str, token: str, calls: int) -> tuple[list[float], list[float]]:
    """``calls`` starts each way, alternating, after a few unmeasured warm-up calls."""
    headers = {"Authorization": f"Bearer {token}"}
    body = {"packet": scripts.packet(), "adapter": {"name": "scripted", "config": scripts.leaf()}}
    mcp_ms: list[float] = []
    rest_ms: list[float] = []
    async with (httpx2.AsyncClient(headers=headers, timeout=60) as http,
                Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
                httpx2.AsyncClient(headers=headers, timeout=60) as rest):
        for number in range(calls + 5):
            started = time.perf_counter()
            result = await client.call_tool("start_run", {
                "packet": body["packet"], "adapter": "scripted", "adapter_config": scripts.leaf(),
                "idempotency_key": f"bench-{number}"})
            middle = time.perf_counter()
            response = await rest.post(f"{url}/api/runs", json=body)
            ended = time.perf_counter()
            assert not result.is_error and response.status_code == 201, (result, response.text)
            if number >= 5:
                mcp_ms.append((middle - started) * 1000)
                rest_ms.append((ended - middle) * 1000)
    return mcp_ms, rest_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    calls = parser.parse_args().calls
    call_command("migrate", verbosity=0)
    from django.contrib.auth.models import User

    _, token = APIToken.issue(user=make_user(User, "bench", "composers", password=None), name="bench")
    process, url = serve_without_worker()
    try:
        mcp_ms, rest_ms = asyncio.run(_measure(url, token, calls))
    finally:
        process.terminate()
        process.wait(timeout=10)
    rows: list[tuple[str, Any, Any]] = [("start_run through /mcp", *median_and_p95(mcp_ms)),
                                        ("POST /api/runs", *median_and_p95(rest_ms))]
    print(f"{calls} calls each, interleaved, one connection each, loopback, no worker")
    print(f"{'call':<26}{'median ms':>10}{'p95 ms':>10}")
    for name, median, p95 in rows:
        print(f"{name:<26}{median:>10.2f}{p95:>10.2f}")
    print(f"MCP layer overhead (median): {rows[0][1] - rows[1][1]:+.2f} ms per start "
          f"({rows[0][1] / rows[1][1]:.2f}x)")


if __name__ == "__main__":
    main()
