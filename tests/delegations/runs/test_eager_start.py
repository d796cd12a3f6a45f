"""Eager start: a run created in a process whose worker takes tasks (``manage.py serve``'s
embedded one) starts on that process's run host as its row commits, holding a lease from
the start, with no task in the queue; a full host, or a process without a worker, queues it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone
from django_tasks_db.models import DBTaskResult

from delegations.models import Run
from delegations.runs import queue
from delegations.runs.execution import RunHost
from delegations.runs.maintenance import sweep_runs
from delegations.runs.workflows import run_create
from tests.delegations import scripts

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the run"
        time.sleep(0.02)


@pytest.fixture
def worker_here(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process's run host takes new runs, as while an embedded worker runs."""
    monkeypatch.setattr(RunHost, "takes_new_runs", True)
    yield


def test_a_new_run_starts_on_the_host_of_the_process_that_made_it_without_a_task(
        queued_tasks: None, worker_here: None, composer: Any) -> None:
    run = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(), owner=composer)
    # the lease it was inserted with is given back once the tree ended
    wait_for(lambda: Run.objects.filter(pk=run.pk, state="COMPLETE", lease_owner="").exists())
    assert Run.objects.get(pk=run.pk).result["output_payload"] == {"answer": 42}
    assert DBTaskResult.objects.count() == 0


def test_a_full_host_gives_the_lease_back_and_queues_the_new_run(
        queued_tasks: None, worker_here: None, composer: Any) -> None:
    room = RunHost.get().room
    taken = 0
    while room.acquire(blocking=False):
        taken += 1
    try:
        run = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(), owner=composer)
    finally:
        for _ in range(taken):
            room.release()
    stored = Run.objects.get(pk=run.pk)
    assert stored.state == "PENDING" and stored.lease_owner == ""   # a worker may take it
    assert [task.args_kwargs["args"] for task in DBTaskResult.objects.all()] == [[run.pk]]


def test_without_a_worker_in_the_process_a_new_run_is_queued(queued_tasks: None, composer: Any) -> None:
    assert RunHost.takes_new_runs is False
    run = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(), owner=composer)
    assert Run.objects.get(pk=run.pk).lease_owner == ""
    assert DBTaskResult.objects.count() == 1


def test_a_new_run_whose_process_died_before_it_started_is_queued_again_by_the_sweeper(
        queued_tasks: None, worker_here: None, composer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queue, "_start_here", lambda run, owner: None)   # the process died at the commit
    run = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(), owner=composer)
    held = Run.objects.get(pk=run.pk)
    assert held.state == "PENDING" and held.lease_owner   # inserted holding its lease
    assert sweep_runs()["resumed"] == []   # the lease has not run out yet
    Run.objects.filter(pk=run.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=settings.HANDOFF_LEASE_SECONDS))
    assert sweep_runs()["resumed"] == [run.pk]
    assert [task.args_kwargs["args"] for task in DBTaskResult.objects.all()] == [[run.pk]]
