"""Faults survived on the scale-out stack: a worker killed or stalled mid-run, the ASGI
server and Redis restarted under watching clients, the database connection dropped, a
parent timing out over 13 running descendants. Nothing lost, nothing done twice."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import DatabaseError, connection, transaction

from delegations.models import Run, RunEvent
from tests.delegations import scripts
from tests.scaleout.conftest import ScaleOutStack
from tests.scaleout.runs import (
    NEW_FILE_EDIT,
    USAGE,
    Viewer,
    assert_gapless,
    assert_viewer_saw_everything,
    events,
    finished,
    slow_tree,
    slow_turns,
    start_run,
    wait_for,
    watch,
)

pytestmark = [pytest.mark.scaleout, pytest.mark.slow]

SLOW_TURNS = 6


def edit_then_slow_turns(delay_ms: int = 700) -> dict[str, object]:
    """One apply_edit that creates notes.txt, then slow turns, then the answer."""
    return {"script": [
        {"text": "Writing notes.", "usage": USAGE,
         "tool_calls": [{"name": "apply_edit", "arguments": {"edit": NEW_FILE_EDIT}}]},
        *slow_turns(SLOW_TURNS, delay_ms), scripts.yield_turn(usage=USAGE)]}


def executing_worker(stack: ScaleOutStack, run_id: str) -> int:
    """The index of the worker that holds the run's lease."""
    def worker() -> list[int] | None:
        owner = Run.objects.get(pk=run_id).lease_owner
        index = stack.worker_of(int(owner.rsplit("-", 2)[1])) if owner else None
        return None if index is None else [index]  # worker 0 is an answer too
    (index,) = wait_for(worker, 20, f"a worker to take run {run_id}")
    return int(index)


def assert_done_once(run_id: str) -> None:
    """The edit applied once, every model turn charged once, one result."""
    run = Run.objects.get(pk=run_id)
    assert run.state == "COMPLETE", run.error
    edits = [e for e in events(run_id, "tool_result") if e.data["name"] == "apply_edit"]
    assert len(edits) == 1 and edits[0].data["ok"], [e.data for e in edits]
    assert len(events(run_id, "tool_call")) == len({e.data["id"] for e in events(run_id, "tool_call")})
    workspace = Path(settings.HANDOFF_WORKSPACE_ROOT)
    assert workspace  # the stack's workspaces are under its own folder
    turns = SLOW_TURNS + 2
    assert len(events(run_id, "model_call")) == turns
    assert run.usage["input_tokens"] == turns * USAGE["input_tokens"]
    assert len(events(run_id, "result")) == 1
    assert_gapless(run_id)


def notes_of(stack: ScaleOutStack, run_id: str) -> str:
    return (stack.workdir / "workspaces" / run_id / "notes.txt").read_text()


def test_a_killed_worker_s_run_is_resumed_by_the_other_worker_from_its_checkpoint(
        api: httpx.Client, live_stack: ScaleOutStack, session_cookie: str) -> None:
    run_id = start_run(api, edit_then_slow_turns())
    viewer = watch(live_stack.url, run_id, session_cookie)
    victim = executing_worker(live_stack, run_id)
    wait_for(lambda: len(events(run_id, "model_call")) >= 3, 20, "a few turns")
    live_stack.signal_worker(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_for(lambda: RunEvent.objects.filter(run_id=run_id, type="log",
                                             data__message__icontains="resuming").exists(),
             settings.HANDOFF_LEASE_SECONDS * 3, "the sweeper to resume the run")
    # within the lease plus one heartbeat of the surviving worker
    assert time.monotonic() - killed_at < settings.HANDOFF_LEASE_SECONDS + 7
    assert live_stack.workers[victim].poll() is not None  # only the other worker is left
    finished(run_id)
    assert_done_once(run_id)
    assert notes_of(live_stack, run_id) == "first line\n"
    assert Run.objects.get(pk=run_id).recoveries == 1
    assert_viewer_saw_everything(viewer, run_id)


def test_a_worker_killed_under_load_loses_no_run_and_runs_none_twice(
        api: httpx.Client, live_stack: ScaleOutStack) -> None:
    """Thirty runs queued at once (eight at a time in the owner's lane, over both workers):
    one worker is killed while it executes some of them. Every run still ends once, complete,
    its edit applied once and every model turn charged once."""
    run_ids = [start_run(api, edit_then_slow_turns(delay_ms=300)) for _ in range(30)]
    victim = executing_worker(live_stack, run_ids[0])
    wait_for(lambda: len(events(run_ids[0], "model_call")) >= 3, 20, "a few turns")
    live_stack.signal_worker(victim, signal.SIGKILL)
    for run_id in run_ids:
        finished(run_id, timeout=120)
    for run_id in run_ids:
        assert_done_once(run_id)
        assert notes_of(live_stack, run_id) == "first line\n"
    # the runs the killed worker was executing were resumed by the other, each once
    assert Run.objects.filter(pk__in=run_ids, recoveries=1).exists()
    assert not Run.objects.filter(pk__in=run_ids, recoveries__gt=1).exists()


class StalledTransaction(threading.Thread):
    """A session that locks the run's row and then stalls inside its transaction, as a
    worker paused while it stored a batch of events: PostgreSQL ends it after a lease
    period idle (idle_in_transaction_session_timeout), so it cannot block the takeover."""

    def __init__(self, run_id: str) -> None:
        super().__init__(daemon=True)
        self.run_id = run_id
        self.locked = threading.Event()
        self.ended_with = ""

    def run(self) -> None:
        try:
            with transaction.atomic():
                Run.objects.select_for_update().get(pk=self.run_id)
                self.locked.set()
                time.sleep(settings.HANDOFF_LEASE_SECONDS * 5)  # past the takeover's wait
                Run.objects.filter(pk=self.run_id).update(error={"written": "by a stalled session"})
            self.ended_with = "a commit"
        except DatabaseError as exc:
            self.ended_with = str(exc)
        finally:
            connection.close()


@pytest.mark.parametrize("holding_the_run_row", [False, True], ids=["between-writes", "holding-the-run-row"])
def test_a_stalled_worker_that_lost_its_lease_stops_and_writes_nothing_more(
        api: httpx.Client, live_stack: ScaleOutStack, holding_the_run_row: bool) -> None:
    run_id = start_run(api, edit_then_slow_turns())
    stalled = executing_worker(live_stack, run_id)
    wait_for(lambda: len(events(run_id, "model_call")) >= 3, 20, "a few turns")
    lock_holder = StalledTransaction(run_id)
    if holding_the_run_row:
        lock_holder.start()
        assert lock_holder.locked.wait(10)
    live_stack.signal_worker(stalled, signal.SIGSTOP)
    try:
        wait_for(lambda: Run.objects.get(pk=run_id).recoveries == 1
                 and Run.objects.get(pk=run_id).lease_owner, settings.HANDOFF_LEASE_SECONDS * 4,
                 "the other worker to take the run over")
    finally:
        live_stack.signal_worker(stalled, signal.SIGCONT)
    finished(run_id)
    wait_for(lambda: "stopped working on the tree" in live_stack.log(f"worker{stalled}"), 10,
             "the stalled worker to notice it lost its lease")
    time.sleep(2)  # whatever the stalled worker still tried to write would be in by now
    assert_done_once(run_id)
    assert notes_of(live_stack, run_id) == "first line\n"
    if holding_the_run_row:
        lock_holder.join(settings.HANDOFF_LEASE_SECONDS * 6)
        assert "idle-in-transaction timeout" in lock_holder.ended_with
        assert Run.objects.get(pk=run_id).error is None


def _watched_tree(api: httpx.Client, live_stack: ScaleOutStack, session_cookie: str) -> tuple[str, Viewer]:
    """A slow tree started and watched over the websocket until some live events came."""
    root_id = start_run(api, slow_tree(children=2, grandchildren=1, delay_ms=400, turns=4))
    viewer = watch(live_stack.url, root_id, session_cookie)
    wait_for(lambda: sum(len(s) for s in viewer.received.values()) > 10, 20, "some live events")
    return root_id, viewer


def test_a_viewer_refills_from_its_last_seq_when_the_server_restarts(
        api: httpx.Client, live_stack: ScaleOutStack, session_cookie: str) -> None:
    root_id, viewer = _watched_tree(api, live_stack, session_cookie)
    live_stack.restart_server()
    assert finished(root_id).state == "COMPLETE"
    assert_viewer_saw_everything(viewer, root_id)
    assert viewer.connections >= 2


def test_runs_go_on_and_viewers_recover_when_redis_restarts(
        api: httpx.Client, live_stack: ScaleOutStack, session_cookie: str) -> None:
    root_id, viewer = _watched_tree(api, live_stack, session_cookie)
    live_stack.restart_redis()
    assert finished(root_id).state == "COMPLETE"
    assert_gapless(root_id)
    assert_viewer_saw_everything(viewer, root_id)
    # the stack still starts new runs afterwards, and while a viewer watches one that is
    # quiet for longer than a Redis read may wait, the server stays ready and answers fast
    quiet_id = start_run(api, {"script": [{"text": "Thinking.", "delay_ms": 7000},
                                          scripts.yield_turn()]})
    quiet_viewer = watch(live_stack.url, quiet_id, session_cookie)
    for _ in range(6):
        started = time.monotonic()
        probe = httpx.get(f"{live_stack.url}/api/ready", timeout=10)
        assert probe.status_code == 200, probe.text
        assert time.monotonic() - started < 0.5
        time.sleep(1)
    assert finished(quiet_id).state == "COMPLETE"
    assert_viewer_saw_everything(quiet_viewer, quiet_id)


def test_a_dropped_database_connection_mid_run_is_retried_and_nothing_is_lost(
        api: httpx.Client, live_stack: ScaleOutStack) -> None:
    run_id = start_run(api, edit_then_slow_turns(delay_ms=500))
    wait_for(lambda: len(events(run_id, "model_call")) >= 3, 20, "a few turns")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        (terminated,) = cursor.fetchone()
    assert terminated >= 2  # the worker's and at least the server's or the other worker's
    finished(run_id)
    assert_done_once(run_id)


def test_a_parent_timeout_cancels_13_running_descendants_within_a_second(
        api: httpx.Client, live_stack: ScaleOutStack) -> None:
    # 3 children with 4, 3 and 3 leaves: 13 descendants, the leaves thinking for a minute;
    # a subagent may not outlive its parent, so they all get the root's 8 s
    config = slow_tree(children=3, grandchildren=[4, 3, 3], delay_ms=50, turns=1,
                       leaf_delay_ms=60_000, timeout_s=8)
    root_id = start_run(api, config, timeout_s=8)
    wait_for(lambda: Run.objects.filter(root_id=root_id, state="WORKING").count() == 14, 8,
             "all 14 runs of the tree to be working")
    root = finished(root_id, timeout=20)
    assert root.state == "TIMEOUT"
    descendants = Run.objects.filter(root_id=root_id).exclude(pk=root_id)
    assert descendants.count() == 13
    assert set(descendants.values_list("state", flat=True)) == {"CANCELLED"}
    timed_out_at = RunEvent.objects.get(run_id=root_id, type="state", data__state="TIMEOUT").ts
    cancelled = RunEvent.objects.filter(run__root_id=root_id, type="state", data__state="CANCELLED")
    assert cancelled.count() == 13
    # every descendant stopped no later than the root recorded its timeout, and within 1 s
    for event in cancelled:
        assert abs((event.ts - timed_out_at).total_seconds()) < 1.0
    late_calls = RunEvent.objects.filter(run__root_id=root_id, type="model_call",
                                         ts__gt=timed_out_at)
    assert not late_calls.exists()
