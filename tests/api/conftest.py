# The run API tests need the same task-backend and workspace fixtures as the run tests.
from tests.delegations.conftest import immediate_tasks, queued_tasks, workspaces

__all__ = ["immediate_tasks", "queued_tasks", "workspaces"]
