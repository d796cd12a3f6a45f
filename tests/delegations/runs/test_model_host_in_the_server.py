"""The local model's host under the real server (`manage.py serve` with its embedded
worker): a host killed in the middle of an answer fails only the run it was answering,
the server answers throughout, the next run gets a fresh host, and no host outlives the
server."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import _test_database_url, bearer, serve, stop_server
from tests.protocol.conftest import local_model_or_skip
from tests.protocol.test_model_host import process_state, wait_gone

pytestmark = [pytest.mark.local_model, pytest.mark.slow]

STORY = {"goal": "Write a long story about a lighthouse keeper and hand it back.",
         "input_data": {}, "expected_output_schema": {
             "type": "object", "properties": {"story": {"type": "string"}},
             "required": ["story"]}}
LOCAL = {"name": "local", "config": {"model": "smollm2-135m", "max_tokens": 400,
                                     "temperature": 0.8, "seed": 3}}
# the run after the crash: the default model, greedily, on a task it completes
QUOTE = {"goal": "Report the price and currency in the quote.",
         "input_data": {"quote": "A desk lamp, now 24.50 USD at our store."},
         "expected_output_schema": {
             "type": "object", "properties": {"price": {"type": "number"},
                                              "currency": {"type": "string"}},
             "required": ["price", "currency"]}}
DEFAULT_MODEL = {"name": "local", "config": {"model": "gemma3-270m"}}
TERMINAL = {"COMPLETE", "FAILED", "TIMEOUT", "CANCELLED", "REJECTED"}


def model_hosts_of(pid: int) -> list[int]:
    """The model host processes started by process ``pid``."""
    hosts = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"model_host.py" in command:
            hosts.append(int(entry.name))
    return hosts


@pytest.fixture
def server(transactional_db: None, tmp_path: Path) -> Iterator[tuple[Any, str]]:
    local_model_or_skip("smollm2-135m")
    local_model_or_skip("gemma3-270m")
    with (tmp_path / "server.log").open("w") as log:
        process, url = serve(_test_database_url(), log)
        try:
            yield process, url
        finally:
            stop_server(process)


class HealthWatch:
    """Asks /api/health every 50 ms in the background; keeps every answer's status."""

    def __init__(self, url: str) -> None:
        self.statuses: list[int | str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(url,), daemon=True)
        self._thread.start()

    def _watch(self, url: str) -> None:
        while not self._stop.wait(0.05):
            try:
                self.statuses.append(httpx.get(f"{url}/api/health", timeout=2).status_code)
            except httpx.HTTPError as exc:
                self.statuses.append(type(exc).__name__)

    def stop(self) -> list[int | str]:
        self._stop.set()
        self._thread.join()
        return self.statuses


def start_run(url: str, headers: dict[str, str], packet: dict[str, Any] = STORY,
              adapter: dict[str, Any] = LOCAL) -> str:
    response = httpx.post(f"{url}/api/runs", json={"packet": packet, "adapter": adapter},
                          headers=headers, timeout=10)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def finished(url: str, headers: dict[str, str], run_id: str, within_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        run = httpx.get(f"{url}/api/runs/{run_id}", headers=headers, timeout=5).json()
        if run["state"] in TERMINAL:
            return dict(run)
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not finish within {within_s:g} s")


def host_writing(url: str, headers: dict[str, str], run_id: str, server_pid: int) -> int:
    """The host's pid, frozen (SIGSTOP) while it is writing the run's answer."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        events = httpx.get(f"{url}/api/runs/{run_id}/events", headers=headers,
                           timeout=5).json()["events"]
        hosts = model_hosts_of(server_pid)
        if hosts and events and events[-1]["type"] == "text":
            os.kill(hosts[0], signal.SIGSTOP)
            return hosts[0]
        time.sleep(0.02)
    raise AssertionError("the model never started writing")


def test_a_model_host_killed_mid_answer_fails_only_its_run(
        server: tuple[Any, str], composer: Any) -> None:
    process, url = server
    headers = bearer(composer)
    health = HealthWatch(url)

    crashed_run = start_run(url, headers)
    host = host_writing(url, headers, crashed_run, process.pid)
    os.kill(host, signal.SIGKILL)
    crashed = finished(url, headers, crashed_run, within_s=60)
    next_run = finished(url, headers, start_run(url, headers, QUOTE, DEFAULT_MODEL),
                        within_s=180)
    statuses = health.stop()

    assert crashed["state"] == "FAILED"
    report = crashed["result"]["error_report"]
    assert report["code"] == "ERR_TOOL_FAILURE"
    assert "local model process crashed" in report["message"]
    assert "signal 9" in report["message"] and "can be retried" in report["message"]
    assert wait_gone(host, within_s=5), f"the killed host is left as {process_state(host)}"
    assert next_run["state"] == "COMPLETE", (next_run.get("result") or {}).get("error_report")
    assert model_hosts_of(process.pid) not in ([], [host])
    assert statuses and set(statuses) == {200}, statuses


def test_no_model_host_outlives_the_server(server: tuple[Any, str], composer: Any) -> None:
    process, url = server
    headers = bearer(composer)
    finished(url, headers, start_run(url, headers), within_s=180)
    hosts = model_hosts_of(process.pid)
    assert len(hosts) == 1, "one host per worker process"

    process.send_signal(signal.SIGINT)  # Ctrl+C on `make run`
    process.wait(timeout=20)

    assert wait_gone(hosts[0], within_s=5), "the host outlived the server"
