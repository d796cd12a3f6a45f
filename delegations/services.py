"""Run workflows that span several models or reach outside: create, cancel, message, retry,
decide an approval, the owner's lane, and the worker's periodic jobs (sweeper, archiver).

Visibility (who may see and act on which run) is decided by the callers with
``Run.objects.visible_to(user)``; these functions assume the caller may act.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from delegations import live
from delegations.eventlog import PendingEvent, persist_batch
from delegations.execution import adapter_config, has_pending_approvals
from delegations.models import Approval, Delegation, Run, RunCheckpoint, RunMessage
from delegations.models.runs import TERMINAL, new_run_id, session_key_for
from delegations.protocol.adapters import make_adapter
from delegations.protocol.approvals import Decision
from delegations.protocol.checkpoints import Checkpoint
from delegations.protocol.errors import ErrorCode
from delegations.protocol.lifecycle import RunState, can_transition
from delegations.protocol.lint import Severity, lint_packet
from delegations.protocol.packet import HandoffPacket, parse_packet

logger = logging.getLogger(__name__)

MAX_RECOVERIES = 3   # times a run is resumed after losing its worker before it is failed


class RunError(Exception):
    """A request that conflicts with the run's (or item's) state; ``status`` is the HTTP one."""

    def __init__(self, message: str, *, status: int = 409) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


# -- writing events outside a worker ---------------------------------------------------------

def append_events(events: list[tuple[Run, str, dict[str, Any]]]) -> None:
    """Store events (numbered after the runs' last ones) and publish them after commit."""
    now = time.time()
    stored = persist_batch([PendingEvent(run.pk, kind, data, now) for run, kind, data in events])
    transaction.on_commit(lambda: live.publish_events_sync(stored.events, stored.lineage, stored.texts))
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
    parent, when resumed, takes it as finished instead of starting it again."""
    events: list[tuple[Run, str, dict[str, Any]]] = []
    if error is not None:
        events.append((run, "error", error))
    previous = RunState(run.state)
    for step in _state_path(previous, state):
        events.append((run, "state", {"state": step.value, "previous": previous.value}))
        previous = step
    usage = run.usage or {}
    announce = {"run_id": run.pk, "label": run.label, "session_key": run.session_key,
                "status": "timeout" if state == RunState.TIMEOUT else
                ("success" if state == RunState.COMPLETE else "error"),
                "state": state.value, "summary": (error or {}).get("message") or state.value,
                "error": error, "runtime_s": usage.get("runtime_s", 0.0), "usage": usage,
                "result": result}
    events.append((run, "announce", {**announce, "parent_run_id": run.parent_id}))
    data: dict[str, Any] = {"state": state.value, "result": result, "criteria_report": None,
                            "usage": usage}
    if error is not None:
        data["error"] = error
    events.append((run, "result", data))
    append_events(events)
    if not run.is_root:
        _record_outcome_in_checkpoint(run, announce)
    _expire_approvals(Approval.objects.pending().filter(run=run))


def _record_outcome_in_checkpoint(run: Run, announce: dict[str, Any]) -> None:
    # the head is enough: the conversation and adapter config (its parts) stay as they are
    saved = RunCheckpoint.objects.filter(run=run).values_list("data", flat=True).first()
    checkpoint = dict(saved) if isinstance(saved, dict) else Checkpoint(
        run_id=run.pk, parent_run_id=run.parent_id, root_run_id=run.root_run_id, depth=run.depth,
        label=run.label, session_key=run.session_key, packet=run.packet,
        adapter_name=run.adapter_name).model_dump(mode="json")
    checkpoint["state"] = announce["state"]
    checkpoint["outcome"] = {"state": announce["state"], "result": announce["result"],
                             "criteria_report": None, "usage": announce["usage"],
                             "error": announce["error"], "announce": announce, "findings": []}
    RunCheckpoint.objects.update_or_create(run=run, defaults={"data": checkpoint})


def _expire_approvals(approvals: Any) -> None:
    expired = list(approvals)
    if not expired:
        return
    Approval.objects.filter(pk__in=[a.pk for a in expired]).update(
        status=Approval.Status.EXPIRED, decided_at=timezone.now())
    notices = []
    for approval in expired:
        approval.status = Approval.Status.EXPIRED
        notices += live.inbox_message("approval.decided", approval.as_event_data())
    transaction.on_commit(lambda: live.publish_sync(notices))


# -- creating runs ---------------------------------------------------------------------------

def _lint(packet: HandoffPacket) -> list[dict[str, Any]]:
    findings = lint_packet(packet, max_depth=settings.HANDOFF_MAX_DEPTH,
                           approval_required=settings.HANDOFF_APPROVAL_REQUIRED_CAPABILITIES,
                           payload_limit_bytes=settings.HANDOFF_PAYLOAD_LIMIT_BYTES)
    return [finding.as_dict() for finding in findings]


def run_create(*, packet: dict[str, Any] | str | HandoffPacket, adapter: str | None = None,
               config: dict[str, Any] | None = None, owner: Any = None,
               delegation: Delegation | None = None, retry_of: Run | None = None,
               start: bool = True) -> Run:
    """Create a root run. Raises ProtocolError (ERR_INVALID_PACKET with every issue, or
    ERR_INVALID_ADAPTER_CONFIG naming the adapter) for unusable input. A packet with lint
    errors becomes a REJECTED run carrying its findings; otherwise the run waits in PENDING
    for a slot in its owner's lane (``start=False``: for a caller that runs it itself)."""
    parsed = parse_packet(packet)
    name = adapter or settings.HANDOFF_DEFAULT_ADAPTER
    built = make_adapter(name, adapter_config(name, config))
    findings = _lint(parsed)
    run_id = new_run_id()
    run = Run(
        id=run_id, root_id=run_id, owner=owner, delegation=delegation, packet=parsed.to_dict(),
        input_hash=parsed.packet_hash(), label=parsed.label or str(parsed.subagent_type or ""), goal=(parsed.goal or "")[:2000],
        subagent_type=str(parsed.subagent_type or ""), skill=parsed.skill or "",
        agent_id=parsed.agent_id or "", depth=parsed.depth,
        session_key=session_key_for(parsed.agent_id, run_id, depth=0),
        adapter_name=name, adapter_config=built.public_config(),
        capabilities=list(parsed.capabilities), budget=parsed.budget.model_dump(mode="json"),
        timeout_s=parsed.timeout_s, cleanup=parsed.cleanup, attempt=parsed.attempt,
        previous_failure=(parsed.previous_failure.model_dump(mode="json")
                          if parsed.previous_failure is not None else None),
        retry_of=retry_of, findings=findings,
        # a run its caller executes itself never waits in the lane
        allocated_at=None if start else timezone.now())
    errors = [f for f in findings if f["severity"] == Severity.ERROR]
    with transaction.atomic():
        run.save(force_insert=True)
        if errors:
            first = errors[0]
            record_end(run, RunState.REJECTED, error={
                "code": ErrorCode.INVALID_PACKET.value,
                "message": f"The delegation was rejected ({len(errors)} lint error"
                           f"{'s' if len(errors) > 1 else ''}); first: {first['code']} at "
                           f"{first['field']}: {first['message']}",
                "findings": errors})
        elif start:
            dispatch_lane(run.owner_id)
    run.refresh_from_db()
    return run


def run_retry(*, run: Run, user: Any, fix_instructions: str = "") -> Run:
    """A new attempt of a finished run, with seed 001's previous_failure filled in. A
    COMPLETE run is RETURNED first (its owner rejects the result)."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        if not run.is_terminal:
            raise RunError("The run is still going; cancel it first or wait for it to finish.")
        if run.state == RunState.COMPLETE:
            append_events([(run, "state", {"state": RunState.RETURNED.value,
                                           "previous": RunState.COMPLETE.value,
                                           "reason": fix_instructions or "Result returned by its owner."})])
    error = run.error or {}
    result = run.result or {}
    unmet = [f"{item.get('criterion')}: {item.get('detail', '')}".strip(": ")
             for item in (run.criteria_report or {}).get("items", []) if not item.get("met")]
    if error.get("code"):
        unmet.insert(0, f"{error['code']}: {error.get('message', '')}")
    packet = dict(run.packet)
    packet["previous_failure"] = {
        "attempt_number": run.attempt,
        "failure_report": error.get("message") or result.get("summary") or f"The run ended {run.state}.",
        "specific_failures": unmet,
        "fix_instructions": fix_instructions,
    }
    metadata = dict(packet.get("metadata") or {})
    metadata["attempt"] = run.attempt + 1
    packet["metadata"] = metadata
    packet.pop("depth", None)  # a retried subagent runs again on its own, as a root
    return run_create(packet=packet, adapter=run.adapter_name, config=run.adapter_config,
                      owner=user, delegation=run.delegation, retry_of=run)


# -- the owner's lane (seed 004: at most 8 runs at once) ------------------------------------

def dispatch_lane(owner_id: int | None) -> list[str]:
    """Hand the owner's oldest waiting root runs to workers while the lane has room."""
    from delegations.tasks import enqueue_run

    with transaction.atomic():
        if owner_id is not None:
            # one dispatcher per owner at a time (PostgreSQL; SQLite serializes writers anyway)
            list(get_user_model().objects.select_for_update().filter(pk=owner_id).values_list("pk"))
        owner_runs = Run.objects.filter(owner_id=owner_id)
        free = settings.HANDOFF_LANE_SIZE - owner_runs.in_lane().count()
        if free <= 0:
            return []
        ids = list(owner_runs.waiting_in_lane().values_list("pk", flat=True)[:free])
        Run.objects.filter(pk__in=ids, allocated_at__isnull=True).update(allocated_at=timezone.now())
        for run_id in ids:
            enqueue_run(run_id)
    return ids


# -- cancel and messages ---------------------------------------------------------------------

def run_cancel(*, run: Run, reason: str = "") -> Run:
    """Cancel a run and its descendants. A worker executing the tree notices within a
    second and stops it through its runner; a run no worker holds (waiting in the lane,
    parked for a person) is cancelled here and now."""
    why = reason or "Cancelled on request."
    with transaction.atomic():
        root = Run.objects.select_for_update().get(pk=run.root_run_id)
        run = Run.objects.get(pk=run.pk)
        if run.is_terminal:
            raise RunError(f"The run already ended ({run.state}); there is nothing to cancel.")
        Run.objects.filter(pk=run.pk).update(cancel_requested_at=timezone.now())
        if root.holds_live_lease():
            return Run.objects.get(pk=run.pk)
        for member in sorted(run.tree().exclude(state__in=TERMINAL), key=lambda r: -r.depth):
            record_end(member, RunState.CANCELLED, error={"code": "CANCELLED", "message": why})
        if not run.is_root:
            root.refresh_from_db()
            if root.state == RunState.AWAITING_APPROVAL and not has_pending_approvals(root.pk):
                from delegations.tasks import enqueue_run

                enqueue_run(root.pk)
        if run.is_root:
            dispatch_lane(root.owner_id)  # it may have held a slot
    return Run.objects.get(pk=run.pk)


def run_send_message(*, run: Run, text: str, sender: Any = None) -> RunMessage:
    """seed 004 ``send``: the text reaches the subagent as a user message at its next turn."""
    text = text.strip()
    if not text:
        raise RunError("The message is empty; write what the subagent should know.", status=422)
    run.refresh_from_db(fields=["state"])
    if run.is_terminal:
        raise RunError(f"The run already ended ({run.state}); it cannot receive messages.")
    return RunMessage.objects.create(run=run, text=text, sender=sender)


# -- approvals ------------------------------------------------------------------------------

def approval_decide(*, approval: Approval, user: Any, decision: str, comment: str = "",
                    answer: str = "", edited_arguments: dict[str, Any] | None = None) -> Approval:
    """Record a person's decision and resume the parked tree from its checkpoint."""
    try:
        choice = Decision(decision)
    except ValueError:
        raise RunError(f"decision must be one of {', '.join(d.value for d in Decision)}, "
                       f"not {decision!r}.", status=422) from None
    if choice == Decision.REJECT and not comment.strip():
        raise RunError("A rejection needs a comment saying why (it is shown to the run).", status=422)
    if choice == Decision.ANSWER and not answer.strip():
        raise RunError("decision 'answer' needs the answer text in 'answer'.", status=422)
    if choice == Decision.EDIT and not isinstance(edited_arguments, dict):
        raise RunError("decision 'edit' needs 'edited_arguments', a JSON object with the "
                       "tool call's new arguments.", status=422)
    from delegations.tasks import enqueue_run

    with transaction.atomic():
        locked = Approval.objects.select_for_update().select_related("run").get(pk=approval.pk)
        if not locked.is_pending:
            raise RunError(f"This item was already {locked.status}; decisions are final.")
        locked.record(choice, user=user, comment=comment.strip(), answer=answer.strip(),
                      edited_arguments=edited_arguments)
        locked.save()
        notice = live.inbox_message("approval.decided", locked.as_event_data())
        transaction.on_commit(lambda: live.publish_sync(notice))
        enqueue_run(locked.run.root_run_id)
    return locked


# -- periodic jobs (every worker's heartbeat) -------------------------------------------------

def fail_worker_lost(root: Run, detail: str) -> None:
    error = {"code": ErrorCode.WORKER_LOST.value,
             "message": f"The worker executing this run stopped ({detail}) and the run could "
                        f"not be resumed; start it again (retry)."}
    with transaction.atomic():
        for member in sorted(root.tree().exclude(state__in=TERMINAL), key=lambda r: -r.depth):
            record_end(member, RunState.FAILED, error=error)
        dispatch_lane(root.owner_id)


def sweep_runs(now: datetime | None = None) -> dict[str, list[str]]:
    """Runs whose worker died (lease expired): resumed from their checkpoint, or failed with
    ERR_WORKER_LOST; runs handed to a worker that never started them: enqueued again;
    parked trees whose items were all decided: resumed; owners with waiting runs and free
    lane slots: dispatched."""
    from delegations.tasks import enqueue_run

    now = now or timezone.now()
    report: dict[str, list[str]] = {"resumed": [], "failed": [], "requeued": [], "unparked": [],
                                    "dispatched": []}
    for root in Run.objects.lease_expired(now):
        claimed = Run.objects.filter(pk=root.pk, lease_owner=root.lease_owner,
                                     lease_expires_at=root.lease_expires_at).update(
            lease_owner="", lease_expires_at=None, recoveries=root.recoveries + 1)
        if not claimed:
            continue  # another sweeper took it, or the worker renewed just now
        resumable = root.has_checkpoint or root.state in (RunState.PENDING, RunState.ACCEPTED)
        if resumable and root.recoveries < MAX_RECOVERIES:
            with transaction.atomic():
                append_events([(root, "log", {
                    "level": "warning",
                    "message": f"The worker {root.lease_owner} stopped renewing its lease; "
                               f"resuming from the last checkpoint."})])
                enqueue_run(root.pk)
            report["resumed"].append(root.pk)
        else:
            detail = (f"lease of {root.lease_owner} expired"
                      + ("" if resumable else " before the run saved a checkpoint")
                      + (f"; it was resumed {root.recoveries} times already" if resumable else ""))
            fail_worker_lost(root, detail)
            report["failed"].append(root.pk)
    # handed to a worker but never started (the process died between taking the task and
    # taking the lease): enqueue again, at most once per lease period
    stale = now - timedelta(seconds=settings.HANDOFF_LEASE_SECONDS)
    for root_id in list(Run.objects.roots().filter(state=RunState.PENDING, lease_owner="",
                                                   allocated_at__lt=stale).values_list("pk", flat=True)):
        with transaction.atomic():
            Run.objects.filter(pk=root_id).update(allocated_at=now)
            enqueue_run(root_id)
        report["requeued"].append(root_id)
    parked = (Run.objects.roots().filter(state=RunState.AWAITING_APPROVAL, lease_owner="")
              .exclude(pk__in=Approval.objects.pending().values("run__root_id")))
    for root_id in parked.values_list("pk", flat=True):
        with transaction.atomic():
            enqueue_run(root_id)
        report["unparked"].append(root_id)
    owners = set(Run.objects.waiting_in_lane().values_list("owner_id", flat=True))
    for owner_id in owners:
        report["dispatched"] += dispatch_lane(owner_id)
    return report


def archive_runs(now: datetime | None = None) -> dict[str, int]:
    """seed 004 auto-archive: finished trees older than HANDOFF_ARCHIVE_AFTER_MINUTES are
    archived, or deleted when their cleanup is 'delete'."""
    now = now or timezone.now()
    archived = deleted = 0
    for root in Run.objects.archivable(now):
        with transaction.atomic():
            if root.cleanup == Run.Cleanup.DELETE:
                deleted += root.tree().count()
                root.delete()
            else:
                archived += root.tree().update(archived_at=now)
    return {"archived": archived, "deleted": deleted}
