"""The load probe: one-turn runs through the REST API, as a program uses Handoff, at 1, 8 and
32 concurrent clients; what a client sees end to end.

Each client is a composer of its own with an API token. It starts a run (a one-turn
scripted model that answers at once) and waits for its result: in the same request
(``POST /api/runs?wait=30``, ``--client start-and-wait``, the default), with a second one
(``GET /api/runs/{id}?wait=30``, ``--client wait``) or polling every 20 ms (``--client
poll``); then it starts the next, for
``--seconds`` per level after a short warm-up. A refused run (429) waits the Retry-After it
was given. Per level it prints runs offered, accepted and refused per second, completed
per second, post -> result p50 / p95, and the server's CPU per completed run (every process
of the deployment, read from /proc).

    .venv/bin/python tests/benchmarks/load_probe.py                       # embedded, as `make run`
    .venv/bin/python tests/benchmarks/load_probe.py --mode scaleout --workers 1,2,4 \\
        --database-url postgres://handoff@127.0.0.1:5439/handoff         # PostgreSQL + Redis + RQ
    .venv/bin/python tests/benchmarks/load_probe.py --mode slow            # a 500 ms model, in flight

``--mode embedded`` starts ``manage.py serve`` (the embedded worker) on a throwaway SQLite
database, with nothing set but what `make run` sets (``--processes N``: ``serve
--processes N``, N server processes on the one address and database). ``--mode scaleout`` starts, per worker
count, the stack the scale-out tests use (tests/scaleout/conftest.py: ``serve --no-worker``,
RQ workers, a Redis of its own) on a throwaway database of the named loopback PostgreSQL.
``--mode slow`` points the runs at an OpenAI-compatible stand-in on loopback that answers
each chat completion after ``--latency-ms`` (500), with one worker; its clients start
``--in-flight`` runs at once and keep that many going, and it prints how many were in
flight at most, the completed rate against in-flight / latency, and the worker's resident
memory per 1,000 runs in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

TERMINAL = {"COMPLETE", "RETURNED", "FAILED", "TIMEOUT", "REJECTED", "CANCELLED"}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
WARM_UP_S = 2.0


def one_turn_packet(label: str = "probe") -> dict[str, Any]:
    return {"goal": "Answer with the number", "label": label, "subagent_type": "researcher",
            "instruction_set": "Answer with JSON.", "input_data": {"question": "six times seven"},
            "allowed_inputs": ["question"], "expected_output_schema": {"answer": "integer"},
            "success_criteria": ["JSON is schema-valid"], "timeout_s": 120,
            "budget": {"max_model_calls": 3, "max_tokens": 10000}}


ONE_TURN = {"script": [{"tool_calls": [{"name": "yield_control", "arguments": {
    "status": "SUCCESS", "output_payload": {"answer": 42}}}]}]}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of these processes and their children so far."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(value) for value in fields[11:15]) / CLOCK_TICKS
    return total


def resident_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- what a level measured --------------------------------------------------------------------

@dataclass
class Level:
    clients: int
    seconds: float
    offered: int = 0
    accepted: int = 0
    refused: int = 0
    completed: int = 0
    not_complete: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    in_flight_max: int = 0

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1

    def per_run(self, seconds: float) -> float:
        return seconds / self.completed * 1000 if self.completed else float("nan")

    def line(self, label: str) -> str:
        per_s = self.seconds
        cpu = self.per_run(self.cpu_s)
        return (f"{label:<26} offered {self.offered / per_s:7.1f}/s  accepted {self.accepted / per_s:7.1f}/s  "
                f"refused {self.refused / per_s:6.1f}/s  completed {self.completed / per_s:7.1f}/s  "
                f"p50 {percentile(self.latencies, 0.5) * 1000:7.1f} ms  p95 {percentile(self.latencies, 0.95) * 1000:7.1f} ms  "
                f"cpu {cpu:6.1f} ms/run (clients {self.per_run(self.client_cpu_s):4.1f})"
                + (f"  errors {self.errors}" if self.errors else "")
                + (f"  not COMPLETE {self.not_complete}" if self.not_complete else ""))

    def as_dict(self, label: str) -> dict[str, Any]:
        per_s = self.seconds
        return {"level": label, "clients": self.clients, "seconds": per_s,
                "offered_per_s": round(self.offered / per_s, 2), "accepted_per_s": round(self.accepted / per_s, 2),
                "refused_per_s": round(self.refused / per_s, 2), "completed_per_s": round(self.completed / per_s, 2),
                "p50_ms": round(percentile(self.latencies, 0.5) * 1000, 1),
                "p95_ms": round(percentile(self.latencies, 0.95) * 1000, 1),
                "cpu_ms_per_run": round(self.per_run(self.cpu_s), 2) if self.completed else None,
                "client_cpu_ms_per_run": round(self.per_run(self.client_cpu_s), 2) if self.completed else None,
                "errors": self.errors, "not_complete": self.not_complete, "in_flight_max": self.in_flight_max}


# -- clients ----------------------------------------------------------------------------------

CLIENTS = ("start-and-wait", "wait", "poll")


async def ended(client: Any, auth: dict[str, str], run: dict[str, Any], how: str, deadline: float) -> dict[str, Any]:
    """The run once it ended: one long wait at a time (``?wait=``), or polling."""
    while run["state"] not in TERMINAL and time.monotonic() <= deadline:
        answer = await client.get(f"/api/runs/{run['id']}", headers=auth,
                                  params=None if how == "poll" else {"wait": 30})
        answer.raise_for_status()
        run = dict(answer.json())
        if how == "poll" and run["state"] not in TERMINAL:
            await asyncio.sleep(0.02)
    return run


async def client_loop(client: Any, token: str, packet: dict[str, Any], adapter: dict[str, Any],
                      how: str, window: tuple[float, float], level: Level, flight: list[int]) -> None:
    start, end = window
    auth = {"Authorization": f"Bearer {token}"}
    while time.monotonic() < end:
        counted = time.monotonic() >= start
        posted = time.monotonic()
        # in flight from the start request on: with start-and-wait the run lives inside it
        flight[0] += 1
        level.in_flight_max = max(level.in_flight_max, flight[0])
        try:
            await one_run(client, auth, packet, adapter, how, (counted, posted, end), level)
        finally:
            flight[0] -= 1


async def one_run(client: Any, auth: dict[str, str], packet: dict[str, Any], adapter: dict[str, Any],
                  how: str, timing: tuple[bool, float, float], level: Level) -> None:
    """Start one run and wait for its end, counting what happened in ``level``."""
    import httpx

    counted, posted, end = timing
    try:
        answer = await client.post("/api/runs", headers=auth, json={"packet": packet, "adapter": adapter},
                                   params={"wait": 30} if how == "start-and-wait" else None)
    except httpx.HTTPError as exc:
        level.error(type(exc).__name__)
        await asyncio.sleep(0.1)
        return
    level.offered += counted
    if answer.status_code == 429:
        level.refused += counted
        await asyncio.sleep(float(answer.headers.get("Retry-After", 1)))
        return
    if answer.status_code != 201:
        level.error(f"HTTP {answer.status_code}")
        await asyncio.sleep(0.1)
        return
    level.accepted += counted
    try:
        run = await ended(client, auth, dict(answer.json()), how, posted + 120)
    except httpx.HTTPError as exc:
        level.error(type(exc).__name__)
        return
    if counted and time.monotonic() <= end:
        level.completed += 1
        level.latencies.append(time.monotonic() - posted)
        level.not_complete += run["state"] != "COMPLETE"


async def drive(base_url: str, tokens: list[str], clients: int, seconds: float, how: str,
                adapter: dict[str, Any], pids: list[int]) -> Level:
    """``clients`` clients (one connection each, in one pool) for a warm-up and ``seconds``."""
    import httpx

    level = Level(clients=clients, seconds=seconds)
    start = time.monotonic() + WARM_UP_S
    end = start + seconds
    flight = [0]
    packet = one_turn_packet()

    async def measure_cpu() -> None:
        await asyncio.sleep(max(0.0, start - time.monotonic()))
        before, client_before = cpu_seconds(pids), time.process_time()
        await asyncio.sleep(max(0.0, end - time.monotonic()))
        level.cpu_s = cpu_seconds(pids) - before
        level.client_cpu_s = time.process_time() - client_before

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base_url, timeout=60, limits=limits) as client:
        await asyncio.gather(measure_cpu(), *(client_loop(client, tokens[index], packet, adapter, how,
                                                          (start, end), level, flight)
                                              for index in range(clients)))
    return level


# -- the deployments ----------------------------------------------------------------------------

def setup_users(count: int) -> list[str]:
    """``count`` composers, each with an API token (in this process's Django, on the server's database)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from delegations.models import APIToken

    composers = Group.objects.get_or_create(name="composers")[0]
    tokens = []
    for index in range(count):
        user = get_user_model().objects.create_user(username=f"probe{index}-{os.getpid()}")
        user.groups.add(composers)
        tokens.append(APIToken.issue(user=user, name="probe")[1])
    return tokens


def add_history(count: int) -> None:
    """``count`` finished root runs with their events, as an installation in use has (a
    fresh database hid a query that went through every run ever made)."""
    if not count:
        return
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from delegations.models import Run, RunEvent
    from delegations.protocol.sessions import new_run_id

    owner = get_user_model().objects.create_user(username=f"history-{os.getpid()}")
    packet, done = one_turn_packet("history"), timezone.now()
    result = {"status": "SUCCESS", "output_payload": {"answer": 42}}
    for start in range(0, count, 1000):
        ids = [new_run_id() for _ in range(min(1000, count - start))]
        runs = [Run(id=run_id, root_id=run_id, owner=owner, packet=packet, goal=packet["goal"], label="history",
                    state="COMPLETE", result=result, finished_at=done, last_seq=1)
                for run_id in ids]
        Run.objects.bulk_create(runs)
        RunEvent.objects.bulk_create(RunEvent(run=run, seq=1, type="result", data=result) for run in runs)
    print(f"history: {count} finished runs", flush=True)


def django_on(env: dict[str, str]) -> None:
    for key in ("HANDOFF_DATA_DIR", "DATABASE_URL", "SECRET_KEY"):
        if key in env:
            os.environ[key] = env[key]
        else:
            os.environ.pop(key, None)
    os.environ.pop("REDIS_URL", None)          # this process only reads and writes the database
    os.environ.pop("HANDOFF_TASK_BACKEND", None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "handoff_site.settings"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()


class EmbeddedServer:
    """`manage.py serve` as `make run` starts it, on a throwaway SQLite database."""

    def __init__(self, folder: Path, extra: dict[str, str] | None = None, *, processes: int = 1) -> None:
        self.processes = processes
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        keep = ("PATH", "HOME", "LANG", "TMPDIR", "VIRTUAL_ENV")
        self.env = {**{key: os.environ[key] for key in keep if key in os.environ},
                    "HANDOFF_DATA_DIR": str(folder), "SECRET_KEY": "load-probe-secret-not-for-production",
                    "LOG_LEVEL": "WARNING", **(extra or {})}
        self.log = (folder / "server.log").open("w")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=self.env, check=True)
        self.process = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(self.port),
                                         *(["--processes", str(self.processes)] if self.processes > 1 else [])],
                                        cwd=ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        wait_until(lambda: _healthy(self.url), 60, f"the server (see {self.log.name})")

    @property
    def pids(self) -> list[int]:
        """The server's process and, with ``--processes``, the ones it started."""
        assert self.process is not None
        pid = self.process.pid
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            children = []
        return [pid, *(int(child) for child in children)]

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log.close()


def _healthy(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/api/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def wait_until(check: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not come up within {seconds:g} s")


def embedded(args: argparse.Namespace) -> list[tuple[str, Level]]:
    folder = Path(tempfile.mkdtemp(prefix="handoff-probe-"))
    server = EmbeddedServer(folder, processes=args.processes)
    results = []
    try:
        server.start()
        django_on(server.env)
        levels = [int(count) for count in args.clients.split(",")]
        tokens = setup_users(max(levels))
        add_history(args.history)
        adapter = {"name": "scripted", "config": ONE_TURN}
        for clients in levels:
            level = asyncio.run(drive(server.url, tokens, clients, args.seconds, args.client, adapter, server.pids))
            processes = f", {args.processes} processes" if args.processes > 1 else ""
            results.append((f"embedded{processes}, {clients} client{'s' if clients > 1 else ''}", level))
            report(*results[-1], args)
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return results


def scaleout(args: argparse.Namespace) -> list[tuple[str, Level]]:
    from tests.benchmarks.load_scaleout import drop_database, throwaway_database

    if not args.database_url:
        raise SystemExit("--mode scaleout needs --database-url postgres://...@127.0.0.1:PORT/DB")
    database_url, name = throwaway_database(args.database_url)
    results = []
    try:
        django_on({"DATABASE_URL": database_url, "SECRET_KEY": "load-probe-secret-not-for-production"})
        from django.core.management import call_command

        from tests.scaleout.conftest import ScaleOutStack

        call_command("migrate", verbosity=0)
        clients = int(args.clients.split(",")[-1])
        tokens = setup_users(clients)
        adapter = {"name": "scripted", "config": ONE_TURN}
        for workers in (int(count) for count in args.workers.split(",")):
            folder = Path(tempfile.mkdtemp(prefix=f"handoff-probe-{workers}w-"))
            stack = ScaleOutStack(folder, database_url, "load-probe-secret-not-for-production", 10)
            stack.env["LOG_LEVEL"] = "WARNING"
            try:
                stack.start(workers=workers)
                pids = [stack.server.pid, *(worker.pid for worker in stack.workers)] if stack.server else []
                level = asyncio.run(drive(stack.url, tokens, clients, args.seconds, args.client, adapter, pids))
                results.append((f"scale-out, {workers} worker{'s' if workers > 1 else ''}, {clients} clients",
                                level))
                report(*results[-1], args)
            finally:
                stack.stop()
                shutil.rmtree(folder, ignore_errors=True)
    finally:
        from django.db import connections

        connections.close_all()
        drop_database(args.database_url, name)
    return results


def slow(args: argparse.Namespace) -> list[tuple[str, Level]]:
    port = free_port()
    model = subprocess.Popen([sys.executable, "-m", "uvicorn", "tests.benchmarks.slow_model:app", "--port",
                              str(port), "--log-level", "warning", "--backlog", "4096"], cwd=ROOT,
                             env={**os.environ, "SLOW_MODEL_LATENCY_MS": str(args.latency_ms)})
    folder = Path(tempfile.mkdtemp(prefix="handoff-probe-slow-"))
    # many runs of one owner at once: the owner's lane and backlog bounds are not what is measured
    server = EmbeddedServer(folder, {"OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1", "OPENAI_API_KEY": "probe-key",
                                     "HANDOFF_LANE_SIZE": str(args.in_flight * 2),
                                     "HANDOFF_MAX_PENDING_RUNS_PER_OWNER": str(args.in_flight * 2),
                                     "HANDOFF_MAX_PENDING_RUNS": str(args.in_flight * 4)})
    results = []
    try:
        server.start()
        django_on(server.env)
        tokens = setup_users(args.in_flight)
        adapter = {"name": "openai", "config": {"model": "probe"}}
        rss_before = resident_mb(server.pids[0])
        level = asyncio.run(drive(server.url, tokens, args.in_flight, args.seconds, args.client, adapter, server.pids))
        rss_during = resident_mb(server.pids[0])
        results.append((f"slow model ({args.latency_ms} ms), {args.in_flight} clients", level))
        report(*results[-1], args)
        ideal = level.in_flight_max / (args.latency_ms / 1000)
        print(f"   in flight at most {level.in_flight_max}; completed {level.completed / level.seconds:.1f}/s "
              f"against in-flight / latency {ideal:.1f}/s; server RSS {rss_before:.0f} MB idle, "
              f"{rss_during:.0f} MB at the window's end", flush=True)
    finally:
        server.stop()
        model.terminate()
        model.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)
    return results


def report(label: str, level: Level, args: argparse.Namespace) -> None:
    print(json.dumps(level.as_dict(label)) if args.json else level.line(label), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mode", choices=("embedded", "scaleout", "slow"), default="embedded")
    parser.add_argument("--clients", default="1,8,32", help="concurrent clients per level")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured window per level")
    parser.add_argument("--workers", default="1,2,4", help="scale-out: RQ worker counts")
    parser.add_argument("--database-url", default=os.environ.get("HANDOFF_TEST_POSTGRES_URL", ""),
                        help="scale-out: a PostgreSQL server on loopback")
    parser.add_argument("--latency-ms", type=int, default=500, help="slow: the model's answer time")
    parser.add_argument("--in-flight", type=int, default=250, help="slow: runs kept going at once")
    parser.add_argument("--client", choices=CLIENTS, default=CLIENTS[0],
                        help="how a client waits for its run: in its POST (?wait=30), with a GET ?wait=30, "
                             "or polling GET every 20 ms")
    parser.add_argument("--history", type=int, default=0,
                        help="embedded: finished runs in the database before the first level")
    parser.add_argument("--processes", type=int, default=1,
                        help="embedded: server processes (serve --processes N)")
    parser.add_argument("--json", action="store_true", help="one JSON line per level")
    args = parser.parse_args()
    {"embedded": embedded, "scaleout": scaleout, "slow": slow}[args.mode](args)


if __name__ == "__main__":
    main()
