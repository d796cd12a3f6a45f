"""Load on the scale-out stack: 50 run trees in flight and 200 websocket viewers for 60 s,
beside 20 clients starting runs as fast as the server takes them, with two RQ workers and
then with one; prints runs accepted, refused (429) and completed per second, the time from
creation to finish, live event delivery p50/p99, errors, and whether every viewer received
exactly the events stored for its run.

    DATABASE_URL=postgres://handoff@127.0.0.1:5451/handoff \\
        .venv/bin/python tests/benchmarks/load_scaleout.py [--seconds 60] [--workers 2,1] [--clients 20]

DATABASE_URL names a PostgreSQL server on loopback; the script creates a database of its
own on it (dropped at the end) and starts, per worker count, the stack the scale-out tests
use (tests/scaleout/conftest.py): a Redis of its own, ``manage.py serve --no-worker`` and
the RQ workers, all on free loopback ports and stopped by PID. Not part of CI.

The load, per worker count: 50 slots, each starting a depth-2 tree (the root delegates to
two subagents, each to one leaf; every agent takes one scripted model turn of
``--delay-ms``), watched by 4 viewers from ``after=0`` until the root's ``result``; when
it ends the slot starts the next tree, until the window closes. Runs started in the window
are then drained (bounded) and checked. Delivery latency is the time from an event's
``ts`` (stored by the worker) to its arrival at a viewer, for events sent live (after the
viewer's ``synced``), on one machine's clock.

Beside them, ``--clients`` clients of another owner start the same tree over and over
without waiting for it, as a client faster than the workers would; refused with 429, a
client waits the Retry-After it was given. Their owner's runs waiting to start are bounded
(HANDOFF_MAX_PENDING_RUNS_PER_OWNER, 50), so the backlog stays bounded too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SLOTS = 50
VIEWERS_PER_SLOT = 4          # 200 viewers
RUN_TIMEOUT_S = 180           # a tree queued behind 49 others on one worker, then run
TERMINAL = {"COMPLETE", "RETURNED", "FAILED", "TIMEOUT", "REJECTED", "CANCELLED"}


def throwaway_database(server_url: str) -> tuple[str, str]:
    """Create a database of this script's own on the loopback PostgreSQL of ``server_url``;
    returns (its URL, its name)."""
    import psycopg

    parts = urlsplit(server_url)
    if parts.scheme not in ("postgres", "postgresql") or parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("DATABASE_URL must name a PostgreSQL server on loopback (postgres://...@127.0.0.1:PORT/DB)")
    name = f"handoff_load_{os.getpid()}"
    with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(parts._replace(path=f"/{name}")), name


def drop_database(server_url: str, name: str) -> None:
    import psycopg

    parts = urlsplit(server_url)
    with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Load:
    """What one worker count's window measured."""

    workers: int
    window_s: float
    started_at: float = 0.0       # wall clock, when the window opened
    latencies: list[float] = field(default_factory=list)
    finished_in_window: int = 0
    agent_runs_in_window: int = 0
    roots: list[str] = field(default_factory=list)
    received: dict[str, list[dict[str, list[int]]]] = field(default_factory=dict)
    http_5xx: int = 0
    http_other_errors: int = 0
    viewer_errors: list[str] = field(default_factory=list)
    not_complete: list[str] = field(default_factory=list)
    lost: int = 0
    lost_example: str = ""
    duplicated: int = 0
    server_errors: int = 0
    accepted: int = 0             # 201s, slots and flooding clients
    refused: int = 0              # 429s (the backlog bound)
    retry_after: list[float] = field(default_factory=list)
    flooded: list[str] = field(default_factory=list)
    completed_in_window: int = 0  # root runs that finished inside the window
    creation_to_finish: list[float] = field(default_factory=list)
    unfinished: int = 0
    connection_errors: int = 0    # flooding clients' requests on a connection the server closed
    other_statuses: dict[int, int] = field(default_factory=dict)


async def watch(ws_url: str, headers: dict[str, str], root_id: str, load: Load) -> dict[str, list[int]]:
    """One viewer: the run tree's events from the start until the root's result."""
    from websockets.asyncio.client import connect

    received: dict[str, list[int]] = {}
    synced = False
    async with connect(f"{ws_url}/ws/runs/{root_id}/?after=0", additional_headers=headers,
                       open_timeout=30, max_size=None, ping_interval=None) as socket:
        async for raw in socket:
            frame = json.loads(raw)
            arrived = time.time()
            for event in frame if isinstance(frame, list) else [frame]:
                if event.get("type") == "synced":
                    synced = True
                    continue
                if "seq" not in event:
                    continue
                received.setdefault(event["run_id"], []).append(event["seq"])
                if synced:
                    load.latencies.append(arrived - event["ts"])
                if event["run_id"] == root_id and event["type"] == "result":
                    return received  # the root's last event
    raise ConnectionError(f"the socket of run {root_id} closed before the root's result")


async def slot(client: Any, ws_url: str, ws_headers: dict[str, str], config: dict[str, Any],
               packet: dict[str, Any], load: Load, window_end: float) -> None:
    while time.monotonic() < window_end:
        response = await client.post("/api/runs", json={"packet": packet, "adapter": {
            "name": "scripted", "config": config}})
        if response.status_code >= 500:
            load.http_5xx += 1
            continue
        if response.status_code != 201:
            load.http_other_errors += 1
            load.other_statuses[response.status_code] = load.other_statuses.get(response.status_code, 0) + 1
            await asyncio.sleep(0.5)
            continue
        load.accepted += 1
        root_id = str(response.json()["id"])
        load.roots.append(root_id)
        viewers = [asyncio.ensure_future(watch(ws_url, ws_headers, root_id, load))
                   for _ in range(VIEWERS_PER_SLOT)]
        done, pending = await asyncio.wait(viewers, timeout=RUN_TIMEOUT_S)
        for viewer in pending:
            viewer.cancel()
            load.viewer_errors.append(f"{root_id}: no result within {RUN_TIMEOUT_S} s")
        for viewer in done:
            if viewer.exception() is not None:
                load.viewer_errors.append(f"{root_id}: {viewer.exception()!r}")
            else:
                load.received.setdefault(root_id, []).append(viewer.result())
        if time.monotonic() <= window_end and not pending:
            load.finished_in_window += 1


async def flood(client: Any, config: dict[str, Any], packet: dict[str, Any], load: Load,
                window_end: float) -> None:
    """A client starting runs as fast as the server accepts them, waiting out each 429."""
    import httpx

    while time.monotonic() < window_end:
        try:
            response = await client.post("/api/runs", json={"packet": packet, "adapter": {
                "name": "scripted", "config": config}})
        except httpx.TransportError:
            # a kept-alive connection the server closed while the client waited out a 429
            load.connection_errors += 1
            continue
        if response.status_code == 201:
            load.accepted += 1
            load.flooded.append(str(response.json()["id"]))
        elif response.status_code == 429:
            load.refused += 1
            wait = float(response.headers.get("Retry-After", 1))
            load.retry_after.append(wait)
            await asyncio.sleep(min(wait, max(0.0, window_end - time.monotonic())))
        elif response.status_code >= 500:
            load.http_5xx += 1
        else:
            load.http_other_errors += 1
            load.other_statuses[response.status_code] = load.other_statuses.get(response.status_code, 0) + 1
            await asyncio.sleep(0.5)


async def drive(base_url: str, token: str, flood_token: str, cookie: str, load: Load) -> None:
    import httpx

    from tests.delegations import scripts
    from tests.scaleout.runs import CAPABILITIES, MAX_ITERATIONS, ROOT_BUDGET, slow_tree

    config = slow_tree(children=2, grandchildren=1, delay_ms=ARGS.delay_ms, turns=1)
    packet = scripts.packet(capabilities=CAPABILITIES, max_iterations=MAX_ITERATIONS, allow_nested=True,
                            budget=ROOT_BUDGET)
    ws_url = base_url.replace("http://", "ws://")
    ws_headers = {"Cookie": cookie, "Origin": base_url}
    limits = httpx.Limits(max_connections=SLOTS, max_keepalive_connections=SLOTS)
    flood_limits = httpx.Limits(max_connections=max(1, ARGS.clients))
    async with httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {token}"},
                                 timeout=30, limits=limits) as client, \
            httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {flood_token}"},
                              timeout=30, limits=flood_limits) as flooder:
        load.started_at = time.time()
        window_end = time.monotonic() + load.window_s
        await asyncio.gather(*(slot(client, ws_url, ws_headers, config, packet, load, window_end)
                               for _ in range(SLOTS)),
                             *(flood(flooder, config, packet, load, window_end) for _ in range(ARGS.clients)))


def check(load: Load) -> None:
    """Every viewer's seqs against the stored ones; runs that did not complete."""
    from delegations.models import Run, RunEvent

    for root_id in load.roots:
        tree = list(Run.objects.filter(root_id=root_id).values_list("state", "error"))
        if len(tree) != 5 or any(state != "COMPLETE" for state, _ in tree):
            load.not_complete.append(f"{root_id}: {tree}")
        stored: dict[str, list[int]] = {}
        for run_id, seq in RunEvent.objects.filter(run__root_id=root_id).order_by("run_id", "seq") \
                .values_list("run_id", "seq"):
            stored.setdefault(run_id, []).append(seq)
        for received in load.received.get(root_id, []):
            for run_id, seqs in stored.items():
                got = received.get(run_id, [])
                missing = set(seqs) - set(got)
                load.lost += len(missing)
                if missing and not load.lost_example:
                    load.lost_example = str(list(RunEvent.objects.filter(
                        run_id=run_id, seq__in=missing).values_list("run_id", "seq", "type", "data")))
                load.duplicated += len(got) - len(set(got))
    load.agent_runs_in_window = load.finished_in_window * 5
    window_end = load.started_at + load.window_s
    for created, finished in Run.objects.filter(pk__in=[*load.roots, *load.flooded]).values_list(
            "created_at", "finished_at"):
        if finished is None:
            load.unfinished += 1
            continue
        load.creation_to_finish.append((finished - created).total_seconds())
        load.completed_in_window += finished.timestamp() <= window_end


def drain_flooded(load: Load) -> None:
    """Wait (bounded) for the flooding clients' runs to finish; the slots waited for theirs."""
    from delegations.models import Run

    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline and Run.objects.filter(
            pk__in=load.flooded).exclude(state__in=TERMINAL).exists():
        time.sleep(1)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(workers: int, database_url: str) -> Load:
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.test import Client
    from django.utils import timezone

    from delegations.models import APIToken, Run
    from tests.scaleout.conftest import ScaleOutStack

    composers = Group.objects.get_or_create(name="composers")[0]
    user = get_user_model().objects.create_user(username=f"load{workers}", password="x-load-1234")
    user.groups.add(composers)
    _, token = APIToken.issue(user=user, name="load")
    flooding = get_user_model().objects.create_user(username=f"flood{workers}", password="x-load-1234")
    flooding.groups.add(composers)
    _, flood_token = APIToken.issue(user=flooding, name="flood")
    browser = Client()
    browser.force_login(user)
    cookie = f"sessionid={browser.cookies['sessionid'].value}"

    workdir = Path(tempfile.mkdtemp(prefix=f"handoff-load-{workers}w-"))
    stack = ScaleOutStack(workdir, database_url, settings.SECRET_KEY, settings.HANDOFF_LEASE_SECONDS)
    load = Load(workers=workers, window_s=ARGS.seconds)
    try:
        stack.start(workers=workers)
        asyncio.run(drive(stack.url, token, flood_token, cookie, load))
        drain_flooded(load)
        check(load)
        log = stack.log("server")
        load.server_errors = log.count("ERROR django.request") + log.count("Exception in ASGI application")
    finally:
        # nothing of this window may still execute when the stack stops
        Run.objects.exclude(state__in=TERMINAL).update(cancel_requested_at=timezone.now())
        stack.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return load


def report(load: Load) -> None:
    viewers = sum(len(v) for v in load.received.values())
    print(f"\n== {load.workers} RQ worker(s), {load.window_s:g} s window, {SLOTS} trees in flight, "
          f"{SLOTS * VIEWERS_PER_SLOT} viewers ==")
    print(f"trees completed in the window  {load.finished_in_window} "
          f"({load.finished_in_window / load.window_s:.2f} trees/s, "
          f"{load.agent_runs_in_window / load.window_s:.2f} runs/s counting every agent of the 5 in a tree)")
    print(f"trees started / checked        {len(load.roots)} / {len(load.received)} "
          f"(viewer sessions checked: {viewers})")
    window = load.window_s
    print(f"runs accepted / refused (429)  {load.accepted / window:.2f} / {load.refused / window:.2f} per s "
          f"({load.accepted} / {load.refused}; {ARGS.clients} flooding clients, Retry-After median "
          f"{percentile(load.retry_after, 0.5):g} s)")
    print(f"root runs completed            {load.completed_in_window / window:.2f} per s in the window "
          f"({load.completed_in_window}; {load.unfinished} not finished after the drain)")
    print(f"creation to finish p50 / p99 / max  {percentile(load.creation_to_finish, 0.5):.1f} / "
          f"{percentile(load.creation_to_finish, 0.99):.1f} / "
          f"{(max(load.creation_to_finish) if load.creation_to_finish else float('nan')):.1f} s")
    print(f"live events delivered          {len(load.latencies)}")
    print(f"delivery latency p50 / p99 / max  {percentile(load.latencies, 0.5) * 1000:.1f} / "
          f"{percentile(load.latencies, 0.99) * 1000:.1f} / "
          f"{(max(load.latencies) if load.latencies else float('nan')) * 1000:.1f} ms")
    print(f"lost events / duplicated       {load.lost} / {load.duplicated}"
          + (f" (first lost: {load.lost_example})" if load.lost_example else ""))
    print(f"HTTP 5xx / other HTTP errors   {load.http_5xx} / {load.http_other_errors} "
          f"(closed connections, retried: {load.connection_errors}; other statuses: {load.other_statuses})")
    print(f"server errors logged           {load.server_errors}")
    print(f"viewer errors                  {len(load.viewer_errors)}"
          + (f" (first: {load.viewer_errors[0]})" if load.viewer_errors else ""))
    print(f"trees not COMPLETE             {len(load.not_complete)}"
          + (f" (first: {load.not_complete[0]})" if load.not_complete else ""))


def main() -> int:
    server_url = os.environ.get("DATABASE_URL", "")
    database_url, name = throwaway_database(server_url)
    os.environ.update({"DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "handoff_site.settings",
                       "ALLOWED_HOSTS": "testserver,127.0.0.1", "LOG_LEVEL": "WARNING",
                       # the owner's lane (8 trees at once by default) is not what is measured
                       "HANDOFF_LANE_SIZE": str(SLOTS)})
    os.environ.pop("REDIS_URL", None)  # this process talks only to the database
    os.environ.pop("HANDOFF_TASK_BACKEND", None)
    try:
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        results = [measure(int(count), database_url) for count in ARGS.workers.split(",")]
    finally:
        from django.db import connections

        connections.close_all()
        drop_database(server_url, name)
    for load in results:
        report(load)
    if len(results) == 2:
        few, many = sorted(results, key=lambda r: r.workers)
        if few.finished_in_window:
            print(f"\nthroughput with {many.workers} workers / with {few.workers}: "
                  f"{many.finished_in_window / few.finished_in_window:.2f}x")
    failed = any(r.lost or r.duplicated or r.http_5xx or r.server_errors or r.viewer_errors or r.not_complete
                 or r.unfinished for r in results)
    return 1 if failed else 0


parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--seconds", type=float, default=60, help="the load window per worker count")
parser.add_argument("--workers", default="2,1", help="RQ worker counts to measure, in order")
parser.add_argument("--delay-ms", type=int, default=20, help="each scripted model turn's delay")
parser.add_argument("--clients", type=int, default=20, help="clients starting runs without waiting for them")
ARGS = parser.parse_args() if __name__ == "__main__" else parser.parse_args([])

if __name__ == "__main__":
    sys.exit(main())
