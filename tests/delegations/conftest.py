from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, wait
from typing import Any

import pytest

from delegations.runs.execution import RunHost

IMMEDIATE = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
DATABASE = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}


@pytest.fixture
def immediate_tasks(settings: Any) -> None:
    """Enqueued runs execute at once, inside the call that enqueued them."""
    settings.TASKS = IMMEDIATE


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


@pytest.fixture(autouse=True)
def workspaces(settings: Any, tmp_path: Any) -> None:
    """Runs get their workspace folders under the test's temporary directory."""
    settings.HANDOFF_WORKSPACE_ROOT = tmp_path / "workspaces"
