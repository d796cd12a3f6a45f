"""The local model's host process, seen from the process that uses it (a worker, the web
server's embedded worker, a command).

One host per process, started on first use (:func:`model_host`), reused by every local
adapter and run, and started again after it died. The host (:mod:`.model_host`) runs
llama.cpp, so a native crash there fails only the calls it was answering:

- each call is a request with an id; its streamed pieces and its end come back tagged with
  that id, so several runs share the host at once (generations take turns per model);
- when the host dies (segfault, abort, out of memory, a kill) every call in flight fails
  with ``ERR_TOOL_FAILURE`` saying so ("the local model process crashed (signal 11) while
  answering; the run can be retried"); the next call starts a fresh host;
- a cancelled call (the run's timeout, a cancel) tells the host to stop; a host that does
  not answer within ``cancel_grace_s`` is hung and is killed, so the next call gets a new one;
- the host reads its requests from a pipe and exits when the pipe closes, so it goes down
  with this process however it ends (Ctrl+C, SIGKILL); on a normal exit it is stopped and
  reaped; a forked child (an RQ work horse) starts a host of its own.

Measured on this machine (2 cores, Python 3.12, tests/benchmarks/bench_local.py): the
process boundary adds about 0.5 ms per model call (JSON lines over a pipe, one line per
streamed token) and the first call about 0.1 s (starting Python and importing llama_cpp);
a host with Gemma 3 270M loaded holds about 400 MB resident.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ..errors import ErrorCode, ProtocolError

HOST_SCRIPT = Path(__file__).with_name("model_host.py")
CANCEL_GRACE_S = 10.0  # prompt evaluation cannot be interrupted; a few seconds on a busy machine
Listener = Callable[[dict[str, Any]], None]


class HostCrashed(ProtocolError):
    """The model host died while answering (ERR_TOOL_FAILURE)."""


def crash_message(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        try:
            how = f"crashed ({signal.Signals(-returncode).name}, signal {-returncode})"
        except ValueError:
            how = f"crashed (signal {-returncode})"
    elif returncode is None:
        how = "stopped answering and was stopped"
    else:
        how = f"exited with status {returncode}"
    return (f"The local model process {how} while answering; the run can be retried. If it "
            "happens again, check the server log for the model's own messages.")


class ModelHost:
    """One host process and the calls in flight on it."""

    cancel_grace_s: float = CANCEL_GRACE_S

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None
        # calls in flight: id -> (the host process answering it, where its answers go)
        self._calls: dict[int, tuple[subprocess.Popen[str], Listener]] = {}
        self._next_id = 0

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def _started(self) -> subprocess.Popen[str]:
        """The running host; starts one when there is none (call with the lock held)."""
        process = self._process
        if process is not None and process.poll() is None:
            return process
        process = subprocess.Popen(
            [sys.executable, "-u", str(HOST_SCRIPT)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=None, text=True, encoding="utf-8", bufsize=1)
        self._process = process
        threading.Thread(target=self._read, args=(process,), daemon=True,
                         name=f"model-host-reader-{process.pid}").start()
        return process

    def _read(self, process: subprocess.Popen[str]) -> None:
        """Hands each answer to its call; when the host is gone, fails the calls left."""
        assert process.stdout is not None
        for line in process.stdout:
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                continue
            with self._lock:
                call = self._calls.get(message.get("id"))
            if call is not None:
                call[1](message)
        returncode = process.wait()
        with self._lock:
            orphaned = [key for key, (owner, _) in self._calls.items() if owner is process]
            listeners = [self._calls.pop(key)[1] for key in orphaned]
        for listener in listeners:
            listener({"event": "crashed", "returncode": returncode})

    def send(self, request: dict[str, Any], listener: Listener) -> int:
        """Sends ``request`` (its id is assigned here) and routes its answers to ``listener``."""
        with self._lock:
            process = self._started()
            self._next_id += 1
            request_id = self._next_id
            self._calls[request_id] = (process, listener)
            # a host that died between the check and the write: its reader fails the call
            with contextlib.suppress(OSError):
                self._write(process, {**request, "id": request_id})
        return request_id

    def finish(self, request_id: int) -> None:
        with self._lock:
            self._calls.pop(request_id, None)

    def cancel(self, request_id: int, still_running: Callable[[], bool]) -> None:
        """Asks the host to stop a call; kills it if the call is still running after the
        grace period (a hung host)."""
        with self._lock:
            call = self._calls.get(request_id)
            if call is None:
                return
            process = call[0]
            try:
                self._write(process, {"op": "cancel", "id": request_id})
            except OSError:
                return

        def check() -> None:
            if still_running() and process.poll() is None:
                process.kill()

        timer = threading.Timer(self.cancel_grace_s, check)
        timer.daemon = True
        timer.start()

    @staticmethod
    def _write(process: subprocess.Popen[str], message: dict[str, Any]) -> None:
        assert process.stdin is not None
        process.stdin.write(json.dumps(message, ensure_ascii=False) + "\n")
        process.stdin.flush()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Closes the host's pipe (it exits), waits for it, kills it if it will not go."""
        with self._lock:
            process, self._process = self._process, None
        if process is None:
            return
        try:
            if process.stdin is not None:
                process.stdin.close()
            process.wait(timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            process.kill()
            process.wait()

    async def call(self, request: dict[str, Any],
                   on_text: Callable[[str], Awaitable[None]] | None = None) -> dict[str, Any]:
        """Sends one request and waits for its result; raises ProtocolError when the host
        reports an error, and :class:`HostCrashed` when it dies first."""
        loop = asyncio.get_running_loop()
        answers: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        finished = threading.Event()

        def listener(message: dict[str, Any]) -> None:
            if message.get("event") != "text":
                finished.set()
                if "id" in message:
                    self.finish(int(message["id"]))
            with contextlib.suppress(RuntimeError):  # the caller's loop is gone
                loop.call_soon_threadsafe(answers.put_nowait, message)

        # Sent from the loop itself: a request line is a few kB, which the pipe takes at
        # once while the host reads it. Only the first call, which starts the host, waits.
        if self.pid is None:
            request_id = await asyncio.to_thread(self.send, request, listener)
        else:
            request_id = self.send(request, listener)
        try:
            while True:
                message = await answers.get()
                event = message.get("event")
                if event == "text":
                    if on_text is not None:
                        await on_text(str(message.get("text", "")))
                elif event == "done":
                    return dict(message.get("result") or {})
                elif event == "error":
                    stage = message.get("stage")
                    raise ProtocolError(ErrorCode.TOOL_FAILURE,
                                        f"The local model failed: {message.get('message')}",
                                        details={"stage": stage} if stage else None)
                else:
                    raise HostCrashed(ErrorCode.TOOL_FAILURE,
                                      crash_message(message.get("returncode")),
                                      details={"returncode": message.get("returncode")})
        finally:
            # Reached on success, error and cancellation alike. A call left running (the
            # run was cancelled or timed out) is stopped; its entry stays until the host
            # answers, which is how a hung host is told from a busy one.
            if not finished.is_set():
                self.cancel(request_id, lambda: not finished.is_set())


_HOST: ModelHost | None = None
_HOST_LOCK = threading.Lock()


def model_host() -> ModelHost:
    """This process's model host (one per worker process)."""
    global _HOST
    with _HOST_LOCK:
        if _HOST is None:
            _HOST = ModelHost()
        return _HOST


def _forget_inherited_host() -> None:
    # A forked child (an RQ work horse) must not talk over its parent's pipe: it starts
    # a host of its own on first use. The inherited pipe ends close with the child.
    global _HOST, _HOST_LOCK
    _HOST, _HOST_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_inherited_host)


@atexit.register
def _stop_host() -> None:
    host = _HOST
    if host is not None:
        host.stop()
