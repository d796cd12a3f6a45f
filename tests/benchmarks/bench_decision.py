"""A person's decision -> the run's next event on its websocket, in embedded mode (issue 16's
benchmark; target: median under 100 ms).

It starts a real ``manage.py serve`` (uvicorn + the embedded django-tasks-db worker, the
in-memory channel layer) on a throwaway SQLite database, as ``bench_runs.py`` does. Each
round: a composer starts a scripted run whose first tool call (``delete_file``) needs an
approval; once it is parked (its inbox item open, its worker released), a websocket client
watches the run as the live run page does (``/ws/runs/<id>/?after=<last seq>``, waiting
for ``synced``); then an approver POSTs ``/api/approvals/<id>/decision`` and the clock
runs until the next event of the run arrives on that websocket (the resumed run's first
event). That covers the decision's request (rules, row lock, commit), the enqueue, the
worker taking the task and the lease, the runner resuming from the checkpoint, storing the
event and publishing it. ``decision_http_ms`` is the request alone.

Run from the project root: ``.venv/bin/python tests/benchmarks/bench_decision.py``
(``--rounds N``, ``--quick`` for 10 rounds, ``--json`` for one JSON line).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.bench_runs import META, Server, quantile, setup_django  # noqa: E402

TARGET_MS = 100.0

PACKET = {
    "goal": "Remove the stale file and say so", "subagent_type": "executor",
    "instruction_set": "Delete stale.txt, then hand back with yield_control.",
    "input_data": {"path": "stale.txt"}, "allowed_inputs": ["path"],
    "expected_output_schema": {"answer": "integer"}, "success_criteria": ["JSON is schema-valid"],
    "timeout_s": 60, "budget": {"max_model_calls": 5, "max_tokens": 100000},
    "capabilities": ["file_delete"],
}
CONFIG = {"script": [
    {"text": "Removing the stale file.", "tool_calls": [{"name": "delete_file", "arguments": {"path": "stale.txt"}}]},
    {"text": "Done.", "tool_calls": [{"name": "yield_control", "arguments": {
        "status": "SUCCESS", "output_payload": {"answer": 42}}}]}]}


def approver_token() -> str:
    """A bearer header value for an approver who did not start the runs."""
    from django.contrib.auth.models import Group, User

    from delegations.models import APIToken

    user = User.objects.create_user("bench-approver", password="bench-password-123")
    user.groups.add(Group.objects.get(name="approvers"))
    _, raw = APIToken.issue(user=user, name="bench")
    return f"Bearer {raw}"


def parked_item(run_id: str, timeout: float = 30.0) -> tuple[int, int]:
    """Wait until the run is parked with its worker released; its item's id and last seq."""
    from delegations.models import Approval, Run

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = Run.objects.filter(pk=run_id).values("state", "lease_owner", "last_seq").first()
        item = Approval.objects.filter(run_id=run_id, status="pending").values_list("pk", flat=True).first()
        if run and run["state"] == "AWAITING_APPROVAL" and not run["lease_owner"] and item:
            return int(item), int(run["last_seq"])
        time.sleep(0.005)
    raise RuntimeError(f"run {run_id} did not park")


async def one_round(http: Any, port: int, cookie: str, composer: str, approver: str) -> dict[str, float]:
    from websockets.asyncio.client import connect

    response = await http.post("/api/runs", json={"packet": PACKET, "adapter": {"name": "scripted", "config": CONFIG}},
                               headers={"Authorization": composer})
    response.raise_for_status()
    run_id = response.json()["id"]
    approval_id, last_seq = await asyncio.to_thread(parked_item, run_id)
    url = f"ws://127.0.0.1:{port}/ws/runs/{run_id}/?after={last_seq}"
    async with connect(url, additional_headers={"Cookie": cookie, "Origin": f"http://127.0.0.1:{port}"}) as socket:
        while json.loads(await socket.recv()).get("type") != "synced":
            pass
        started = time.perf_counter()
        decided = await http.post(f"/api/approvals/{approval_id}/decision", json={"decision": "approve"},
                                  headers={"Authorization": approver})
        answered = time.perf_counter()
        decided.raise_for_status()
        while True:
            frame = json.loads(await asyncio.wait_for(socket.recv(), 30))
            if "seq" in frame:
                arrived = time.perf_counter()
                break
    return {"next_event_ms": (arrived - started) * 1e3, "decision_http_ms": (answered - started) * 1e3}


async def measure(port: int, cookie: str, composer: str, approver: str, rounds: int) -> list[dict[str, float]]:
    import httpx

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
        for _ in range(3):  # warm-up: imports, first queries, the worker's first task
            await one_round(http, port, cookie, composer, approver)
        return [await one_round(http, port, cookie, composer, approver) for _ in range(rounds)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="10 rounds (a smoke run)")
    parser.add_argument("--json", action="store_true", help="one JSON line")
    args = parser.parse_args()
    rounds = 10 if args.quick else args.rounds
    with tempfile.TemporaryDirectory(prefix="handoff-bench-") as tmp:
        server = Server(Path(tmp), lane=8)
        server.start()
        try:
            composer, cookie = setup_django(server.env)
            approver = approver_token()
            samples = asyncio.run(measure(server.port, cookie, composer, approver, rounds))
        finally:
            server.stop()
    latencies = [s["next_event_ms"] for s in samples]
    requests = [s["decision_http_ms"] for s in samples]
    figure = {"figure": "decision_to_next_event", "n": len(samples),
              "median_ms": round(statistics.median(latencies), 1),
              "p99_ms": round(quantile(latencies, 0.99), 1),
              "decision_http_median_ms": round(statistics.median(requests), 1),
              "target_median_ms": TARGET_MS,
              "meets_target": statistics.median(latencies) < TARGET_MS}
    if args.json:
        print(json.dumps({**figure, **META}), flush=True)
    else:
        print("  ".join(f"{k}={v}" for k, v in figure.items()))
        print("  ".join(f"{k}={v}" for k, v in META.items()))


if __name__ == "__main__":
    main()
