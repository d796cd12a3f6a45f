from __future__ import annotations

from typing import Any

import pytest

IMMEDIATE = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
DATABASE = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}


@pytest.fixture
def immediate_tasks(settings: Any) -> None:
    """Enqueued runs execute at once, inside the call that enqueued them."""
    settings.TASKS = IMMEDIATE


@pytest.fixture
def queued_tasks(settings: Any) -> None:
    """Enqueued runs wait in the django-tasks-db queue (no worker takes them)."""
    settings.TASKS = DATABASE


@pytest.fixture(autouse=True)
def workspaces(settings: Any, tmp_path: Any) -> None:
    """Runs get their workspace folders under the test's temporary directory."""
    settings.HANDOFF_WORKSPACE_ROOT = tmp_path / "workspaces"
