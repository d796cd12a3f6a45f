"""Ending runs no runner is executing, and the other events written outside a worker.

A cancel of a parked run, the sweeper and the API write through :func:`append_events`;
:func:`record_end` writes what a runner would have written when a run ends (error, state,
announce, result), so the log reads the same whichever way a run ended.
"""

from __future__ import annotations

import time
from typing import Any

from django.db import transaction

from delegations.live import feed
from delegations.models import Approval, Run, RunCheckpoint
from delegations.models.approvals import ApprovalQuerySet
from delegations.protocol.checkpoints import Checkpoint
from delegations.protocol.events import announce_data, result_data
from delegations.protocol.lifecycle import RunState, can_transition
from delegations.protocol.results import ResponsePackage
from delegations.protocol.runner import failure_result
from delegations.runs.eventlog import PendingEvent, persist_batch
from delegations.runs.redaction import redactor
from delegations.runs.rollups import subtree_usage


def append_events(events: list[tuple[Run, str, dict[str, Any]]]) -> None:
    """Store events (numbered after the runs' last ones) and publish them after commit."""
    now = time.time()
    stored = persist_batch([PendingEvent(run.pk, kind, data, now) for run, kind, data in events])
    transaction.on_commit(lambda: feed.publish_events_sync(stored.events, stored.lineage, stored.texts))
    for run in {id(run): run for run, _, _ in events}.values():
        run.refresh_from_db()


def _state_path(current: RunState, target: RunState) -> list[RunState]:
    """The states a run not executing anywhere walks through to reach ``target`` (FAILED is
    reached from WORKING only, so a run that never started passes ACCEPTED and WORKING)."""
    if can_transition(current, target):
        return [target]
    path: list[RunState] = []
    state = current
    for step in (RunState.ACCEPTED, RunState.WORKING):
        if can_transition(state, step):
            path.append(step)
            state = step
        if can_transition(state, target):
            return [*path, target]
    return [target]


def record_end(run: Run, state: RunState, *, error: dict[str, Any] | None,
               result: dict[str, Any] | None = None) -> None:
    """End a run no runner is executing, with the events a runner would have written
    (error, state, announce, result); a child's checkpoint records the outcome so that its
    parent, when resumed, takes it as finished instead of starting it again. Like the
    runner, it never ends a run with no result: one that worked and has none gets the
    FAILURE result saying why and what it had done (only a REJECTED run has none)."""
    if result is None and state not in (RunState.REJECTED, RunState.COMPLETE):
        result = _failure_of(run, state, error).model_dump(mode="json")
    events: list[tuple[Run, str, dict[str, Any]]] = []
    if error is not None:
        events.append((run, "error", error))
    previous = RunState(run.state)
    for step in _state_path(previous, state):
        events.append((run, "state", {"state": step.value, "previous": previous.value}))
        previous = step
    # the row's usage is charged only by event batches that load it, so an ancestor's lags
    # its descendants' calls: the event log says what the subtree used
    usage = {**(run.usage or {}), **subtree_usage(run.pk, run.root_run_id)}
    announce = announce_data(run_id=run.pk, label=run.label, session_key=run.session_key,
                             parent_run_id=run.parent_id, state=state, error=error, usage=usage,
                             result=result)
    events.append((run, "announce", announce))
    events.append((run, "result", result_data(state=state, result=result, criteria_report=None,
                                              usage=usage, error=error)))
    append_events(events)
    if not run.is_root:
        _record_outcome_in_checkpoint(run, announce)
    approvals_cancel(Approval.objects.pending().filter(run=run))


def _failure_of(run: Run, state: RunState, error: dict[str, Any] | None) -> ResponsePackage:
    """The run's FAILURE result from what its event log says it did."""
    done = run.events.filter(type__in=("model_call", "tool_result")).values_list("type", "data")
    model_calls = sum(1 for kind, _ in done if kind == "model_call")
    tool_calls = [(str(data.get("name") or "tool"), bool(data.get("ok")))
                  for kind, data in done if kind == "tool_result"]
    return failure_result(state, error, model_calls=model_calls, tool_calls=tool_calls)


def _record_outcome_in_checkpoint(run: Run, announce: dict[str, Any]) -> None:
    # the head is enough: the conversation and adapter config (its parts) stay as they are
    saved = RunCheckpoint.objects.filter(run=run).values_list("data", flat=True).first()
    checkpoint = dict(saved) if isinstance(saved, dict) else Checkpoint(
        run_id=run.pk, parent_run_id=run.parent_id, root_run_id=run.root_run_id, depth=run.depth,
        label=run.label, session_key=run.session_key, packet=run.packet,
        adapter_name=run.adapter_name).model_dump(mode="json")
    checkpoint["state"] = announce["state"]
    # written beside the event log, so redacted here as persist_batch does there
    checkpoint["outcome"] = redactor().value({
        "state": announce["state"], "result": announce["result"], "criteria_report": None,
        "usage": announce["usage"], "error": announce["error"], "announce": announce,
        "findings": []})
    RunCheckpoint.objects.update_or_create(run=run, defaults={"data": checkpoint})


def approvals_cancel(approvals: ApprovalQuerySet) -> list[int]:
    """Cancel the pending items of runs that ended before anyone decided them (status
    ``cancelled``, an ``approval.cancelled`` notice each); returns their ids."""
    cancelled = approvals.cancel()
    if not cancelled:
        return []
    notices = []
    for approval in cancelled:
        notices += feed.inbox_message("approval.cancelled", approval.as_event_data())
    transaction.on_commit(lambda: feed.publish_sync(notices))
    return [a.pk for a in cancelled]
