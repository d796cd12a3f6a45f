"""Scripted run trees, a websocket viewer and the event-log checks the scale-out tests share."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from delegations.models import Run, RunEvent
from tests.delegations import scripts

NEW_FILE_EDIT = "--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1 @@\n+first line\n"
USAGE = {"input_tokens": 100, "output_tokens": 10}


CAPABILITIES = ["fs_read", "fs_write"]
BUDGET = {"max_model_calls": 60, "max_tokens": 1_000_000, "max_concurrency": 8}
ROOT_BUDGET = {"max_model_calls": 500, "max_tokens": 10_000_000, "max_concurrency": 16}
MAX_ITERATIONS = 20


def slow_turns(count: int, delay_ms: int) -> list[dict[str, Any]]:
    """Model turns that take ``delay_ms`` each and look around the workspace (a turn with
    no tool call would be read as the run's answer)."""
    return [{"text": f"Still working, step {n}.", "delay_ms": delay_ms, "usage": USAGE,
             "tool_calls": [{"name": "list_files", "arguments": {"path": "."}}]}
            for n in range(count)]


def _delegate(*labels: str, nested: bool, timeout_s: int) -> dict[str, Any]:
    turn = scripts.delegate_turn(*labels, usage=USAGE)
    for call in turn["tool_calls"]:
        call["arguments"].update(capabilities=["fs_read"], allow_nested=nested,
                                 max_iterations=MAX_ITERATIONS, timeout_s=timeout_s)
        if nested:  # the leaves take what their parent has left
            call["arguments"]["budget"] = BUDGET
    return turn


def slow_tree(*, children: int = 2, grandchildren: int | list[int] = 1, delay_ms: int = 100,
              turns: int = 3, leaf_delay_ms: int | None = None, timeout_s: int = 30) -> dict[str, Any]:
    """A depth-2 tree: the root delegates to ``children`` subagents, each to
    ``grandchildren`` leaves (or child n to ``grandchildren[n]``); every run takes a few
    delayed model turns (the leaves' take ``leaf_delay_ms`` when given). Every subagent
    gets ``timeout_s``, which must not pass the root's."""
    leaves = grandchildren if isinstance(grandchildren, list) else [grandchildren] * children

    def grandchild() -> dict[str, Any]:
        leaf_delay = delay_ms if leaf_delay_ms is None else leaf_delay_ms
        return {"script": [*slow_turns(turns, leaf_delay), scripts.yield_turn(usage=USAGE)]}

    def child(label: str, count: int) -> dict[str, Any]:
        labels = [f"{label}{n}" for n in range(count)]
        return {"script": [*slow_turns(turns, delay_ms),
                           _delegate(*labels, nested=False, timeout_s=timeout_s),
                           scripts.yield_turn(usage=USAGE)],
                "children": {name: grandchild() for name in labels}}

    labels = [f"c{n}" for n in range(children)]
    return {"script": [*slow_turns(turns, delay_ms), _delegate(*labels, nested=True, timeout_s=timeout_s),
                       scripts.yield_turn(usage=USAGE)],
            "children": {label: child(label, count) for label, count in zip(labels, leaves, strict=True)}}


def start_run(api: httpx.Client, config: dict[str, Any], **packet: Any) -> str:
    packet.setdefault("capabilities", CAPABILITIES)
    packet.setdefault("budget", ROOT_BUDGET)
    packet.setdefault("max_iterations", MAX_ITERATIONS)
    packet.setdefault("allow_nested", True)
    response = api.post("/api/runs", json={"packet": scripts.packet(**packet),
                                           "adapter": {"name": "scripted", "config": config}})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def finished(run_id: str, timeout: float = 60) -> Run:
    def done() -> Run | None:
        run = Run.objects.get(pk=run_id)
        return run if run.is_terminal else None
    return wait_for(done, timeout, f"run {run_id} to finish")  # type: ignore[no-any-return]


def stored_seqs(root_id: str) -> dict[str, list[int]]:
    seqs: dict[str, list[int]] = {}
    for run_id, seq in RunEvent.objects.filter(run__root_id=root_id).order_by("run_id", "seq") \
            .values_list("run_id", "seq"):
        seqs.setdefault(run_id, []).append(seq)
    return seqs


def assert_gapless(root_id: str) -> dict[str, list[int]]:
    """Every run of the tree numbers its events 1..last_seq, none missing or repeated."""
    seqs = stored_seqs(root_id)
    for run in Run.objects.filter(root_id=root_id):
        assert seqs.get(run.pk, []) == list(range(1, run.last_seq + 1)), run.pk
    return seqs


def events(run_id: str, type: str) -> list[RunEvent]:
    return list(RunEvent.objects.filter(run_id=run_id, type=type).order_by("seq"))


class Viewer(threading.Thread):
    """A websocket client watching a run tree like run_live.js: it keeps the last seq of
    every run, and when the socket drops it reconnects with ``after=N`` (and
    ``after.<run>=M``) until the root's ``result`` event arrived."""

    def __init__(self, base_url: str, run_id: str, cookie: str, *, deadline_s: float = 90) -> None:
        super().__init__(daemon=True)
        self.ws_url = base_url.replace("http://", "ws://") + f"/ws/runs/{run_id}/"
        self.origin = base_url
        self.run_id = run_id
        self.cookie = cookie
        self.deadline = time.monotonic() + deadline_s
        self.received: dict[str, list[int]] = {}
        self.connections = 0
        self.done = threading.Event()
        self.result_seen = False
        self.synced = threading.Event()
        self.error: BaseException | None = None

    def _query(self) -> str:
        cursors = {run: seqs[-1] for run, seqs in self.received.items() if seqs}
        parts = [f"after={cursors.pop(self.run_id, 0)}"]
        parts += [f"after.{run}={seq}" for run, seq in cursors.items()]
        return "?" + "&".join(parts)

    def run(self) -> None:
        try:
            while not self.done.is_set() and time.monotonic() < self.deadline:
                try:
                    self._watch()
                except (OSError, ConnectionClosed, TimeoutError, InvalidStatus):
                    time.sleep(0.2)  # the server is away or failing: try again, as the browser does
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()

    def _watch(self) -> None:
        with connect(self.ws_url + self._query(), open_timeout=5,
                     additional_headers={"Cookie": self.cookie, "Origin": self.origin}) as socket:
            self.connections += 1
            while time.monotonic() < self.deadline:
                try:
                    # once the root's result is in, what follows it comes within a moment
                    frame = json.loads(socket.recv(timeout=1.5 if self.result_seen else 5))
                except TimeoutError:
                    if self.result_seen:
                        self.done.set()
                        return
                    raise
                for event in frame if isinstance(frame, list) else [frame]:
                    self._take(event)

    def _take(self, event: dict[str, Any]) -> None:
        if event.get("type") == "synced":
            self.synced.set()
            return
        if "seq" not in event:
            return
        self.received.setdefault(event["run_id"], []).append(event["seq"])
        if event["run_id"] == self.run_id and event["type"] == "result":
            self.result_seen = True


def watch(base_url: str, run_id: str, cookie: str) -> Viewer:
    viewer = Viewer(base_url, run_id, cookie)
    viewer.start()
    assert viewer.synced.wait(15), "the viewer never got the backlog"
    return viewer


def assert_viewer_saw_everything(viewer: Viewer, root_id: str) -> None:
    viewer.join(timeout=60)
    assert viewer.error is None, viewer.error
    assert viewer.done.is_set()
    assert viewer.received == stored_seqs(root_id)
