"""What a run reports: its state changes, its checkpoints, and how it ended or parked.

A run that ends FAILED, TIMEOUT or CANCELLED without a result of its own (a hard timeout,
a cancellation, a provider error, a model that ignored the forced last turn, a script
that ran out) gets a FAILURE result written by the runner (:func:`runner_failure`), so
the parent always reads a structured hand-off, as the hand-off protocol asks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..approvals import ApprovalRequest
from ..checkpoints import CheckpointStore
from ..criteria import CriteriaReport
from ..errors import REASON_FOR_CODE, ErrorCode
from ..events import EventSink, EventType, announce_data, result_data
from ..lifecycle import TERMINAL_STATES, RunState, can_transition, check_transition
from ..results import ErrorReport, ResponsePackage, ResultStatus
from .checkpointing import checkpoint_of
from .outcome import RunOutcome
from .state import ActiveRun

# the sink's emit(run_id, type, data)
Emit = Callable[[str, str, dict[str, Any]], Awaitable[None]]

_STATE = EventType.STATE.value
_ERROR = EventType.ERROR.value
_ANNOUNCE = EventType.ANNOUNCE.value
_RESULT = EventType.RESULT.value
_ENDED_WITHOUT_SUCCESS = frozenset({RunState.FAILED, RunState.TIMEOUT, RunState.CANCELLED})


class Reporter:
    """Reports runs to the host: events to its sink, checkpoints to its store. A run that
    ends or parks leaves ``active`` (the runs working in this process)."""

    def __init__(self, sink: EventSink, checkpoints: CheckpointStore, active: dict[str, ActiveRun]) -> None:
        self.emit: Emit = sink.emit
        self.checkpoints = checkpoints
        self.active = active

    async def set_state(self, run: ActiveRun, state: RunState, extra: dict[str, Any] | None = None) -> None:
        previous = run.state
        if previous is state:
            return
        run.state = check_transition(previous, state) if previous is not None else state
        data: dict[str, Any] = {"state": str(state), "previous": str(previous) if previous is not None else None}
        if extra:
            data.update(extra)
        await self.emit(run.run_id, _STATE, data)

    async def save(self, run: ActiveRun, *, parked: ApprovalRequest | None = None,
                   outcome: dict[str, Any] | None = None) -> None:
        await self.checkpoints.save(run.run_id, checkpoint_of(run, parked=parked, outcome=outcome))

    async def park(self, run: ActiveRun, request: ApprovalRequest) -> None:
        """Stop the run where a person's decision is awaited (it resumes from the checkpoint)."""
        if run.state is RunState.WORKING:
            await self.set_state(run, RunState.AWAITING_APPROVAL, {"approval": request.key})
        run.clock.stop()
        run.outcome = RunOutcome(
            run_id=run.run_id, state=RunState.AWAITING_APPROVAL, usage=run.usage,
            findings=run.scope.findings, parked=request, session_key=run.session_key, label=run.label,
            children=list(run.family.children.values()))
        await self.save(run, parked=request)
        self.active.pop(run.run_id, None)

    async def end(self, run: ActiveRun, state: RunState, *, result: ResponsePackage | None = None,
                  criteria: CriteriaReport | None = None, error: dict[str, Any] | None = None) -> None:
        """Put the run in a terminal state and report it (state, announce, result events)."""
        if run.outcome is not None and run.outcome.state in TERMINAL_STATES:
            return
        current = run.state or RunState.PENDING
        if state is RunState.FAILED and not can_transition(current, RunState.FAILED) \
                and not can_transition(current, RunState.WORKING):
            state = RunState.REJECTED   # it never started working: the delegation is refused
        clock = run.clock
        if clock.started_at:
            run.usage.runtime_s = clock.elapsed()
            clock.started_at = 0.0
        if result is None and state in _ENDED_WITHOUT_SUCCESS:
            result = runner_failure(run, state, error)
        result_dict = _result_dict(result) if result is not None else None
        criteria_dict = criteria.as_dict() if criteria is not None else None
        usage_dict = run.usage.as_dict()
        found = run.scope.findings
        findings = [finding.as_dict() for finding in found] if found else []
        state_name = str(state)
        announce = announce_data(
            run_id=run.run_id, label=run.label, session_key=run.session_key,
            parent_run_id=run.parent.run_id if run.parent is not None else None,
            state=state_name, error=error, usage=usage_dict, result=result_dict)
        run.outcome = RunOutcome(
            run_id=run.run_id, state=state, result=result, usage=run.usage,
            criteria_report=criteria_dict, findings=found, error=error, announce=announce,
            session_key=run.session_key, label=run.label, children=list(run.family.children.values()))
        self.active.pop(run.run_id, None)
        if error is not None and state is not RunState.CANCELLED:
            await self.emit(run.run_id, _ERROR, error)
        await self._enter_terminal(run, state)
        await self.emit(run.run_id, _ANNOUNCE, announce)
        await self.emit(run.run_id, _RESULT, result_data(
            state=state_name, result=result_dict, criteria_report=criteria_dict, usage=usage_dict,
            error=error, findings=findings))
        if run.scope.packet is not None or run.parent is not None:
            await self.save(run, outcome={"state": state_name, "result": result_dict,
                                          "criteria_report": criteria_dict, "usage": usage_dict,
                                          "error": error, "announce": announce, "findings": findings})

    async def _enter_terminal(self, run: ActiveRun, state: RunState) -> None:
        if run.state is None:
            run.state = RunState.PENDING
            await self.emit(run.run_id, _STATE, {"state": "PENDING", "previous": None,
                                                 "depth": run.depth, "label": run.label})
        if not can_transition(run.state, state) and can_transition(run.state, RunState.WORKING):
            # FAILED is reached from WORKING only: an approval wait is left first
            await self.set_state(run, RunState.WORKING)
        await self.set_state(run, state)


def runner_failure(run: ActiveRun, state: RunState, error: dict[str, Any] | None) -> ResponsePackage:
    """The FAILURE result the runner hands back for a run that ended without one: the
    error as its ``error_report``, and a summary of what the run had done so far."""
    chat = run.chat
    work = [entry for entry in chat.messages if not entry.get("example")]
    model_calls = sum(1 for entry in work if entry.get("role") == "assistant")
    tools = [(str(entry.get("name") or "tool"), "failure" not in entry)
             for entry in work if entry.get("role") == "tool"]
    turn = chat.turn
    if turn is not None:
        tools += [(str(record.get("name") or "tool"), bool(record.get("ok")))
                  for call_id, record in turn.completed.items() if call_id not in chat.answered]
    return failure_result(state, error, model_calls=model_calls, tool_calls=tools)


def failure_result(state: RunState, error: dict[str, Any] | None, *, model_calls: int,
                   tool_calls: list[tuple[str, bool]]) -> ResponsePackage:
    """A FAILURE result written for a run, not by its model (no silent failure): ``error``
    as its ``error_report`` and a summary of the model calls and tool calls (name, ok) it
    made. Used by the runner and by hosts ending a run no runner is executing."""
    error = error or {}
    code = str(error.get("code") or ErrorCode.TOOL_FAILURE.value)
    message = str(error.get("message") or f"The run ended {state} without a result.")
    done = f"{model_calls} model call{'' if model_calls == 1 else 's'}"
    if tool_calls:
        last = ", ".join(f"{name} {'ok' if ok else 'failed'}" for name, ok in tool_calls[-3:])
        done += f" and {len(tool_calls)} tool call{'' if len(tool_calls) == 1 else 's'} (the last: {last})"
    else:
        done += " and no tool calls"
    details = dict(error.get("details") or {})
    details.update({"state": str(state), "written_by": "runner", "model_calls": model_calls,
                    "tool_calls": len(tool_calls)})
    return ResponsePackage(
        status=ResultStatus.FAILURE, summary=f"{message} Done so far: {done}.",
        error_report=ErrorReport(code=code, message=message, failed_reason=REASON_FOR_CODE.get(code),
                                 details=details))


def _result_dict(result: ResponsePackage) -> dict[str, Any]:
    """``result.model_dump()``, its ``output_payload`` shared rather than copied.

    A coordinator's payload holds its children's result dicts (which hold theirs): a copy
    would duplicate every descendant's result at every level of the tree, and the events
    and checkpoints keep them all. Dumping leaves plain JSON data as it is, so sharing gives
    equal values.
    """
    data = result.model_dump(exclude={"output_payload"})   # a set: pydantic reads a frozenset far more slowly
    # field order kept: status, output_payload, then the rest
    return {"status": data.pop("status"), "output_payload": result.output_payload, **data}
