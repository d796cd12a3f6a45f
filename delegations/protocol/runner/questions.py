"""Asking a person: approval requests put to the host's gate.

An approval's key is ``<run id>:<kind>:<step>``, the step being the tool call's id
(``capability``, ``capability_request``), the budget axis (``budget``) or the
clarification's number: the same question asked again after a resume has the same key,
so it is announced once however often the run parks and resumes.
"""

from __future__ import annotations

from typing import Any

from ..approvals import ApprovalDecision, ApprovalGate, ApprovalKind, ApprovalRequest
from ..events import EventType
from ..lifecycle import RunState
from .reporting import Reporter
from .state import ActiveRun

_APPROVAL = EventType.APPROVAL.value


def approval_key(run_id: str, kind: ApprovalKind, step: str) -> str:
    return f"{run_id}:{kind.value}:{step}"


class Questions:
    """Puts a run's questions to the gate, announcing each once (events, AWAITING_APPROVAL)."""

    def __init__(self, gate: ApprovalGate, reporter: Reporter) -> None:
        self.gate = gate
        self.reporter = reporter

    async def ask(self, run: ActiveRun, kind: ApprovalKind, step: str, title: str,
                  payload: dict[str, Any], risk: str) -> ApprovalDecision:
        """The gate's decision. Raises ``RunParked`` (from the gate) when it must wait."""
        key = approval_key(run.run_id, kind, step)
        request = ApprovalRequest(key=key, run_id=run.run_id, kind=kind, title=title, payload=payload,
                                  risk=risk)
        emit = self.reporter.emit
        asked = run.attempts.asked
        resumed = key in asked
        if not resumed:
            await emit(run.run_id, _APPROVAL, {"key": key, "kind": kind.value, "title": title,
                                               "payload": payload, "risk": risk})
            if run.state is RunState.WORKING:
                await self.reporter.set_state(run, RunState.AWAITING_APPROVAL, {"approval": key})
            asked.add(key)
            # recorded before waiting: a worker that dies while the gate decides resumes
            # without announcing the question a second time
            await self.reporter.save(run)
        # asked before a resume: the gate answers from what was decided meanwhile (or parks
        # the run again, which then leaves no event at all)
        decision = await self.gate.decide(request)
        asked.discard(key)
        await self.reporter.set_state(run, RunState.WORKING, {"resumed": True} if resumed else None)
        decided: dict[str, Any] = {
            "key": request.key, "kind": kind.value, "title": title,
            "decision": decision.decision.value, "comment": decision.comment,
            "decided_by": decision.decided_by}
        # the run's log says what a person changed, not only that they decided
        if decision.edited_arguments is not None:
            decided["edited_arguments"] = decision.edited_arguments
        if decision.always_allow:
            decided["always_allow"] = True
        if decision.budget_limit:
            decided["budget_limit"] = decision.budget_limit
        await emit(run.run_id, _APPROVAL, decided)
        return decision


def awaits_decision(run: ActiveRun, call_id: str) -> bool:
    """Whether tool call ``call_id`` was put to a person before a resume (and so was
    announced already)."""
    asked = run.attempts.asked
    return (approval_key(run.run_id, ApprovalKind.CAPABILITY, call_id) in asked
            or approval_key(run.run_id, ApprovalKind.CAPABILITY_REQUEST, call_id) in asked)
