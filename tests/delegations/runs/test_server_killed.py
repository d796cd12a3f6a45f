"""`make run`'s server killed (SIGKILL) with runs in flight, started there at once (eager
start, holding its lease): a server started again on the same database finishes every
one of them from its checkpoint, and plays no turn twice."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings

from delegations.models import Run, RunCheckpoint, RunEvent
from tests.conftest import _test_database_url, serve, stop_server
from tests.delegations import scripts

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

RUNS = 12
# a note written (a checkpoint after it), then a 3 s model turn: the server dies during it
NOTE_THEN_SLOW_ANSWER = {"script": [
    {"text": "Writing notes.", "tool_calls": [{"name": "apply_edit", "arguments": {
        "edits": "notes.txt\n<<<<<<< SEARCH\n=======\nfirst line\n>>>>>>> REPLACE\n"}}]},
    scripts.yield_turn(delay_ms=3000)]}


def test_runs_in_flight_on_a_killed_server_are_finished_once_by_the_next_one(
        composer_api: dict[str, str], tmp_path: Path) -> None:
    database_url = _test_database_url()
    lane = settings.HANDOFF_LANE_SIZE   # the owner's runs at once; the others wait in line
    with (tmp_path / "first.log").open("w") as log:
        first, url = serve(database_url, log, HANDOFF_LEASE_SECONDS="5")
        try:
            ids = [httpx.post(f"{url}/api/runs", headers=composer_api, timeout=30, json={
                "packet": scripts.packet(capabilities=["fs_write"]),
                "adapter": {"name": "scripted", "config": NOTE_THEN_SLOW_ANSWER}}).json()["id"]
                for _ in range(RUNS)]
            _wait(lambda: RunCheckpoint.objects.filter(run_id__in=ids).count() == lane, ids)
            assert Run.objects.filter(pk__in=ids).exclude(lease_owner="").count() == lane
        finally:
            os.kill(first.pid, signal.SIGKILL)
            first.wait(timeout=10)
    assert not Run.objects.filter(pk__in=ids, state="COMPLETE").exists()
    with (tmp_path / "second.log").open("w") as log:
        second, _ = serve(database_url, log, HANDOFF_LEASE_SECONDS="5")
        try:
            _wait(lambda: Run.objects.filter(pk__in=ids, state="COMPLETE").count() == RUNS, ids, 90)
        finally:
            stop_server(second)
    for run_id in ids:
        events = RunEvent.objects.filter(run_id=run_id)
        assert events.filter(type="result").count() == 1
        assert events.filter(type="model_call").count() == 2   # the note's turn was not played again
    # the runs the dead server held were resumed once; those in line never needed it
    assert sorted(run.recoveries for run in Run.objects.filter(pk__in=ids)) == [0] * (RUNS - lane) + [1] * lane


def _wait(done: Any, ids: list[str], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, {
            run.pk: (run.state, run.lease_owner, run.recoveries, run.error)
            for run in Run.objects.filter(pk__in=ids).exclude(state="COMPLETE")}
        time.sleep(0.2)
