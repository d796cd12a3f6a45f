from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, wait
from typing import Any

import pytest

from delegations.runs.execution import RunHost

IMMEDIATE = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
DATABASE = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}


def assert_ended_runs_have_results() -> None:
    """The runner's promise, checked after every test that executes runs: a run that ended
    hands back a result, unless it was REJECTED (it never worked)."""
    from delegations.models import Run

    ended = Run.objects.filter(events__type="result").exclude(state="REJECTED").distinct()
    silent = [(run.pk, run.state) for run in ended if not run.result]
    assert not silent, f"runs ended with no result: {silent}"


@pytest.fixture
def immediate_tasks(settings: Any) -> Iterator[None]:
    """Enqueued runs execute at once, inside the call that enqueued them."""
    settings.TASKS = IMMEDIATE
    yield
    assert_ended_runs_have_results()


@pytest.fixture
def queued_tasks(settings: Any, monkeypatch: Any) -> Iterator[None]:
    """Enqueued runs wait in the django-tasks-db queue (no worker takes them). Trees the
    test starts on the run host end their turn before the database goes away."""
    settings.TASKS = DATABASE
    started: list[Future[str]] = []
    submit = RunHost.submit

    def submit_and_track(host: RunHost, execution: Any) -> Future[str]:
        started.append(submit(host, execution))
        return started[-1]

    monkeypatch.setattr(RunHost, "submit", submit_and_track)
    yield
    _, running = wait(started, timeout=15)
    assert not running, "a run the test started was still executing"
    assert_ended_runs_have_results()


@pytest.fixture(autouse=True)
def workspaces(settings: Any, tmp_path: Any) -> None:
    """Runs get their workspace folders under the test's temporary directory."""
    settings.HANDOFF_WORKSPACE_ROOT = tmp_path / "workspaces"
