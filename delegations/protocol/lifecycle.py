"""The run lifecycle (the HandoffPackage format's hand-off states, extended; docs/protocol.md).

::

    PENDING -> ACCEPTED -> WORKING -> COMPLETE -> RETURNED
       |          |         |  ^         (owner rejects the result; a retry is a new run
       |          |         v  |          with attempt+1 and previous_failure filled)
       |          |   AWAITING_APPROVAL  (an inbox item is open; back to WORKING when decided)
       v          v         v
    TIMEOUT    REJECTED   FAILED / TIMEOUT

- TIMEOUT: from PENDING (not accepted in time) and from WORKING or AWAITING_APPROVAL
  (hard runtime limit, ERR_TIMEOUT).
- REJECTED: from PENDING or ACCEPTED (the packet fails validation or lint, scope or
  budget beyond the parent's, depth limit).
- FAILED: from WORKING; also from AWAITING_APPROVAL (an extension of the HandoffPackage states): a
  person who declines to raise an exhausted budget ends the run right there.
- CANCELLED: from every non-terminal state (a person, the API, or the parent's timeout
  or cancellation, which cascades to every descendant).
- Terminal: COMPLETE, RETURNED, FAILED, TIMEOUT, REJECTED, CANCELLED. The only move out
  of a terminal state is COMPLETE -> RETURNED (the owner's verdict on the result);
  every other terminal state is final.

Mapping to A2A task states (:data:`A2A_STATE`):

============================  ================  ==========================================
RunState                      A2A TaskState     why
============================  ================  ==========================================
PENDING                       submitted         received, not yet picked up
ACCEPTED                      submitted         validated, not yet working
WORKING                       working
AWAITING_APPROVAL             auth-required     a person must authorize a capability or
                                                budget (``input-required`` is reported
                                                instead for a clarification question; see
                                                :func:`a2a_state`)
COMPLETE                      completed
RETURNED                      rejected          the owner rejected the delivered result
FAILED                        failed
TIMEOUT                       failed            A2A has no timeout state
REJECTED                      rejected
CANCELLED                     canceled
============================  ================  ==========================================
"""

from __future__ import annotations

from enum import StrEnum

from .errors import ErrorCode, ProtocolError


class RunState(StrEnum):
    PENDING = "PENDING"
    ACCEPTED = "ACCEPTED"
    WORKING = "WORKING"
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    COMPLETE = "COMPLETE"
    RETURNED = "RETURNED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    REJECTED = "REJECTED"
    CANCELLED = "CANCELLED"


TERMINAL_STATES: frozenset[RunState] = frozenset({
    RunState.COMPLETE, RunState.RETURNED, RunState.FAILED, RunState.TIMEOUT,
    RunState.REJECTED, RunState.CANCELLED,
})
ACTIVE_STATES: frozenset[RunState] = frozenset(RunState) - TERMINAL_STATES

TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    RunState.PENDING: frozenset({RunState.ACCEPTED, RunState.REJECTED, RunState.TIMEOUT,
                                 RunState.CANCELLED}),
    RunState.ACCEPTED: frozenset({RunState.WORKING, RunState.REJECTED, RunState.CANCELLED}),
    RunState.WORKING: frozenset({RunState.COMPLETE, RunState.FAILED, RunState.TIMEOUT,
                                 RunState.AWAITING_APPROVAL, RunState.CANCELLED}),
    RunState.AWAITING_APPROVAL: frozenset({RunState.WORKING, RunState.FAILED, RunState.TIMEOUT,
                                           RunState.CANCELLED}),
    RunState.COMPLETE: frozenset({RunState.RETURNED}),
    RunState.RETURNED: frozenset(),
    RunState.FAILED: frozenset(),
    RunState.TIMEOUT: frozenset(),
    RunState.REJECTED: frozenset(),
    RunState.CANCELLED: frozenset(),
}

A2A_STATE: dict[RunState, str] = {
    RunState.PENDING: "submitted",
    RunState.ACCEPTED: "submitted",
    RunState.WORKING: "working",
    RunState.AWAITING_APPROVAL: "auth-required",
    RunState.COMPLETE: "completed",
    RunState.RETURNED: "rejected",
    RunState.FAILED: "failed",
    RunState.TIMEOUT: "failed",
    RunState.REJECTED: "rejected",
    RunState.CANCELLED: "canceled",
}


def _state(value: RunState | str, role: str) -> RunState:
    if isinstance(value, RunState):
        return value
    if isinstance(value, str) and value.upper() in RunState._value2member_map_:
        return RunState(value.upper())
    known = ", ".join(RunState)
    raise ProtocolError(ErrorCode.ILLEGAL_TRANSITION, f"unknown {role} state {value!r}; expected one of {known}",
                        details={role: str(value)})


def can_transition(current: RunState | str, target: RunState | str) -> bool:
    try:
        return _state(target, "target") in TRANSITIONS[_state(current, "current")]
    except ProtocolError:
        return False


def check_transition(current: RunState | str, target: RunState | str) -> RunState:
    """The target state when ``current -> target`` is legal; ProtocolError otherwise."""
    source, destination = _state(current, "current"), _state(target, "target")
    if destination in TRANSITIONS[source]:
        return destination
    allowed = ", ".join(sorted(TRANSITIONS[source])) or "none: it is terminal"
    raise ProtocolError(
        ErrorCode.ILLEGAL_TRANSITION,
        f"a run cannot go from {source} to {destination}; from {source} it can go to {allowed}",
        details={"from": str(source), "to": str(destination)})


def is_terminal(state: RunState | str) -> bool:
    return _state(state, "state") in TERMINAL_STATES


def a2a_state(state: RunState | str, *, approval_kind: str | None = None) -> str:
    """The A2A task state; a run waiting on a clarification answer is ``input-required``."""
    run_state = _state(state, "state")
    if run_state is RunState.AWAITING_APPROVAL and approval_kind == "clarification":
        return "input-required"
    return A2A_STATE[run_state]
