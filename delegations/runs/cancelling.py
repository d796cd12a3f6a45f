"""Cancelling runs that no worker holds: a tree waiting in the lane or parked for a person
is ended here (``run_cancel``), and so is one whose cancel was asked for while its worker
was parking it (that worker's last look for requests came before it).

A worker that stops a run of a remote skill cancels its remote task itself (the runner
does, see ``protocol/a2a_subagents``). For a tree ended here, a remote task that waits for
the answer it asked for would wait for good: once the cancel commits, a task cancels it on
the remote agent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from django.db import transaction
from django.tasks import task

from delegations.models import Run, RunCheckpoint
from delegations.models.runs import TERMINAL
from delegations.protocol.a2a_client import cancel
from delegations.protocol.a2a_subagents import REMOTE_ADAPTER
from delegations.protocol.lifecycle import RunState
from delegations.runs.record import record_end
from delegations.runs.runner_setup import remote_agents


def end_cancelled(run: Run, why: str) -> None:
    """End ``run`` and its unfinished descendants CANCELLED, deepest first; their remote
    tasks are cancelled once that commits. The caller holds the tree's root row locked."""
    members = sorted(run.tree().exclude(state__in=TERMINAL), key=lambda member: -member.depth)
    for member in members:
        record_end(member, RunState.CANCELLED, error={"code": "CANCELLED", "message": why})
    cancel_remote_tasks_of(member.pk for member in members)


def end_cancels_asked_meanwhile(root_id: str) -> None:
    """After a worker parked the tree and released it: the cancels asked for while it was
    parking (it saw them too late to stop the runs itself) take effect here."""
    with transaction.atomic():
        root = Run.objects.select_for_update().get(pk=root_id)
        asked = (root.tree().exclude(state__in=TERMINAL).filter(cancel_requested_at__isnull=False)
                 .order_by("depth").first())
        if asked is not None and not root.holds_live_lease():
            end_cancelled(asked, "Cancelled on request.")


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
