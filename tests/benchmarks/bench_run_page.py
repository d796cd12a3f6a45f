"""The run page of a 1,000-subagent tree: server time, time to interactive in Chromium, and
the browser's main thread while 100 events/s arrive live.

Run: `.venv/bin/python tests/benchmarks/bench_run_page.py [--subagents N] [--rounds N]
[--rate N] [--seconds N] [--skip-browser] [--profile]`.

It builds a throwaway SQLite site (``throwaway_site``) holding two trees of 1 root + N
subagents (default 1,000: the root delegates to 10 children, each of those to ~99
grandchildren), written in bulk: a finished one (COMPLETE, a few FAILED, started and
finished over a few minutes) and a running one (every run WORKING). Each run has ~7
events (state changes, streamed text, a model call with tokens and cost, a tool call and
its result, the end) and each parent a ``child`` event per subagent.

1. **Server time**: GET ``/runs/<finished root>/`` through Django's test client as the
   owner (the whole middleware stack, the ORM, the snapshot, rendering; no network),
   ``--rounds`` times after a warm-up: median, p95, queries, HTML size. Target < 1 s.
2. **To interactive**: ``manage.py serve --no-worker`` on a free loopback port against the
   same database, and Chromium (Playwright) logged in as the owner, loading the page
   ``--rounds`` times (after a warm-up load): from the performance API the navigation's
   ``responseStart``, ``domInteractive``, ``domContentLoadedEventEnd``, ``loadEventEnd``
   and the ``run-page-ready`` mark that ``static/js/run_live.js`` sets when its set-up is
   done (keys and clicks work). Target: the mark < 2 s.
3. **Live**: the running tree's page open, socket live; for ``--seconds`` this process
   stores ``--rate`` events/s (model_call, tool_call, tool_result, log) into random runs
   of the tree with ``eventlog.persist_batch`` (the runner's sink's writer) and publishes
   them with ``feed.publish_events_sync`` at most every 15 ms (the sink's
   PUBLISH_SECONDS), through a Redis channel layer shared with the server (a
   ``redis-server`` of its own on a free loopback port; both processes get REDIS_URL, so
   ``handoff_site.settings`` configures channels_redis for them). The main thread's busy
   share = task time / wall time over that window, from CDP ``Performance.getMetrics``
   (``TaskDuration``, sampled every second) and from a ``longtask`` PerformanceObserver
   (tasks over 50 ms only: a lower bound). Target < 30 %.

Prints a block per part and one JSON line with every figure. Only 127.0.0.1 is used.
"""

# ruff: noqa: E402  (the arguments decide REDIS_URL, which must be set before Django is)
from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--subagents", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--rate", type=int, default=100, help="events per second in the live part")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the live part")
    parser.add_argument("--skip-browser", action="store_true", help="only the server time (part 1)")
    parser.add_argument("--profile", action="store_true",
                        help="also profile one server render (cProfile) and print the top costs")
    parser.add_argument("--trace", action="store_true",
                        help="also trace Chromium's main thread during the live part and print where its time goes")
    return parser.parse_args()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


ARGS = _arguments() if __name__ == "__main__" else argparse.Namespace(skip_browser=True)
REDIS_PORT = 0 if ARGS.skip_browser else _free_port()
if REDIS_PORT:
    # before Django is set up: the settings make the channel layer channels_redis on it, here
    # and in the server process (which inherits the environment)
    os.environ["REDIS_URL"] = f"redis://127.0.0.1:{REDIS_PORT}/0"
else:
    os.environ.pop("REDIS_URL", None)

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.throwaway_site import DATA_DIR, ROOT, time_page  # first: it sets up Django

# isort: split

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from delegations.accounts.roles import COMPOSERS
from delegations.live import feed
from delegations.models import Run, RunEvent
from delegations.runs.eventlog import PendingCheckpoint, PendingEvent, WriterMemory, persist_batch

SERVER_TARGET_MS = 1000.0
READY_TARGET_MS = 2000.0
BUSY_TARGET_PERCENT = 30.0
PASSWORD = "bench-password-123"
CHILDREN = 10
FAIL_EVERY = 97          # every 97th subagent of the finished tree FAILED
PUBLISH_SECONDS = 0.015  # delegations.runs.sink.PUBLISH_SECONDS


def pct(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(share * len(ordered)) - 1)]


# -- the trees ------------------------------------------------------------------------------

def _shape(subagents: int) -> list[int]:
    """Grandchildren per child: the root has min(10, N) children, the rest split evenly."""
    children = min(CHILDREN, subagents)
    rest = subagents - children
    return [rest // children + (1 if index < rest % children else 0) for index in range(children)]


def build_tree(owner: Any, subagents: int, *, finished: bool, seed: int) -> Run:
    """1 root + ``subagents`` runs and their events, in bulk (rows as the event log writer
    would have left them: last_seq, usage rolled up to the ancestors, states and times)."""
    rng = random.Random(seed)
    now = timezone.now()
    base = now - timedelta(minutes=12 if finished else 4)
    tag = "done" if finished else "live"
    runs: list[Run] = []
    own_usage: dict[str, dict[str, Any]] = {}
    spans: dict[str, tuple[datetime, datetime | None]] = {}

    def new_run(label: str, parent: Run | None, started: datetime, seconds: float, failed: bool) -> Run:
        depth = parent.depth + 1 if parent else 0
        run = Run(owner=owner, label=label, goal=f"Research {label} and answer with JSON",
                  subagent_type="coordinator" if depth < 2 else "researcher",
                  packet={"goal": f"Research {label}", "label": label}, input_hash="0" * 64,
                  adapter_name="scripted", parent=parent, depth=depth,
                  created_at=started - timedelta(milliseconds=200), started_at=started,
                  budget={"max_model_calls": 20 if depth == 2 else 400,
                          "max_tokens": 60_000 if depth == 2 else 8_000_000,
                          "max_cost_usd": 1.0 if depth == 2 else 150.0, "max_runtime_s": 900},
                  allocated_at=started if depth == 0 else None)
        run.session_key = f"agent:{run.subagent_type}:subagent:{run.pk}"
        run.root_id = parent.root_id if parent else run.pk
        ended = started + timedelta(seconds=seconds) if finished else None
        if finished:
            run.state, run.finished_at = ("FAILED" if failed else "COMPLETE"), ended
        else:
            run.state = "WORKING"
        spans[run.pk] = (started, ended)
        tokens_in, tokens_out = rng.randint(1_500, 9_000), rng.randint(200, 1_800)
        own_usage[run.pk] = {"model_calls": 1, "input_tokens": tokens_in, "output_tokens": tokens_out,
                             "cost_usd": round((tokens_in * 3 + tokens_out * 15) / 1e6, 6),
                             "runtime_s": round(seconds, 3)}
        runs.append(run)
        return run

    total = 5.5 * 60
    root = new_run(f"coordinator-{tag}", None, base, total, failed=False)
    number = 0
    for index, grandchildren in enumerate(_shape(subagents)):
        child_start = base + timedelta(seconds=2 + index * 1.5)
        child = new_run(f"part-{index}", root, child_start, total - 10 - index * 1.5, failed=False)
        for sub in range(grandchildren):
            number += 1
            started = child_start + timedelta(seconds=1 + sub * 2.5 + rng.random())
            new_run(f"part-{index}-{sub}", child, started, rng.uniform(8, 60),
                    failed=number % FAIL_EVERY == 0)

    # usage rolled up the tree (model_call charges the run and its ancestors), children first
    by_id = {run.pk: run for run in runs}
    for run in runs:
        run.usage = dict(own_usage[run.pk])
    for run in sorted(runs, key=lambda r: -r.depth):
        if run.parent_id:
            parent_usage = by_id[run.parent_id].usage
            for key in ("model_calls", "input_tokens", "output_tokens", "cost_usd"):
                parent_usage[key] = parent_usage[key] + run.usage[key]
    for run in runs:
        run.usage["total_tokens"] = run.usage["input_tokens"] + run.usage["output_tokens"]
        run.usage["cost_usd"] = round(run.usage["cost_usd"], 6)

    events: list[RunEvent] = []
    children_of: dict[str, list[Run]] = {}
    for run in runs:
        if run.parent_id:
            children_of.setdefault(run.parent_id, []).append(run)
    for run in runs:
        started, ended = spans[run.pk]
        stamps = iter(started + timedelta(seconds=step * 0.7) for step in range(10_000))
        seq = 0

        def add(kind: str, data: dict[str, Any], at: datetime | None = None, *, run: Run = run,
                stamps: Any = stamps) -> None:
            nonlocal seq
            seq += 1
            events.append(RunEvent(run=run, seq=seq, type=kind, data=data, ts=at or next(stamps)))

        usage = own_usage[run.pk]
        add("state", {"state": "ACCEPTED", "previous": "PENDING"})
        add("state", {"state": "WORKING", "previous": "ACCEPTED"})
        add("text", {"delta": f"Looking into {run.label}: "})
        add("text", {"delta": "reading the sources and comparing the figures."})
        add("model_call", {"iteration": 1, "model": "claude-sonnet-4", "input_tokens": usage["input_tokens"],
                           "output_tokens": usage["output_tokens"], "cost_usd": usage["cost_usd"],
                           "duration_ms": rng.randint(800, 6_000), "tool_calls": 1})
        call_id = f"call_{run.pk[:8]}"
        if run.pk in children_of:
            for child in children_of[run.pk]:
                add("child", {"child_run_id": child.pk, "label": child.label, "depth": child.depth,
                              "session_key": child.session_key, "budget": child.budget,
                              "capabilities": ["read_files"]}, child.created_at)
        else:
            add("tool_call", {"id": call_id, "name": "read_file", "arguments": {"path": f"notes/{run.label}.md"}})
            add("tool_result", {"id": call_id, "name": "read_file", "ok": True,
                                "result": {"size": rng.randint(200, 9_000), "lines": rng.randint(5, 200)}})
        if ended is None:
            add("text", {"delta": "Still working on it."})
        elif run.state == "FAILED":
            error = {"code": "ERR_TOOL_FAILED", "message": f"{run.label}: the source could not be read"}
            run.error = error
            run.result = {"status": "FAILURE", "summary": error["message"], "output_payload": None}
            add("error", error, ended)
            add("state", {"state": "FAILED", "previous": "WORKING"}, ended)
            add("result", {"state": "FAILED", "result": run.result, "criteria_report": None,
                           "usage": run.usage, "error": error}, ended)
        else:
            run.result = {"status": "SUCCESS", "summary": f"{run.label}: answer found",
                          "output_payload": {"answer": 42, "source": f"notes/{run.label}.md"}}
            add("state", {"state": "COMPLETE", "previous": "WORKING"}, ended)
            add("result", {"state": "COMPLETE", "result": run.result, "criteria_report": None,
                           "usage": run.usage}, ended)
        run.last_seq = seq

    Run.objects.bulk_create(runs, batch_size=500)
    RunEvent.objects.bulk_create(events, batch_size=2000)
    return root


# -- part 1: server time --------------------------------------------------------------------

def server_time(owner: Any, root: Run, rounds: int, profile: bool) -> dict[str, Any]:
    client = Client()
    client.force_login(owner)
    url = f"/runs/{root.pk}/"
    first = client.get(url)   # warm: templates compiled
    assert first.status_code == 200, first.status_code
    html = first.content.decode()
    assert html.count("data-tree-run=") >= root.descendants.count(), "the tree is not all on the page"
    median, p95, queries = time_page(client, url, rounds)
    figures = {"median_ms": round(median, 1), "p95_ms": round(p95, 1), "queries": queries,
               "html_kb": len(first.content) // 1024, "rounds": rounds}
    if profile:
        import cProfile
        import io
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        client.get(url)
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
        print(out.getvalue())
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(20)
        print(out.getvalue())
    return figures


# -- processes ------------------------------------------------------------------------------

class Processes:
    """Redis and the server, started on loopback ports and stopped by their PIDs."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="handoff-bench-procs-")
        self.started: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    def start(self, name: str, command: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = Path(self.folder) / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.started.append((name, process, log))
        return process

    def tail(self, name: str, lines: int = 30) -> str:
        for started, _, log in self.started:
            if started == name and log.exists():
                return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        for _, process, _ in reversed(self.started):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=5)
        shutil.rmtree(self.folder, ignore_errors=True)


def _wait_until(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not come up in {seconds:.0f} s")


def start_services(processes: Processes) -> str:
    import httpx
    import redis

    processes.start("redis", ["redis-server", "--bind", "127.0.0.1", "--port", str(REDIS_PORT), "--save", "",
                              "--appendonly", "no", "--dir", processes.folder, "--daemonize", "no"])
    client = redis.Redis(host="127.0.0.1", port=REDIS_PORT)
    _wait_until(lambda: bool(client.ping()), 15, "redis-server")
    client.close()
    port = _free_port()
    env = dict(os.environ)
    env.update({"HANDOFF_DATA_DIR": DATA_DIR, "REDIS_URL": os.environ["REDIS_URL"], "HANDOFF_TASK_BACKEND": "db",
                "DJANGO_SETTINGS_MODULE": "handoff_site.settings", "LOG_LEVEL": "WARNING"})
    env.pop("DATABASE_URL", None)
    # no embedded worker: nothing executes these runs (the running tree is fed by this process)
    processes.start("server", [sys.executable, "manage.py", "serve", "--port", str(port), "--no-worker"], env)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until(lambda: httpx.get(f"{url}/api/health", timeout=1).status_code == 200, 40, "manage.py serve")
    except RuntimeError:
        print(processes.tail("server"), file=sys.stderr)
        raise
    return url


# -- part 2: to interactive -----------------------------------------------------------------

TIMING_JS = """() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const mark = performance.getEntriesByName("run-page-ready")[0];
  return {response_start: nav.responseStart, dom_interactive: nav.domInteractive,
          dom_content_loaded: nav.domContentLoadedEventEnd, load: nav.loadEventEnd,
          ready: mark ? mark.startTime : null,
          nodes: document.getElementsByTagName("*").length};
}"""


def to_interactive(page: Any, url: str, rounds: int) -> dict[str, Any]:
    samples: list[dict[str, float]] = []
    for round_number in range(rounds + 1):   # the first load warms the server and the cache
        page.goto(url, wait_until="load")
        page.wait_for_function("() => performance.getEntriesByName('run-page-ready').length > 0 "
                               "&& performance.getEntriesByType('navigation')[0].loadEventEnd > 0")
        if round_number:
            samples.append(page.evaluate(TIMING_JS))
    figures: dict[str, Any] = {"rounds": rounds, "dom_nodes": int(samples[-1]["nodes"])}
    for name in ("response_start", "dom_interactive", "dom_content_loaded", "load", "ready"):
        values = [float(sample[name]) for sample in samples]
        figures[f"{name}_ms"] = round(statistics.median(values), 1)
        figures[f"{name}_p95_ms"] = round(pct(values, 0.95), 1)
    return figures


# -- part 3: live ---------------------------------------------------------------------------

COUNT_SOCKET_JS = """() => {
  window.__bench = {frames: 0, events: 0, chars: 0};
  const Native = window.WebSocket;
  window.WebSocket = function (url, protocols) {
    const socket = protocols === undefined ? new Native(url) : new Native(url, protocols);
    socket.addEventListener("message", (message) => {
      const data = String(message.data);
      window.__bench.frames += 1;
      window.__bench.chars += data.length;
      window.__bench.events += data.split('"seq":').length - 1;
    });
    return socket;
  };
  window.WebSocket.prototype = Native.prototype;
  Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
  performance.setResourceTimingBufferSize(5000);
}"""

START_WINDOW_JS = """() => {
  window.__bench.longtasks = [];
  window.__bench.events_before = window.__bench.events;
  window.__bench.rows = 0;   // rows the live view appended (it keeps the newest 500 only)
  new MutationObserver((changes) => changes.forEach((change) => {
    window.__bench.rows += [...change.addedNodes].filter((node) => node.nodeType === 1).length;
  })).observe(document.getElementById("run-timeline"), {childList: true});
  window.__bench.observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) window.__bench.longtasks.push(entry.duration);
  });
  window.__bench.observer.observe({type: "longtask"});
  window.__bench.started = performance.now();
  performance.clearResourceTimings();
}"""

END_WINDOW_JS = """() => {
  const bench = window.__bench;
  bench.observer.takeRecords().forEach((entry) => bench.longtasks.push(entry.duration));
  bench.observer.disconnect();
  return {longtasks: bench.longtasks, wall: performance.now() - bench.started};
}"""

RECEIVED_JS = """() => {
  const refreshes = performance.getEntriesByType("resource").filter((e) => e.name.includes("/live/"));
  return {events: window.__bench.events - window.__bench.events_before,
          frames: window.__bench.frames,
          rows: window.__bench.rows,
          refreshes: refreshes.length,
          refresh_ms: refreshes.map((e) => e.duration),
          refresh_server_ms: refreshes.map((e) => e.responseStart - e.requestStart),
          refresh_kb: refreshes.map((e) => e.transferSize / 1024),
          status: document.getElementById("live-status").dataset.status};
}"""

LIVE_KINDS = ("model_call", "tool_call", "tool_result", "log")


def inject(run_ids: list[str], rate: int, seconds: float, done: list[int]) -> None:
    """Store ``rate`` events/s into random runs of the tree for ``seconds``, as the runner's
    sink does: persisted in batches by persist_batch (one transaction each), the stored
    events published to the tree's groups at most every PUBLISH_SECONDS."""
    rng = random.Random(7)
    step: dict[str, int] = {}
    memory = WriterMemory()
    outbox: list[dict[str, Any]] = []
    texts: list[str] = []
    lineage: dict[str, list[str]] = {}
    started = time.monotonic()
    last_publish = 0.0
    sent = 0
    try:
        while True:
            elapsed = time.monotonic() - started
            due = min(int(elapsed * rate), int(seconds * rate)) - sent
            if due > 0:
                batch: list[PendingEvent | PendingCheckpoint] = []
                for _ in range(due):
                    run_id = rng.choice(run_ids)
                    turn = step.get(run_id, 0)
                    step[run_id] = turn + 1
                    kind = LIVE_KINDS[turn % len(LIVE_KINDS)]
                    call_id = f"live_{run_id[:6]}_{turn // 4}"
                    if kind == "model_call":
                        data: dict[str, Any] = {"iteration": 2 + turn // 4, "model": "claude-sonnet-4",
                                                "input_tokens": rng.randint(1_000, 8_000),
                                                "output_tokens": rng.randint(100, 900),
                                                "cost_usd": 0.012, "duration_ms": rng.randint(500, 4_000),
                                                "tool_calls": 1}
                    elif kind == "tool_call":
                        data = {"id": call_id, "name": "http_get",
                                "arguments": {"url": f"http://127.0.0.1/prices/{turn}.json"}}
                    elif kind == "tool_result":
                        data = {"id": call_id, "name": "http_get", "ok": True,
                                "result": {"status": 200, "bytes": rng.randint(100, 9_000)}}
                    else:
                        data = {"level": "info", "message": f"checked source {turn // 4}"}
                    batch.append(PendingEvent(run_id, kind, data, time.time()))
                stored = persist_batch(batch, memory)
                outbox += stored.events
                texts += stored.texts
                lineage.update(stored.lineage)
                sent += due
            now = time.monotonic()
            if outbox and now - last_publish >= PUBLISH_SECONDS:
                feed.publish_events_sync(outbox, lineage, texts)
                outbox, texts, last_publish = [], [], now
            if sent >= int(seconds * rate) and not outbox:
                break
            time.sleep(0.005)
    finally:
        done.append(sent)
        connection.close()


def trace_breakdown(trace: bytes, top: int = 15) -> list[tuple[str, float]]:
    """Self time (ms) per trace event name on the renderer's main thread."""
    events = json.loads(trace)
    events = events["traceEvents"] if isinstance(events, dict) else events
    main = {(e["pid"], e["tid"]) for e in events
            if e.get("ph") == "M" and e.get("name") == "thread_name"
            and e.get("args", {}).get("name") == "CrRendererMain"}
    spans = sorted(((e["ts"], e["ts"] + e.get("dur", 0), e["name"], (e["pid"], e["tid"])) for e in events
                    if e.get("ph") == "X" and (e["pid"], e["tid"]) in main and e.get("dur")),
                   key=lambda span: (span[3], span[0], -span[1]))
    own: dict[str, float] = {}
    stack: list[list[Any]] = []   # [end, name, thread, child time, duration]
    for begin, end, name, thread in spans:
        while stack and (stack[-1][2] != thread or stack[-1][0] <= begin):
            closed = stack.pop()
            own[closed[1]] = own.get(closed[1], 0.0) + closed[4] - closed[3]
        if stack:
            stack[-1][3] += min(end, stack[-1][0]) - begin
        stack.append([end, name, thread, 0.0, end - begin])
    for closed in stack:
        own[closed[1]] = own.get(closed[1], 0.0) + closed[4] - closed[3]
    return sorted(((name, ms / 1000) for name, ms in own.items()), key=lambda item: -item[1])[:top]


def live(page: Any, url: str, run_ids: list[str], rate: int, seconds: float,
         trace: Callable[[bool], Any] | None = None) -> dict[str, Any]:
    page.goto(url, wait_until="load")
    try:
        page.wait_for_selector("#live-status[data-status=live]", timeout=30_000)
    except Exception:
        status = page.evaluate("() => document.getElementById('live-status').textContent")
        return {"error": f"the page never went live in 30 s (status: {status!r})"}
    page.wait_for_timeout(1500)   # the refresh after "synced" is done
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")

    def metrics() -> dict[str, float]:
        return {item["name"]: float(item["value"]) for item in cdp.send("Performance.getMetrics")["metrics"]}

    # the page at rest first: what it costs with nothing arriving
    idle_before = metrics()
    page.wait_for_timeout(3000)
    idle_after = metrics()
    idle = ((idle_after["TaskDuration"] - idle_before["TaskDuration"])
            / (idle_after["Timestamp"] - idle_before["Timestamp"]) * 100)

    if trace is not None:
        trace(True)
    page.evaluate(START_WINDOW_JS)
    samples = [metrics()]
    done: list[int] = []
    injector = threading.Thread(target=inject, args=(run_ids, rate, seconds, done), name="bench-injector")
    injector.start()
    while injector.is_alive():
        page.wait_for_timeout(1000)
        samples.append(metrics())
    injector.join()
    samples.append(metrics())
    window = page.evaluate(END_WINDOW_JS)
    if trace is not None:
        trace(False)
    page.wait_for_timeout(3000)   # the last refresh lands
    received = page.evaluate(RECEIVED_JS)

    first, last = samples[0], samples[-1]
    wall = last["Timestamp"] - first["Timestamp"]
    busy = (last["TaskDuration"] - first["TaskDuration"]) / wall * 100
    per_second = [(b["TaskDuration"] - a["TaskDuration"]) / (b["Timestamp"] - a["Timestamp"]) * 100
                  for a, b in itertools.pairwise(samples) if b["Timestamp"] > a["Timestamp"]]
    longtasks = [float(value) for value in window["longtasks"]]
    longtask_busy = sum(longtasks) / float(window["wall"]) * 100

    def share(name: str) -> float:
        return round((last[name] - first[name]) / wall * 100, 1)

    refresh_ms = [float(value) for value in received["refresh_ms"]] or [0.0]
    refresh_server = [float(value) for value in received["refresh_server_ms"]] or [0.0]
    return {"events_sent": done[0] if done else 0, "seconds": round(wall, 2), "idle_busy_percent": round(idle, 1),
            "events_received": int(received["events"]), "timeline_rows_added": int(received["rows"]),
            "socket_status": received["status"],
            "busy_percent": round(busy, 1), "busy_per_second_median": round(statistics.median(per_second), 1),
            "busy_per_second_p95": round(pct(per_second, 0.95), 1),
            "script_percent": share("ScriptDuration"), "layout_percent": share("LayoutDuration"),
            "style_percent": share("RecalcStyleDuration"),
            "longtask_percent": round(longtask_busy, 1), "longtasks": len(longtasks),
            "longtask_max_ms": round(max(longtasks, default=0.0), 1),
            "refreshes": int(received["refreshes"]),
            "refresh_median_ms": round(statistics.median(refresh_ms), 1),
            "refresh_p95_ms": round(pct(refresh_ms, 0.95), 1),
            "refresh_server_median_ms": round(statistics.median(refresh_server), 1),
            "refresh_kb_median": round(statistics.median([float(v) for v in received["refresh_kb"]] or [0.0]), 1)}


def print_ready(ready: dict[str, Any], args: argparse.Namespace) -> None:
    verdict = "meets" if ready["ready_ms"] < READY_TARGET_MS else "MISSES"
    print(f"\n2. Chromium, the same page over loopback ({args.rounds} loads after a warm-up; "
          f"median / p95 ms from navigation start):\n"
          f"   responseStart {ready['response_start_ms']:.0f} / {ready['response_start_p95_ms']:.0f}, "
          f"domInteractive {ready['dom_interactive_ms']:.0f} / {ready['dom_interactive_p95_ms']:.0f}, "
          f"DOMContentLoaded end {ready['dom_content_loaded_ms']:.0f} / "
          f"{ready['dom_content_loaded_p95_ms']:.0f}, load end {ready['load_ms']:.0f} / "
          f"{ready['load_p95_ms']:.0f}\n"
          f"   run-page-ready mark {ready['ready_ms']:.0f} / {ready['ready_p95_ms']:.0f} ms "
          f"({ready['dom_nodes']:,} DOM elements); {verdict} the {READY_TARGET_MS:.0f} ms target")


def browser_parts(owner: Any, finished: Run, running: Run, args: argparse.Namespace,
                  processes: Processes) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    from playwright.sync_api import sync_playwright

    from tests.services import CHROMIUM, CHROMIUM_ARGS

    url = start_services(processes)
    problems: list[str] = []
    # read before the browser opens: Playwright's sync API runs an event loop in this thread,
    # and Django's async-safety check (on, as on the server) refuses ORM calls beside it
    run_ids = list(running.tree().values_list("pk", flat=True))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            # only the server is asked for anything (checked, not routed: routing every
            # request through Playwright would slow the loads being timed)
            page.on("request", lambda request: None if request.url.startswith((url, "data:", "blob:"))
                    else problems.append(f"request off the server: {request.url}"))
            page.set_default_timeout(30_000)
            page.on("console", lambda message: problems.append(
                f"console {message.type}: {message.text} ({message.location.get('url', '')})")
                    if message.type in ("error", "warning") else None)
            page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
            page.on("response", lambda response: problems.append(
                f"HTTP {response.status}: {response.request.method} {response.url}")
                if response.status >= 400 else None)
            page.goto(f"{url}/accounts/login/")
            page.fill("#id_username", owner.username)
            page.fill("#id_password", PASSWORD)
            with page.expect_navigation():
                page.click("button[type=submit]")
            assert "/accounts/login/" not in page.url, "login failed"
            ready = to_interactive(page, f"{url}/runs/{finished.pk}/", args.rounds)
            print_ready(ready, args)
            page.add_init_script(f"({COUNT_SOCKET_JS})()")
            def trace(start: bool) -> None:
                if start:
                    browser.start_tracing(page=page, categories=["devtools.timeline", "v8.execute",
                                                                 "disabled-by-default-devtools.timeline"])
                    return
                print("\n   Chromium main thread during the live window, self time by trace event (ms):")
                for name, ms in trace_breakdown(browser.stop_tracing()):
                    print(f"   {ms:9.1f}  {name}")

            streaming = live(page, f"{url}/runs/{running.pk}/", run_ids, args.rate, args.seconds,
                             trace if args.trace else None)
        finally:
            browser.close()
    return ready, streaming, problems


# -- the whole bench ------------------------------------------------------------------------

def main(args: argparse.Namespace) -> None:
    processes = Processes()
    try:
        started = time.perf_counter()
        call_command("migrate", verbosity=0)
        owner = get_user_model().objects.create_user("owner", password=PASSWORD)
        owner.groups.add(Group.objects.get_or_create(name=COMPOSERS)[0])
        finished = build_tree(owner, args.subagents, finished=True, seed=1)
        running = build_tree(owner, args.subagents, finished=False, seed=2)
        built_s = time.perf_counter() - started
        events = RunEvent.objects.count()
        print(f"built 2 trees of 1 + {args.subagents} runs, {events:,} events, in {built_s:.1f} s")

        server = server_time(owner, finished, args.rounds, args.profile)
        verdict = "meets" if server["median_ms"] < SERVER_TARGET_MS else "MISSES"
        print(f"\n1. server time, GET /runs/<root>/ of a finished {args.subagents}-subagent tree (test client):\n"
              f"   median {server['median_ms']:.1f} ms, p95 {server['p95_ms']:.1f} ms over {args.rounds} GETs, "
              f"{server['queries']} queries, {server['html_kb']} KB of HTML; "
              f"{verdict} the {SERVER_TARGET_MS:.0f} ms target")
        result: dict[str, Any] = {"case": "run_page", "subagents": args.subagents, "events": events,
                                  "server": server, "targets": {"server_ms": SERVER_TARGET_MS,
                                                                "ready_ms": READY_TARGET_MS,
                                                                "busy_percent": BUSY_TARGET_PERCENT}}
        if not args.skip_browser:
            ready, streaming, problems = browser_parts(owner, finished, running, args, processes)
            s = streaming
            if "error" in s:
                print(f"\n3. live: NOT MEASURED: {s['error']}")
            else:
                verdict = "meets" if s["busy_percent"] < BUSY_TARGET_PERCENT else "MISSES"
                print(f"\n3. live: {args.rate} events/s for {args.seconds:g} s into the open page of a running "
                      f"{args.subagents}-subagent tree (stored, then published through Redis):\n"
                      f"   sent {s['events_sent']} events; the page received {s['events_received']} over its socket "
                      f"and added {s['timeline_rows_added']} timeline rows (status {s['socket_status']})\n"
                      f"   main thread busy {s['busy_percent']:.1f} % over {s['seconds']:.1f} s (CDP TaskDuration; "
                      f"per second median {s['busy_per_second_median']:.1f} %, p95 {s['busy_per_second_p95']:.1f} %): "
                      f"script {s['script_percent']:.1f} %, style {s['style_percent']:.1f} %, "
                      f"layout {s['layout_percent']:.1f} %; at rest before: {s['idle_busy_percent']:.1f} %\n"
                      f"   longtask observer: {s['longtasks']} tasks over 50 ms, {s['longtask_percent']:.1f} % "
                      f"of the window, the longest {s['longtask_max_ms']:.0f} ms\n"
                      f"   {s['refreshes']} refreshes from /live/: median {s['refresh_median_ms']:.0f} ms "
                      f"(server {s['refresh_server_median_ms']:.0f} ms), p95 {s['refresh_p95_ms']:.0f} ms, "
                      f"{s['refresh_kb_median']:.0f} KB each\n"
                      f"   {verdict} the {BUSY_TARGET_PERCENT:.0f} % target")
            if problems:
                print("\n   the page reported:\n" + "\n".join(f"   - {problem}" for problem in problems[:20]))
            result.update({"chromium": ready, "live": streaming, "page_problems": len(problems),
                           "rate": args.rate, "seconds": args.seconds})
        print(json.dumps(result))
    finally:
        processes.stop()


if __name__ == "__main__":
    main(ARGS)
