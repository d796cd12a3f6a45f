"""The remote A2A tasks of runs cancelled while no worker held them.

A worker that stops a run of a remote skill cancels its remote task itself (the runner
does, see ``protocol/a2a_subagents``). A tree parked for a person is cancelled in the
database instead (``run_cancel``), so a remote task that waits for the answer it asked for
would wait for good: once the cancel commits, a task cancels it on the remote agent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from django.db import transaction
from django.tasks import task

from delegations.models import RunCheckpoint
from delegations.protocol.a2a_client import cancel
from delegations.protocol.a2a_subagents import REMOTE_ADAPTER
from delegations.runs.runner_setup import remote_agents


def cancel_remote_tasks_of(run_ids: Iterable[str]) -> None:
    """Queue the cancel of the remote tasks these runs sent, once the transaction commits."""
    sent = list(RunCheckpoint.objects.filter(run_id__in=list(run_ids), data__adapter_name=REMOTE_ADAPTER)
                .exclude(data__adapter_state__task_id="").values_list("run_id", flat=True))
    if sent:
        transaction.on_commit(lambda: cancel_remote_tasks.enqueue(sent))


@task()
def cancel_remote_tasks(run_ids: list[str]) -> int:
    """Cancel each run's remote task, best effort (the agent may be gone, the task ended);
    how many were asked to cancel."""
    agents = remote_agents()
    asked = 0
    for run_id in run_ids:
        data = RunCheckpoint.data_of(run_id) or {}
        task_id = str((data.get("adapter_state") or {}).get("task_id") or "")
        remote = agents.by_ref(str((data.get("adapter_config") or {}).get("model") or "")) if agents else None
        if agents is None or remote is None or not task_id:
            continue
        asyncio.run(cancel(remote.agent, task_id, environ=agents.environ))
        asked += 1
    return asked
