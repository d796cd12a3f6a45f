"""Run workflows a person or a program starts: create, retry, cancel, send a message.

Visibility (who may see and act on which run) is decided by the callers with
``Run.objects.visible_to(user)``; these functions assume the caller may act.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any, NoReturn

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from delegations.models import Approval, Delegation, Run, RunMessage
from delegations.models.runs import RunQuerySet, new_run_id
from delegations.protocol.adapters import ModelAdapter, make_adapter
from delegations.protocol.errors import ErrorCode
from delegations.protocol.lifecycle import RunState
from delegations.protocol.lint import rejection_message
from delegations.protocol.packet import HandoffPacket, parse_packet
from delegations.protocol.sessions import session_key
from delegations.protocol.text_limits import MAX_MESSAGE_CHARS
from delegations.protocol.trace_context import parse_traceparent
from delegations.refusals import Refusal
from delegations.runs.cancelling import end_cancelled
from delegations.runs.eventlog import insert_runs
from delegations.runs.lint import LintReport, lint_as_run
from delegations.runs.queue import (
    LaneCounts,
    dispatch_lane,
    enqueue_run,
    lane_counts,
    runs_in_caller,
    start_when_committed,
)
from delegations.runs.record import append_events, record_end
from delegations.runs.redaction import redactor
from delegations.runs.runner_setup import adapter_config


class RunError(Refusal):
    """A request that conflicts with the run's state (409 unless said), or that the server
    cannot take now (429 with ``retry_after``)."""


# -- creating runs ---------------------------------------------------------------------------

def _pinned(packet: HandoffPacket, report: LintReport) -> HandoffPacket:
    """The packet as composed, with the skill it names pinned to the exact version that
    will run (the runner merges the skill in again from the registry)."""
    if report.refusal is not None:   # no such skill, or input its input_schema refuses
        raise report.refusal
    if not packet.skill or report.parsed is None:
        return packet
    return packet.model_copy(update={"skill": report.parsed.skill})


RETRY_AFTER_MAX_S = 10   # the longest Retry-After a refused run is told to wait


def _check_room_to_wait(owner: Any, counts: LaneCounts) -> None:
    """Refuse (RunError 429 with Retry-After) a run that would wait to start behind the
    owner's HANDOFF_MAX_PENDING_RUNS_PER_OWNER waiting runs, or everyone's
    HANDOFF_MAX_PENDING_RUNS: without a bound a client faster than the workers grows the
    backlog forever (measured: 45.7 runs/s accepted while 5.25/s finished, 700 waiting, a
    median of 31 s from creation to finish)."""
    owner_id = getattr(owner, "pk", None)
    mine, per_owner = counts.mine_waiting_to_start, settings.HANDOFF_MAX_PENDING_RUNS_PER_OWNER
    if mine >= per_owner:
        _refuse_waiting(mine, "of yours", per_owner, Run.objects.roots().filter(owner_id=owner_id))
    everyone, limit = counts.waiting_to_start, settings.HANDOFF_MAX_PENDING_RUNS
    if everyone >= limit:
        _refuse_waiting(everyone, "on this server", limit, Run.objects.roots())


def _refuse_waiting(count: int, whose: str, limit: int, kind: RunQuerySet) -> NoReturn:
    """Say how many wait and when to ask again: about when one of them has started, one over
    the rate at which runs of their ``kind`` finished in the last RETRY_AFTER_MAX_S seconds,
    and at most that. A rate over a minute came out at 60 s while a burst's first runs were
    still finishing, and the load test's refused clients sat out its whole window."""
    since = timezone.now() - timedelta(seconds=RETRY_AFTER_MAX_S)
    finished = kind.filter(finished_at__gte=since).count()
    wait_s = max(1, math.ceil(RETRY_AFTER_MAX_S / finished)) if finished else RETRY_AFTER_MAX_S
    raise RunError(
        f"Not started: {count} runs {whose} are waiting to start, and {limit} is the most that "
        f"may wait. Try again in {wait_s} s, once some have started, or cancel waiting runs "
        f"you no longer need.", status=429, retry_after=wait_s,
        details={"waiting": count, "limit": limit})


def _adapter(name: str, config: dict[str, Any] | None) -> ModelAdapter:
    """The run's adapter, its config checked (ProtocolError naming the key otherwise)."""
    return make_adapter(name, adapter_config(name, config))


def _continued(traceparent: str) -> str:
    context = parse_traceparent(traceparent)
    return context.traceparent if context is not None else ""


def run_create(*, packet: dict[str, Any] | str | HandoffPacket, adapter: str | None = None,
               config: dict[str, Any] | None = None, owner: Any = None,
               delegation: Delegation | None = None, retry_of: Run | None = None,
               start: bool = True, linted: LintReport | None = None, traceparent: str = "") -> Run:
    """Create a root run. Raises ProtocolError (ERR_INVALID_PACKET with every issue, among
    them a skill the registry lacks or input its input_schema refuses, or
    ERR_INVALID_ADAPTER_CONFIG naming the adapter) for unusable input, before anything is
    written. A packet naming a skill runs the version it resolves to, recorded as
    ``name@version``. A packet with lint errors, linted as it will run (:func:`lint_as_run`:
    its skill merged, the runner's limits), becomes a REJECTED run carrying its findings, as
    the runner would reject it;
    otherwise the run waits in PENDING for a slot in its owner's lane (``start=False``: for
    a caller that runs it itself), unless too many runs wait already (RunError 429, with
    how many and when to try again; nothing is written). ``linted``: the caller's own
    :func:`lint_as_run` report of this same ``packet``, so a request lints it once.
    ``traceparent``: the W3C header of the request that asked for the run, whose trace the
    run tree continues (a malformed one is ignored, as the spec says: the tree starts a
    trace of its own)."""
    parsed = parse_packet(packet)
    report = linted if linted is not None else lint_as_run(parsed)
    parsed = _pinned(parsed, report)
    name = adapter or settings.HANDOFF_DEFAULT_ADAPTER
    built = _adapter(name, config)
    findings, errors = report.findings, report.error_findings
    run_id = new_run_id()
    run = Run(
        id=run_id, root_id=run_id, owner=owner, delegation=delegation, packet=parsed.to_dict(),
        # unlabeled, a run is named by its delegation, else by its goal (run_name): by its
        # role, every run of a skill was called "reviewer"
        input_hash=parsed.packet_hash(), label=parsed.label or (delegation.name if delegation else ""),
        goal=(parsed.goal or "")[:2000],
        subagent_type=str(parsed.subagent_type or ""), skill=parsed.skill or "",
        agent_id=parsed.agent_id or "", depth=parsed.depth,
        session_key=session_key(parsed.agent_id, run_id),
        # a scripted run's script is its model's words: kept as the event log keeps them
        adapter_name=name, adapter_config=redactor().value(built.public_config()),
        capabilities=list(parsed.capabilities), budget=parsed.budget.model_dump(mode="json"),
        timeout_s=parsed.timeout_s, cleanup=parsed.cleanup, attempt=parsed.attempt,
        previous_failure=(parsed.previous_failure.model_dump(mode="json")
                          if parsed.previous_failure is not None else None),
        retry_of=retry_of, findings=findings, traceparent=_continued(traceparent),
        # a run its caller executes itself never waits in the lane
        allocated_at=None if start else timezone.now())
    with transaction.atomic():
        if start and not errors:
            counts = lane_counts(run.owner_id)
            _check_room_to_wait(owner, counts)   # nothing is written when refused
            if counts.room_now:   # a slot at once (else a slot freed hands it one, oldest first)
                run.allocated_at = timezone.now()
                start_when_committed(run)
        insert_runs([run])
        if errors:
            record_end(run, RunState.REJECTED, error={
                "code": ErrorCode.INVALID_PACKET.value, "message": rejection_message(errors),
                "findings": errors})
    if errors or runs_in_caller():   # recorded REJECTED, or run already (immediate backend)
        run.refresh_from_db()
        if owner is not None:
            run.owner = owner   # as the refresh dropped it: read again for the answer, it cost a query
    return run


def run_retry(*, run: Run, user: Any, fix_instructions: str = "") -> Run:
    """A new attempt of a finished run, with the agloop previous_failure filled in. A
    COMPLETE run is RETURNED first (its owner rejects the result)."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        if not run.is_terminal:
            raise RunError("The run is still going; cancel it first or wait for it to finish.")
        # before a COMPLETE run is returned for an attempt not made
        _check_room_to_wait(user, lane_counts(getattr(user, "pk", None)))
        _adapter(run.adapter_name, run.adapter_config)  # a config stored before endpoints: refused
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


# -- cancel and messages ---------------------------------------------------------------------

def run_cancel(*, run: Run, reason: str = "") -> Run:
    """Cancel a run and its descendants. A worker executing the tree notices within a
    second and stops it through its runner; a run no worker holds (waiting in the lane,
    parked for a person) is cancelled here and now (and the remote A2A tasks its runs
    left waiting are cancelled once that commits)."""
    why = reason or "Cancelled on request."
    with transaction.atomic():
        root = Run.objects.select_for_update().get(pk=run.root_run_id)
        run = Run.objects.get(pk=run.pk)
        if run.is_terminal:
            raise RunError(f"The run already ended ({run.state}); there is nothing to cancel.")
        Run.objects.filter(pk=run.pk).update(cancel_requested_at=timezone.now())
        if root.holds_live_lease():
            return Run.objects.get(pk=run.pk)
        end_cancelled(run, why)
        if not run.is_root:
            root.refresh_from_db()
            parked = root.state == RunState.AWAITING_APPROVAL
            if parked and not Approval.objects.pending_in_tree(root.pk).exists():
                enqueue_run(root.pk)
        if run.is_root:
            dispatch_lane(root.owner_id)  # it may have held a slot
    return Run.objects.get(pk=run.pk)


def run_send_message(*, run: Run, text: str, sender: Any = None) -> RunMessage:
    """OpenClaw's ``send``: the text reaches the subagent as a user message at its next turn.
    Every way in (API, run page, MCP, A2A, ``manage.py subagents send``) sends through here.
    Refused (422) when empty or longer than MAX_MESSAGE_CHARS, and (409) once the run has
    ended or a cancel was asked for it or a run above it: a stopping run reads no more."""
    text = text.strip()
    if not text:
        raise RunError("The message is empty; write what the subagent should know.", status=422)
    if len(text) > MAX_MESSAGE_CHARS:
        raise RunError(f"The message is {len(text):,} characters; a message to a run holds at most "
                       f"{MAX_MESSAGE_CHARS:,} characters. Shorten it, or send it as several "
                       "messages.", status=422)
    with transaction.atomic():
        # the root's lock, as run_cancel takes it: a cancel and a message do not cross
        list(Run.objects.select_for_update().filter(pk=run.root_run_id).values_list("pk", flat=True))
        run.refresh_from_db(fields=["state", "cancel_requested_at"])
        if run.is_terminal:
            raise RunError(f"The run already ended ({run.state}); it cannot receive messages. "
                           "Retry it, or start a new run, with what you wanted to say.")
        if run.is_stopping():
            whose = "this run" if run.cancel_requested_at is not None else "a run above this one"
            raise RunError(f"A cancel was requested for {whose}; it is stopping and reads no more "
                           "messages. Once it has ended, retry it, or start a new run, with what "
                           "you wanted to say.")
        return RunMessage.objects.create(run=run, text=text, sender=sender)
