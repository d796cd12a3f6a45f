"""Runs end to end through the product: the HTTP API, SQLite, the embedded django-tasks-db
worker and websockets (issue 6's benchmark).

It starts a real `manage.py serve` (Daphne + the embedded worker thread, in-memory
channel layer) on a throwaway SQLite database and measures, with the scripted adapter at
zero latency:

1. **W1 hand-offs end to end**: ``POST /api/runs`` with the peers' W1 shape (a root that
   delegates to one subagent and finishes with its result) until the root's result is
   stored in the database: one at a time (latency per hand-off, which includes the
   worker's poll interval when the queue is empty) and many in flight (throughput).
2. **Event delivery**: 100 websocket clients watch one run whose tree emits 10,000+ events
   (a coordinator delegating 1000 subagents, 50 per model turn, 16 at a time, each
   "thinking" 1 s: about 180 events/s, 18,000 websocket frames/s in all). For every event each client receives,
   latency = arrival time - the event's ``ts`` (set when the runner handed it to the
   sink; so it covers storing, publishing and the websocket). Every client must receive
   every event of the tree exactly once (checked by seq per run against the event log).

Run from the project root: ``.venv/bin/python tests/benchmarks/bench_runs.py``
(``--quick`` for a smaller run; ``--json`` for one JSON line per figure).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import math
import os
import platform
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

YIELD = {"name": "yield_control", "arguments": {"status": "SUCCESS", "output_payload": {"answer": 42}}}


def child_args(label: str) -> dict[str, Any]:
    return {"subagent_type": "researcher", "label": label, "goal": "Answer the question",
            "instruction_set": "Do the task and hand the answer back with yield_control.",
            "input_data": {"input": "do the task"}, "expected_output": {"answer": "integer"},
            "success_criteria": ["JSON is schema-valid"], "timeout_s": 600}


def fan_out(children: int) -> dict[str, Any]:
    """The peers' W1 shape when children=1: a coordinator delegating in one turn and
    finishing with its children's results (no second model call)."""
    return {"script": [{"tool_calls": [{"name": "delegate_task", "arguments": child_args("leaf")}
                                       for _ in range(children)], "finish": "children"}],
            "children": {"leaf": {"script": [{"text": "The answer is 42.", "tool_calls": [YIELD]}]}}}


def waves(children: int, per_turn: int, leaf_delay_ms: int) -> dict[str, Any]:
    """A coordinator delegating ``per_turn`` subagents per model turn until ``children``
    ran; each subagent thinks ``leaf_delay_ms`` before answering (it paces the events)."""
    turns: list[dict[str, Any]] = []
    for start in range(0, children, per_turn):
        calls = [{"name": "delegate_task", "arguments": child_args("leaf")}
                 for _ in range(min(per_turn, children - start))]
        turns.append({"tool_calls": calls})
    turns[-1]["finish"] = "children"
    leaf = {"script": [{"text": "The answer is 42.", "tool_calls": [YIELD], "delay_ms": leaf_delay_ms}]}
    return {"script": turns, "children": {"leaf": leaf}}


def root_packet(*, concurrency: int = 8) -> dict[str, Any]:
    return {"goal": "Coordinate the subagents and gather their answers",
            "instruction_set": "You coordinate subagents.", "subagent_type": "researcher",
            "input_data": {"input": "solve"}, "allowed_inputs": ["input"], "timeout_s": 900,
            "budget": {"max_model_calls": 100_000, "max_concurrency": concurrency},
            "expected_output": {"children": "array"}, "success_criteria": ["JSON is schema-valid"]}


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


# -- a small websocket client (RFC 6455, text frames) ----------------------------------------

class WebSocket:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, host: str, port: int, path: str, cookie: str) -> WebSocket:
        reader, writer = await asyncio.open_connection(host, port, limit=2**24)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                      f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                      f"Sec-WebSocket-Version: 13\r\nOrigin: http://{host}:{port}\r\n"
                      f"Cookie: {cookie}\r\n\r\n").encode())
        head = await reader.readuntil(b"\r\n\r\n")
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"websocket refused: {head[:200]!r}")
        return cls(reader, writer)

    async def receive(self) -> str | None:
        """The next text message; None when the server closed the connection."""
        parts: list[bytes] = []
        while True:
            first, second = await self.reader.readexactly(2)
            opcode, length = first & 0x0F, second & 0x7F
            if length == 126:
                length = struct.unpack(">H", await self.reader.readexactly(2))[0]
            elif length == 127:
                length = struct.unpack(">Q", await self.reader.readexactly(8))[0]
            payload = await self.reader.readexactly(length)
            if opcode == 8:
                return None
            if opcode == 9:
                self._send_frame(10, payload)  # a pong, or the server drops us (Daphne pings)
                continue
            if opcode == 10:
                continue
            parts.append(payload)
            if first & 0x80:
                return b"".join(parts).decode()

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        # client frames are masked (RFC 6455 §5.3); payloads here are small control frames
        mask = os.urandom(4)
        masked = bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))
        self.writer.write(bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked)

    def close(self) -> None:
        self.writer.close()


# -- the server under test --------------------------------------------------------------------

class Server:
    def __init__(self, data_dir: Path, lane: int) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.env = {**os.environ, "HANDOFF_DATA_DIR": str(data_dir),
                    "DATABASE_URL": f"sqlite:///{data_dir / 'bench.sqlite3'}",
                    "HANDOFF_TASK_BACKEND": "db", "HANDOFF_EMBEDDED_WORKER": "1",
                    "HANDOFF_LANE_SIZE": str(lane), "LOG_LEVEL": "WARNING",
                    "SECRET_KEY": "bench-secret-key-not-for-production",
                    "DJANGO_SETTINGS_MODULE": "handoff_site.settings"}
        self.log = (data_dir / "server.log").open("w")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=self.env,
                       check=True)
        self.process = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(self.port)],
                                        cwd=ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        import httpx

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/api/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError(f"the server did not start; see {self.log.name}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log.close()


def setup_django(env: dict[str, str]) -> tuple[str, str]:
    """Configure Django in this process on the server's database; returns a bearer header
    value and a session cookie for a composer."""
    for key in ("HANDOFF_DATA_DIR", "DATABASE_URL", "SECRET_KEY", "DJANGO_SETTINGS_MODULE", "LOG_LEVEL"):
        os.environ[key] = env[key]
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    import django

    django.setup()
    from django.contrib.auth.models import Group, User
    from django.test import Client

    from delegations.models import APIToken

    user = User.objects.create_user("bench", password="bench-password-123")
    user.groups.add(Group.objects.get(name="composers"))
    _, raw = APIToken.issue(user=user, name="bench")
    client = Client()
    client.force_login(user)
    return f"Bearer {raw}", f"sessionid={client.cookies['sessionid'].value}"


# -- W1 end to end ----------------------------------------------------------------------------

def wait_stored(run_ids: list[str], timeout: float = 600) -> dict[str, float]:
    """Poll the database until each run's result is stored; returns run id -> time seen."""
    from delegations.models import Run

    done: dict[str, float] = {}
    pending = set(run_ids)
    deadline = time.monotonic() + timeout
    while pending:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(pending)} runs did not finish")
        rows = Run.objects.filter(pk__in=pending, finished_at__isnull=False).values_list(
            "pk", "state", "result")
        now = time.perf_counter()
        for pk, state, result in rows:
            if state != "COMPLETE" or not result or result.get("status") != "SUCCESS":
                raise RuntimeError(f"run {pk} ended {state}: {result}")
            done[pk] = now
            pending.discard(pk)
        if pending:
            time.sleep(0.002)
    return done


def w1(base: str, bearer: str, *, sequential: int, concurrent: int) -> list[dict[str, Any]]:
    import httpx

    body = {"packet": root_packet(), "adapter": {"name": "scripted", "config": fan_out(1)}}
    figures = []
    with httpx.Client(base_url=base, headers={"Authorization": bearer}, timeout=60) as http:
        def post() -> str:
            response = http.post("/api/runs", json=body)
            response.raise_for_status()
            return str(response.json()["id"])

        for _ in range(3):  # warm-up
            wait_stored([post()])
        latencies = []
        started = time.perf_counter()
        for _ in range(sequential):
            t0 = time.perf_counter()
            run_id = post()
            latencies.append(wait_stored([run_id])[run_id] - t0)
        wall = time.perf_counter() - started
        figures.append({"figure": "W1_sequential_end_to_end", "n": sequential,
                        "per_second": round(sequential / wall, 2),
                        "median_ms": round(statistics.median(latencies) * 1e3, 1),
                        "p99_ms": round(quantile(latencies, 0.99) * 1e3, 1)})
        started = time.perf_counter()
        posted: dict[str, float] = {}
        for _ in range(concurrent):
            posted[post()] = time.perf_counter()
        done = wait_stored(list(posted))
        wall = time.perf_counter() - started
        each = [done[pk] - t0 for pk, t0 in posted.items()]
        figures.append({"figure": "W1_burst_end_to_end", "n": concurrent,
                        "per_second": round(concurrent / wall, 2),
                        "median_ms": round(statistics.median(each) * 1e3, 1),
                        "p99_ms": round(quantile(each, 0.99) * 1e3, 1)})
    return figures


# -- event delivery ---------------------------------------------------------------------------

async def watch(port: int, path: str, cookie: str, ready: asyncio.Event, counts: list[int],
                done: asyncio.Event, *, full: bool) -> tuple[dict[str, list[int]], list[float], int]:
    """One viewer. A full one parses every event (latency, seq order per run); a light one
    only counts events once synced (so that the measuring process is not what limits
    100 viewers) and stops a few seconds after the full ones saw the root's result."""
    socket_ = await WebSocket.connect("127.0.0.1", port, path, cookie)
    root_id = path.split("/")[3]
    seen: dict[str, list[int]] = {}
    latencies: list[float] = []
    counted = 0
    synced = False
    try:
        while True:
            if done.is_set() and not full:
                try:
                    text = await asyncio.wait_for(socket_.receive(), 3)
                except TimeoutError:
                    break
            else:
                text = await socket_.receive()
            arrived = time.time()
            if text is None:
                break
            if synced and not full:
                counted += text.count('"seq":')
                continue
            decoded = json.loads(text)
            frames = decoded if isinstance(decoded, list) else [decoded]
            finished = False
            for frame in frames:
                if "seq" not in frame:
                    if frame.get("type") == "synced" and not synced:
                        synced = True
                        counts[0] += 1
                        if counts[0] == counts[1]:
                            ready.set()
                    continue
                counted += 1
                seen.setdefault(frame["run_id"], []).append(frame["seq"])
                if synced:
                    latencies.append(arrived - frame["ts"])
                finished = finished or (frame["type"] == "result" and frame["run_id"] == root_id)
            if finished:
                done.set()
                break
    finally:
        socket_.close()
    return seen, latencies, counted


async def delivery(port: int, cookie: str, *, clients: int, sample: int,
                   children: int, concurrency: int, leaf_delay_ms: int, batch: bool) -> dict[str, Any]:
    from django.contrib.auth.models import User

    from delegations.models import RunEvent
    from delegations.services import run_create
    from delegations.tasks import enqueue_run

    # created here with its lane slot taken but not started: it is queued for the server's
    # worker once every client is connected and has its (empty) backlog
    config = waves(children, 50, leaf_delay_ms)
    packet = root_packet(concurrency=concurrency)
    packet["max_iterations"] = len(config["script"]) + 1
    owner = User.objects.get(username="bench")
    run = run_create(packet=packet, adapter="scripted", config=config, owner=owner, start=False)
    run_id = run.pk
    ready, finished = asyncio.Event(), asyncio.Event()
    counts = [0, clients]
    full = min(clients, sample)
    path = f"/ws/runs/{run_id}/" + ("?batch=1" if batch else "")
    tasks = [asyncio.create_task(watch(port, path, cookie, ready, counts, finished, full=i < full))
             for i in range(clients)]
    await asyncio.wait_for(ready.wait(), 120)
    connected = time.time()
    await asyncio.to_thread(enqueue_run, run_id)
    results = await asyncio.wait_for(asyncio.gather(*tasks), 900)
    elapsed = time.time() - connected
    stored: dict[str, list[int]] = {}
    for member, seq in RunEvent.objects.filter(run__root_id=run_id).values_list("run_id", "seq"):
        stored.setdefault(member, []).append(seq)
    expected = {member: sorted(seqs) for member, seqs in stored.items()}
    total = sum(len(s) for s in expected.values())
    lost = doubled = 0
    for _, _, counted in results[full:]:
        lost += max(0, total - counted)
        doubled += max(0, counted - total)
    for seen, _, _ in results[:full]:
        for member, seqs in expected.items():
            got = seen.get(member, [])
            lost += len(set(seqs) - set(got))
            doubled += len(got) - len(set(got))
            if got != sorted(got):
                doubled += 1  # out of order counts as a fault too
    latencies = [lat for _, lats, _ in results for lat in lats]
    return {"figure": "event_delivery_sink_to_websocket", "clients": clients, "measuring": full,
            "frames": "batched" if batch else "one event per frame",
            "concurrency": concurrency, "leaf_delay_ms": leaf_delay_ms, "runs_in_tree": len(expected),
            "events": total, "deliveries": sum(counted for _, _, counted in results), "lost": lost, "doubled_or_unordered": doubled,
            "events_per_second": round(total / elapsed, 1),
            "p50_ms": round(quantile(latencies, 0.5) * 1e3, 2),
            "p99_ms": round(quantile(latencies, 0.99) * 1e3, 2),
            "max_ms": round(max(latencies) * 1e3, 2) if latencies else None}


META = {"python": platform.python_version(), "machine": f"{os.cpu_count()} cpu",
        "database": "sqlite", "worker": "embedded django-tasks-db", "channel_layer": "in-memory"}


def show(figure: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps({**figure, **META}), flush=True)
    else:
        print("  ".join(f"{k}={v}" for k, v in figure.items()), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller numbers (a smoke run)")
    parser.add_argument("--json", action="store_true", help="one JSON line per figure")
    parser.add_argument("--only", choices=("w1", "delivery"), default=None,
                        help="run one of the two parts")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--sample", type=int, default=10,
                        help="viewers that parse every event (latency, order); the rest count")
    parser.add_argument("--children", type=int, default=1000,
                        help="subagents of the watched run (about 11 events each)")
    parser.add_argument("--concurrency", type=int, default=16, help="subagents at once")
    parser.add_argument("--frames", choices=("batch", "single", "both"), default="both",
                        help="websocket frames: ?batch=1 arrays, one event per frame, or both")
    parser.add_argument("--leaf-delay-ms", type=int, default=1000,
                        help="how long each subagent's model 'thinks' (paces the events)")
    args = parser.parse_args()
    sequential, concurrent = (10, 20) if args.quick else (50, 200)
    clients, children = (10, 50) if args.quick else (args.clients, args.children)
    with tempfile.TemporaryDirectory(prefix="handoff-bench-") as tmp:
        server = Server(Path(tmp), lane=max(8, concurrent))
        server.start()
        try:
            bearer, cookie = setup_django(server.env)
            base = f"http://127.0.0.1:{server.port}"
            for figure in ([] if args.only == "delivery" else
                           w1(base, bearer, sequential=sequential, concurrent=concurrent)):
                show(figure, args.json)
            modes = ("batch", "single") if args.frames == "both" else (args.frames,)
            for mode in modes if args.only != "w1" else ():
                show(asyncio.run(delivery(
                    server.port, cookie, clients=clients, sample=args.sample, children=children,
                    concurrency=args.concurrency, leaf_delay_ms=args.leaf_delay_ms,
                    batch=mode == "batch")), args.json)
        finally:
            server.stop()
    if not args.json:
        print("  ".join(f"{k}={v}" for k, v in META.items()))


if __name__ == "__main__":
    main()
