"""`manage.py serve --processes N`: the processes share the address and the database, and
their channel layers are linked through the supervisor's hub, so a run's events reach a
viewer or waiter on any process (delegations/live/siblings.py)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest

from delegations.live.siblings import SiblingChannelLayer, frame, serve_hub
from tests.conftest import ROOT, _test_database_url, serve_with, server_environment, stop_server
from tests.delegations import scripts

MESSAGE = {"type": "run.events", "texts": ["{}"], "keys": [("r1", 1)], "states": [""]}


def read_frame(link: socket.socket) -> list[Any]:
    head = link.recv(4, socket.MSG_WAITALL)
    return list(msgpack.unpackb(link.recv(int.from_bytes(head, "big"), socket.MSG_WAITALL), raw=False))


async def test_a_group_message_reaches_a_member_in_a_sibling_process(tmp_path: Path) -> None:
    hub = await serve_hub(str(tmp_path / "hub.sock"))
    here, there = SiblingChannelLayer(hub=str(tmp_path / "hub.sock")), SiblingChannelLayer(hub=str(tmp_path / "hub.sock"))
    channel = await there.new_channel()
    await there.group_add("run.r1", channel)
    await asyncio.sleep(0.1)   # the hub hears the member before the message (two sockets)
    await here.group_send("run.r1", MESSAGE)
    message = await asyncio.wait_for(there.receive(channel), 5)
    assert message["texts"] == ["{}"] and [tuple(key) for key in message["keys"]] == [("r1", 1)]
    hub.close()


async def test_the_hub_sends_a_process_only_the_groups_it_has_members_in(tmp_path: Path) -> None:
    """A busy server publishes every run's events: a sibling that watches none of them is
    not sent them (nor is the process a message came from)."""
    path = str(tmp_path / "hub.sock")
    hub = await serve_hub(path)
    sender, watcher = (socket.socket(socket.AF_UNIX) for _ in range(2))
    for link in (sender, watcher):
        link.connect(path)
        link.settimeout(5)
    watcher.sendall(frame("add", "run.watched"))
    sender.sendall(frame("add", "run.watched"))
    await asyncio.sleep(0.1)
    loop = asyncio.get_running_loop()
    for group in ("run.unwatched", "run.watched"):
        await loop.run_in_executor(None, sender.sendall, frame("send", group, MESSAGE))
    assert (await loop.run_in_executor(None, read_frame, watcher))[:2] == ["send", "run.watched"]
    sender.settimeout(0.3)
    with pytest.raises(TimeoutError):   # not even its own message comes back
        await loop.run_in_executor(None, sender.recv, 1)
    watcher.sendall(frame("discard", "run.watched"))
    await asyncio.sleep(0.1)
    await loop.run_in_executor(None, sender.sendall, frame("send", "run.watched", MESSAGE))
    watcher.settimeout(0.3)
    with pytest.raises(TimeoutError):
        await loop.run_in_executor(None, watcher.recv, 1)
    for link in (sender, watcher):
        link.close()
    hub.close()


# -- on a real server ---------------------------------------------------------------------------

@pytest.fixture
def two_processes(django_db_setup: Any, django_db_blocker: Any, transactional_db: None,
                  tmp_path: Path) -> Iterator[tuple[str, Any]]:
    with django_db_blocker.unblock():
        database_url = _test_database_url()
    with (tmp_path / "server.log").open("w") as log:
        process, url = serve_with(database_url, log, ["--processes", "2"], {})
        yield url, process
        stop_server(process)


def start(url: str, headers: dict[str, str]) -> str:
    answer = httpx.post(f"{url}/api/runs", headers=headers, timeout=30, json={
        "packet": scripts.packet(), "adapter": {"name": "scripted",
                                                "config": {"script": [scripts.yield_turn(delay_ms=1500)]}}})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


@pytest.mark.slow
def test_a_waiter_on_either_process_hears_the_run_end(two_processes: tuple[str, Any],
                                                      composer_api: dict[str, str]) -> None:
    """Each request on a new connection, so the kernel hands it to either process: a waiter
    on the process that does not execute the run hears its end through the hub, where
    alone it would look again only after 5 s."""
    url, _ = two_processes

    def start_and_wait(_: int) -> tuple[str, float]:
        run_id = start(url, composer_api)
        started = time.monotonic()
        answer = httpx.get(f"{url}/api/runs/{run_id}", params={"wait": 20}, headers=composer_api, timeout=60)
        return answer.json()["state"], time.monotonic() - started

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(start_and_wait, range(8)))
    assert all(state == "COMPLETE" for state, _ in answers), answers
    assert all(took < 4 for _, took in answers), answers


@pytest.mark.slow
def test_each_process_has_its_worker_and_sigterm_stops_them_all(two_processes: tuple[str, Any]) -> None:
    _, process = two_processes
    pids = worker_pids()
    assert len(pids) == 2 and process.pid not in pids
    process.terminate()
    assert process.wait(timeout=20) == 143
    assert not any(_running(pid) for pid in pids)


@pytest.mark.slow
def test_the_processes_count_failed_tokens_and_idempotency_keys_together(
        two_processes: tuple[str, Any], composer_api: dict[str, str]) -> None:
    """Each on a new connection (either process): counted each in its own memory, the
    limit of 20 failed tokens would let about 40 through, and a start sent again with its
    key could start a second run."""
    url, _ = two_processes
    statuses = [httpx.get(f"{url}/api/runs", headers={"Authorization": "Bearer hnd_wrong"}, timeout=10).status_code
                for _ in range(30)]
    assert statuses.count(401) == 20 and statuses[20:] == [429] * 10, statuses
    body = {"packet": scripts.packet(), "adapter": {"name": "scripted", "config": {"script": [scripts.yield_turn()]}}}
    ids = {httpx.post(f"{url}/api/runs", headers={**composer_api, "Idempotency-Key": "once"}, json=body,
                      timeout=30).json()["id"] for _ in range(8)}
    assert len(ids) == 1, ids


@pytest.mark.slow
def test_a_supervisor_killed_takes_its_processes_with_it(two_processes: tuple[str, Any]) -> None:
    """Left running, they would keep serving the port with no hub and no one to stop them."""
    _, process = two_processes
    pids = worker_pids()
    assert len(pids) == 2
    process.kill()
    process.wait(timeout=10)
    deadline = time.monotonic() + 20
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_running(pid) for pid in pids)


def worker_pids() -> set[int]:
    """The processes whose embedded workers beat (both, once they have started)."""
    from delegations.models import WorkerHeartbeat

    beating = WorkerHeartbeat.objects.filter(kind="embedded")
    deadline = time.monotonic() + 15
    while beating.count() < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    return set(beating.values_list("pid", flat=True))


def _running(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def test_a_port_in_use_is_said_in_plain_words() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "manage.py", "serve", "--port", str(port), "--processes", "2"],
                              cwd=ROOT, env=server_environment(DJANGO_SETTINGS_MODULE="handoff_site.settings"),
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"Could not listen on 127.0.0.1:{port} for 2 processes" in done.stderr and "--port" in done.stderr
