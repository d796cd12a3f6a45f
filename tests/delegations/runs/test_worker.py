"""The embedded worker thread (``manage.py serve``) and the django-tasks-db queue."""

from __future__ import annotations

import time

import pytest
from django.tasks import TaskResultStatus

from delegations.models.runs import new_run_id
from delegations.runs.queue import execute_run
from delegations.runs.worker import WorkerThread

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def test_a_task_enqueued_in_the_workers_process_starts_without_waiting_for_the_next_poll(
        queued_tasks: None) -> None:
    worker = WorkerThread(interval=60)
    worker.start()
    try:
        time.sleep(0.5)  # its first poll found the queue empty: the next one is a minute away
        enqueued_at = time.monotonic()
        result = execute_run.enqueue(new_run_id())  # an unknown run: the task just returns
        while result.status != TaskResultStatus.SUCCESSFUL and time.monotonic() - enqueued_at < 10:
            time.sleep(0.02)
            result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL
        assert time.monotonic() - enqueued_at < 5
    finally:
        worker.stop()
        worker.join(timeout=10)
    assert not worker.is_alive()


def test_an_error_in_one_round_of_tasks_leaves_the_worker_polling(
        queued_tasks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    worker = WorkerThread(interval=0.05)
    rounds: list[str] = []
    run_tasks = worker._worker.run

    def first_round_fails() -> None:
        rounds.append("round")
        if len(rounds) == 1:   # e.g. the task's own row deleted while it ran
            raise RuntimeError("the task's row is gone")
        run_tasks()

    monkeypatch.setattr(worker._worker, "run", first_round_fails)
    worker.start()
    try:
        result = execute_run.enqueue(new_run_id())
        started = time.monotonic()
        while result.status != TaskResultStatus.SUCCESSFUL and time.monotonic() - started < 10:
            time.sleep(0.02)
            result.refresh()
        assert worker.is_alive() and len(rounds) >= 2
        assert result.status == TaskResultStatus.SUCCESSFUL
    finally:
        worker.stop()
        worker.join(timeout=10)
    assert not worker.is_alive()


def test_settling_the_heap_freezes_what_startup_made_and_makes_young_collections_rarer() -> None:
    import gc

    from delegations.runs.worker import YOUNG_COLLECTION_THRESHOLD, settle_heap

    threshold = gc.get_threshold()
    try:
        settle_heap()
        assert gc.get_freeze_count() > 10_000
        assert gc.get_threshold() == (YOUNG_COLLECTION_THRESHOLD, *threshold[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
