"""What the A2A layer costs per round trip: the official ``a2a-sdk`` client against
``POST /api/runs`` (httpx), the same packet, interleaved call by call in one sitting.

Two figures, each on one connection per side, loopback:

1. **start**: ``SendMessage`` with ``returnImmediately`` (the task as written, not yet run)
   against ``POST /api/runs``, on ``manage.py serve --no-worker``, so what is timed is the
   call, not the run.
2. **read**: ``GetTask`` against ``GET /api/runs/{id}`` on the same task.

Prints a table of median and p95 milliseconds and the overhead of each A2A call.

    .venv/bin/python tests/benchmarks/bench_a2a.py [--calls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import new_data_part
from a2a.types.a2a_pb2 import GetTaskRequest, Message, Role, SendMessageRequest
from django.core.management import call_command
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Struct
from throwaway_site import (  # sets up Django on a throwaway database
    median_and_p95,
    serve_without_worker,
)

from delegations.models import APIToken
from tests.conftest import make_user
from tests.delegations import scripts

WARM_UP = 5




def _message(packet: dict[str, Any], adapter: dict[str, Any]) -> SendMessageRequest:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[new_data_part(packet)],
                      metadata=ParseDict({"adapter": adapter}, Struct()))
    request = SendMessageRequest(message=message)
    request.configuration.return_immediately = True
    return request


async def _measure(url: str, token: str, calls: int) -> dict[str, list[float]]:
    """``calls`` of each pair, alternating, after a few unmeasured warm-up calls."""
    headers = {"Authorization": f"Bearer {token}"}
    adapter = {"name": "scripted", "config": scripts.leaf()}
    body = {"packet": scripts.packet(), "adapter": adapter}
    timings: dict[str, list[float]] = {"SendMessage": [], "POST /api/runs": [], "GetTask": [],
                                       "GET /api/runs/{id}": []}
    async with (httpx.AsyncClient(headers=headers, timeout=60) as a2a_http,
                httpx.AsyncClient(headers=headers, timeout=60) as rest):
        card = await A2ACardResolver(a2a_http, url).get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=a2a_http, streaming=False)).create(card)
        for number in range(calls + WARM_UP):
            marks = [time.perf_counter()]
            [answer] = [event async for event in client.send_message(_message(scripts.packet(), adapter))]
            marks.append(time.perf_counter())
            created = await rest.post(f"{url}/api/runs", json=body)
            marks.append(time.perf_counter())
            task = await client.get_task(GetTaskRequest(id=answer.task.id))
            marks.append(time.perf_counter())
            read = await rest.get(f"{url}/api/runs/{answer.task.id}")
            marks.append(time.perf_counter())
            assert created.status_code == 201 and read.status_code == 200 and task.id == answer.task.id
            if number >= WARM_UP:
                for name, start, end in zip(timings, marks, marks[1:], strict=False):
                    timings[name].append((end - start) * 1000)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    calls = parser.parse_args().calls
    call_command("migrate", verbosity=0)
    from django.contrib.auth.models import User

    _, token = APIToken.issue(user=make_user(User, "bench", "composers", password=None), name="bench")
    process, url = serve_without_worker()
    try:
        timings = asyncio.run(_measure(url, token, calls))
    finally:
        process.terminate()
        process.wait(timeout=10)
    figures = {name: median_and_p95(values) for name, values in timings.items()}
    print(f"{calls} calls each, interleaved, one connection each, loopback, no worker")
    print(f"{'call':<28}{'median ms':>10}{'p95 ms':>10}")
    for name, (median, p95) in figures.items():
        print(f"{name:<28}{median:>10.2f}{p95:>10.2f}")
    for a2a, rest in (("SendMessage", "POST /api/runs"), ("GetTask", "GET /api/runs/{id}")):
        print(f"A2A overhead, {a2a} against {rest} (median): "
              f"{figures[a2a][0] - figures[rest][0]:+.2f} ms ({figures[a2a][0] / figures[rest][0]:.2f}x)")


if __name__ == "__main__":
    main()
