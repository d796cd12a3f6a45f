"""Runs end to end through the product: the HTTP API, SQLite, the embedded django-tasks-db
worker and websockets (issue 6's benchmark).

It starts a real `manage.py serve` (uvicorn + the embedded worker thread, in-memory
channel layer) on a throwaway SQLite database and measures, with the scripted adapter at
zero latency:

1. **W1 hand-offs end to end**: ``POST /api/runs`` with the peers' W1 shape (a root that
   delegates to one subagent and finishes with its result) until the root's result is
   stored in the database: one at a time (latency per hand-off; the embedded worker is
   woken by the enqueue, not by its poll) and many in flight (throughput).
2. **Event delivery**: 100 websocket clients watch one run whose tree emits 10,000+ events
   (a coordinator delegating 1000 subagents, 50 per model turn, 16 at a time, each
   "thinking" 1 s). Clients connect as the live run page does (``?batch=1``: a frame may
   carry a JSON array of events); ``--frames single`` measures one event per frame, and
   the default measures both. For every event every client receives, latency = arrival
   time - the event's ``ts`` (set when the runner handed it to the sink; so it covers
   storing, publishing and the websocket). Arrival is when the client's kernel received
   the bytes (SO_TIMESTAMPNS); ``client_read_lag_*`` reports how much later this process
   read them, which is this machine's 100 clients waiting for a core, not delivery.
   Every client checks every event: per run,
   seqs must arrive exactly once and in order, and each run's last seq must match the
   event log (``lost``, ``doubled_or_unordered``).

   The clients share the server's 2 cores, so they are kept cheap, or the figure would
   measure them: a non-blocking socket per client read by a loop callback (each read
   scanned once for whole frames) and no JSON decoding: a regular expression pulls run id, seq,
   type and ts out of each event's leading keys (the server always writes them first,
   and a quote inside a JSON string is escaped, so text in an event's data cannot match).
   ``clients_cpu_s`` and ``server_cpu_s`` report what each side spent while the run went.

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
import re
import socket
import statistics
import struct
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.load_probe import EmbeddedServer, django_on  # noqa: E402

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


# -- a cheap websocket client (RFC 6455, text frames) ---------------------------------------

# The first keys of every event frame, in the order the server writes them (the event log
# writer and RunEvent.as_wire). A quote inside a JSON string is escaped, so this pattern
# can only match an event object, never text inside an event's data.
EVENT = re.compile(rb'\{"run_id":"([^"]+)","seq":(\d+),"type":"([^"]+)","ts":([-+.eE0-9]+)')


# Linux: stamp each read with the time the kernel received the data (struct timespec)
SO_TIMESTAMPNS = 35
TIMESPEC = struct.Struct("@qq")


class Viewer:
    """One websocket client watching a run, written to cost the measuring process as
    little as possible, so that 100 of them on the server's 2 cores measure the server:
    a non-blocking socket read by a loop callback, one buffer scan per read, and events
    are not JSON-decoded: EVENT pulls run id, seq, type and ts out of the frame text. It
    still checks every event it receives: per run, seqs must arrive exactly once and in
    order (``lost``, ``doubled_or_unordered``).

    An event's arrival is when the kernel received the bytes on this client's socket
    (SO_TIMESTAMPNS), not when this process got round to reading them: with 100 sockets
    in one process sharing the server's 2 cores, the time a client waits for its own
    turn on the CPU would be measured as delivery. ``read_lag`` keeps what that wait was
    (read time - kernel time), so both can be reported."""

    def __init__(self, sock: socket.socket, request: bytes, root_id: str) -> None:
        loop = asyncio.get_running_loop()
        self.sock, self.root_id = sock, root_id.encode()
        self.buffer = bytearray()
        self.upgraded = False
        self.parts: list[bytes] = []
        self.last_seq: dict[bytes, int] = {}
        self.latencies = array("d")
        self.read_lag = array("d")   # per read: when this process read it - when it arrived
        self.events = self.lost = self.doubled = 0
        self.synced: asyncio.Future[None] = loop.create_future()
        self.finished: asyncio.Future[None] = loop.create_future()  # the root's result came
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.sendall(request)
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            data, ancillary, _, _ = self.sock.recvmsg(1 << 18, socket.CMSG_SPACE(TIMESPEC.size))
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.connection_lost(exc)
            return
        read_at = time.time()
        if not data:
            self.connection_lost(None)
            return
        arrived = read_at
        for level, kind, value in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                seconds, nanoseconds = TIMESPEC.unpack(value[:TIMESPEC.size])
                arrived = seconds + nanoseconds / 1e9
        self.read_lag.append(read_at - arrived)
        self.data_received(data, arrived)

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()
        for future in (self.synced, self.finished):
            if not future.done():
                future.set_exception(ConnectionError("the server closed the websocket"))

    def data_received(self, data: bytes, arrived: float) -> None:
        buffer = self.buffer
        buffer += data
        if not self.upgraded:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            if b" 101 " not in buffer[:end].split(b"\r\n", 1)[0]:
                raise RuntimeError(f"websocket refused: {bytes(buffer[:200])!r}")
            self.upgraded = True
            del buffer[:end + 4]
        position, size = 0, len(buffer)
        while size - position >= 2:
            first, length = buffer[position], buffer[position + 1] & 0x7F
            header = 2
            if length == 126:
                if size - position < 4:
                    break
                length, header = int.from_bytes(buffer[position + 2:position + 4]), 4
            elif length == 127:
                if size - position < 10:
                    break
                length, header = int.from_bytes(buffer[position + 2:position + 10]), 10
            if size - position < header + length:
                break
            payload = bytes(buffer[position + header:position + header + length])
            position += header + length
            opcode = first & 0x0F
            if opcode == 9:
                self._send_frame(10, payload)  # a pong, or the server drops us
            elif opcode == 8:
                self.close()
            elif opcode in (0, 1):
                self.parts.append(payload)
                if first & 0x80:
                    self._on_text(b"".join(self.parts), arrived)
                    self.parts = []
        del buffer[:position]

    def _on_text(self, text: bytes, arrived: float) -> None:
        if b'"seq":' not in text:
            if b'"synced"' in text and not self.synced.done():
                self.synced.set_result(None)
            return
        last_seq, latencies = self.last_seq, self.latencies
        for match in EVENT.finditer(text):
            run_id, seq = match[1], int(match[2])
            last = last_seq.get(run_id, 0)
            if seq == last + 1:
                last_seq[run_id] = seq
            elif seq > last:
                self.lost += seq - last - 1
                last_seq[run_id] = seq
            else:
                self.doubled += 1
            self.events += 1
            latencies.append(arrived - float(match[4]))
            if match[3] == b"result" and run_id == self.root_id and not self.finished.done():
                self.finished.set_result(None)

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        # client frames are masked (RFC 6455 §5.3); a zero mask leaves the payload as is
        assert len(payload) < 126
        self.sock.send(bytes([0x80 | opcode, 0x80 | len(payload)]) + bytes(4) + payload)

    def close(self) -> None:
        if self.sock.fileno() >= 0:
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
            self.sock.close()


async def open_viewer(port: int, path: str, cookie: str, root_id: str) -> Viewer:
    key = base64.b64encode(os.urandom(16)).decode()
    request = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
               f"Sec-WebSocket-Version: 13\r\nOrigin: http://127.0.0.1:{port}\r\n"
               f"Cookie: {cookie}\r\n\r\n").encode()
    sock = socket.create_connection(("127.0.0.1", port))
    return Viewer(sock, request, root_id)


# -- the server under test --------------------------------------------------------------------

class Server(EmbeddedServer):
    """The embedded server (load_probe.py's) with this process's environment besides (the
    traces benchmark names its collector there) and a lane wide enough for the burst."""

    def __init__(self, data_dir: Path, lane: int) -> None:
        inherited = {key: value for key, value in os.environ.items()
                     if key not in ("DATABASE_URL", "REDIS_URL", "HANDOFF_DATA_DIR")}
        super().__init__(data_dir, {**inherited, "HANDOFF_LANE_SIZE": str(lane)})

    @property
    def pid(self) -> int:
        return self.pids[0]


def setup_django(env: dict[str, str]) -> tuple[str, str]:
    """Configure Django in this process on the server's database; returns a bearer header
    value and a session cookie for a composer."""
    django_on(env)
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

def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def delivery(port: int, cookie: str, server_pid: int, *, clients: int, children: int,
                   concurrency: int, leaf_delay_ms: int, batch: bool) -> dict[str, Any]:
    from django.contrib.auth.models import User

    from delegations.models import Run
    from delegations.runs.queue import enqueue_run
    from delegations.runs.workflows import run_create

    # created here with its lane slot taken but not started: it is queued for the server's
    # worker once every client is connected and has its (empty) backlog
    config = waves(children, 50, leaf_delay_ms)
    packet = root_packet(concurrency=concurrency)
    packet["max_iterations"] = len(config["script"]) + 1
    def create() -> str:
        owner = User.objects.get(username="bench")
        return str(run_create(packet=packet, adapter="scripted", config=config, owner=owner, start=False).pk)

    def stored_seqs() -> dict[str, int]:
        seqs = dict(Run.objects.filter(root_id=run_id).values_list("pk", "last_seq"))
        seqs[run_id] = Run.objects.get(pk=run_id).last_seq
        return seqs

    # the ORM off the event loop, as the product does it (Django's async-safety check is on)
    run_id = await asyncio.to_thread(create)
    path = f"/ws/runs/{run_id}/" + ("?batch=1" if batch else "")
    viewers = await asyncio.gather(*(open_viewer(port, path, cookie, run_id) for _ in range(clients)))
    await asyncio.wait_for(asyncio.gather(*(viewer.synced for viewer in viewers)), 120)
    started, client_cpu, server_cpu = time.time(), time.process_time(), cpu_seconds(server_pid)
    await asyncio.to_thread(enqueue_run, run_id)
    await asyncio.wait_for(asyncio.gather(*(viewer.finished for viewer in viewers)), 900)
    elapsed = time.time() - started
    client_cpu, server_cpu = time.process_time() - client_cpu, cpu_seconds(server_pid) - server_cpu
    await asyncio.sleep(2)  # anything after the root's result would be a fault: let it come
    for viewer in viewers:
        viewer.close()
    stored = await asyncio.to_thread(stored_seqs)
    total = sum(stored.values())
    lost = doubled = 0
    for viewer in viewers:
        lost += viewer.lost
        doubled += viewer.doubled
        for member, last in stored.items():
            lost += max(0, last - viewer.last_seq.get(member.encode(), 0))
        doubled += sum(1 for member in viewer.last_seq if member.decode() not in stored)
    latencies = sorted(lat for viewer in viewers for lat in viewer.latencies)
    read_lag = [lag for viewer in viewers for lag in viewer.read_lag]
    return {"figure": "event_delivery_sink_to_websocket", "clients": clients,
            "frames": "batched" if batch else "one event per frame",
            "concurrency": concurrency, "leaf_delay_ms": leaf_delay_ms, "runs_in_tree": len(stored),
            "events": total, "deliveries": sum(viewer.events for viewer in viewers),
            "lost": lost, "doubled_or_unordered": doubled,
            "events_per_second": round(total / elapsed, 1),
            "p50_ms": round(quantile(latencies, 0.5) * 1e3, 2),
            "p99_ms": round(quantile(latencies, 0.99) * 1e3, 2),
            "max_ms": round(latencies[-1] * 1e3, 2) if latencies else None,
            "client_read_lag_p50_ms": round(quantile(read_lag, 0.5) * 1e3, 2),
            "client_read_lag_p99_ms": round(quantile(read_lag, 0.99) * 1e3, 2),
            "server_cpu_s": round(server_cpu, 1), "clients_cpu_s": round(client_cpu, 1),
            "wall_s": round(elapsed, 1)}


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
                    server.port, cookie, server.pid, clients=clients, children=children,
                    concurrency=args.concurrency, leaf_delay_ms=args.leaf_delay_ms,
                    batch=mode == "batch")), args.json)
        finally:
            server.stop()
    if not args.json:
        print("  ".join(f"{k}={v}" for k, v in META.items()))


if __name__ == "__main__":
    main()
