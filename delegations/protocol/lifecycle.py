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

Mapping to A2A 1.0 task states (:data:`A2A_STATE`; :func:`read_a2a_state` also reads the
0.3 spellings such as ``auth-required``):

============================  ===========================  ================================
RunState                      A2A TaskState                why
============================  ===========================  ================================
PENDING                       TASK_STATE_SUBMITTED         received, not yet picked up
ACCEPTED                      TASK_STATE_SUBMITTED         validated, not yet working
WORKING                       TASK_STATE_WORKING
AWAITING_APPROVAL             TASK_STATE_AUTH_REQUIRED     a person must authorize a
                                                           capability, budget or invalid
                                                           result (TASK_STATE_INPUT_REQUIRED
                                                           for a clarification; see
                                                           :func:`a2a_state`)
COMPLETE                      TASK_STATE_COMPLETED
RETURNED                      TASK_STATE_REJECTED          the owner rejected the result
FAILED                        TASK_STATE_FAILED
TIMEOUT                       TASK_STATE_FAILED            A2A has no timeout state
REJECTED                      TASK_STATE_REJECTED
CANCELLED                     TASK_STATE_CANCELED
============================  ===========================  ================================

An inbox item's lifecycle (:class:`ApprovalStatus`, :data:`APPROVAL_TRANSITIONS`): an item
opens ``pending`` and closes once, for good::

    pending -> approved | rejected | answered | edited | retried   (a person decided)
            -> expired                                              (its deadline passed)
            -> cancelled                                            (its run ended first)

A resumed run asks again with the same key and finds its item as it was left; nothing
reopens a closed item, so deciding an expired one or expiring a decided one is refused.
"""

from __future__ import annotations

from enum import StrEnum

from .approvals import Decision
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
    RunState.PENDING: "TASK_STATE_SUBMITTED",
    RunState.ACCEPTED: "TASK_STATE_SUBMITTED",
    RunState.WORKING: "TASK_STATE_WORKING",
    RunState.AWAITING_APPROVAL: "TASK_STATE_AUTH_REQUIRED",
    RunState.COMPLETE: "TASK_STATE_COMPLETED",
    RunState.RETURNED: "TASK_STATE_REJECTED",
    RunState.FAILED: "TASK_STATE_FAILED",
    RunState.TIMEOUT: "TASK_STATE_FAILED",
    RunState.REJECTED: "TASK_STATE_REJECTED",
    RunState.CANCELLED: "TASK_STATE_CANCELED",
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
    """The A2A 1.0 task state; a run waiting on a clarification answer is input-required."""
    run_state = _state(state, "state")
    if run_state is RunState.AWAITING_APPROVAL and approval_kind == "clarification":
        return "TASK_STATE_INPUT_REQUIRED"
    return A2A_STATE[run_state]


def read_a2a_state(text: str) -> str:
    """An A2A task state as 1.0 spells it, from either spelling: ``TASK_STATE_AUTH_REQUIRED``
    or 0.3's ``auth-required`` (ProtocolError for anything else)."""
    spelled = text.strip().upper().replace("-", "_")
    name = spelled if spelled.startswith("TASK_STATE_") else f"TASK_STATE_{spelled}"
    if name in A2A_TASK_STATES:
        return name
    raise ProtocolError(ErrorCode.ILLEGAL_TRANSITION, f"unknown A2A task state {text!r}; expected "
                        f"one of {', '.join(sorted(A2A_TASK_STATES))} (or their 0.3 spellings)")


A2A_TASK_STATES = frozenset({*A2A_STATE.values(), "TASK_STATE_INPUT_REQUIRED"})


class ApprovalStatus(StrEnum):
    """Where an inbox item stands (the model's ``status`` column holds these values)."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    ANSWERED = "answered"
    EDITED = "edited"
    RETRIED = "retried"       # an invalid result sent back for a fresh attempt
    EXPIRED = "expired"       # its deadline passed before anyone decided: the run timed out
    CANCELLED = "cancelled"   # its run ended (cancelled, timed out, failed) before anyone decided


# what each decision makes of the item
STATUS_FOR_DECISION: dict[Decision, ApprovalStatus] = {
    Decision.APPROVE: ApprovalStatus.APPROVED, Decision.REJECT: ApprovalStatus.REJECTED,
    Decision.ANSWER: ApprovalStatus.ANSWERED, Decision.EDIT: ApprovalStatus.EDITED,
    Decision.RETRY: ApprovalStatus.RETRIED,
}
DECIDED_STATUSES: frozenset[ApprovalStatus] = frozenset(STATUS_FOR_DECISION.values())

APPROVAL_TRANSITIONS: dict[ApprovalStatus, frozenset[ApprovalStatus]] = {
    ApprovalStatus.PENDING: DECIDED_STATUSES | {ApprovalStatus.EXPIRED, ApprovalStatus.CANCELLED},
    ApprovalStatus.APPROVED: frozenset(),
    ApprovalStatus.REJECTED: frozenset(),
    ApprovalStatus.ANSWERED: frozenset(),
    ApprovalStatus.EDITED: frozenset(),
    ApprovalStatus.RETRIED: frozenset(),
    ApprovalStatus.EXPIRED: frozenset(),
    ApprovalStatus.CANCELLED: frozenset(),
}
# closed: nobody can decide the item any more, and nothing moves it again
CLOSED_STATUSES: frozenset[ApprovalStatus] = frozenset(
    status for status, targets in APPROVAL_TRANSITIONS.items() if not targets)


def _approval_status(value: ApprovalStatus | str, role: str) -> ApprovalStatus:
    if isinstance(value, str) and value.lower() in ApprovalStatus._value2member_map_:
        return ApprovalStatus(value.lower())
    known = ", ".join(ApprovalStatus)
    raise ProtocolError(ErrorCode.ILLEGAL_TRANSITION,
                        f"unknown {role} status {value!r} of an inbox item; expected one of {known}",
                        details={role: str(value)})


def check_approval_transition(current: ApprovalStatus | str,
                              target: ApprovalStatus | str) -> ApprovalStatus:
    """The target status when an inbox item may go ``current -> target``; ProtocolError
    (ERR_ILLEGAL_TRANSITION) otherwise, as for a run."""
    source, destination = _approval_status(current, "current"), _approval_status(target, "target")
    if destination in APPROVAL_TRANSITIONS[source]:
        return destination
    allowed = ", ".join(sorted(APPROVAL_TRANSITIONS[source])) or "none: it is closed"
    raise ProtocolError(
        ErrorCode.ILLEGAL_TRANSITION,
        f"an inbox item cannot go from {source} to {destination}; from {source} it can go to {allowed}",
        details={"from": str(source), "to": str(destination)})


def approval_sources(target: ApprovalStatus | str) -> frozenset[ApprovalStatus]:
    """The statuses an inbox item may reach ``target`` from (what a bulk update filters on)."""
    destination = _approval_status(target, "target")
    return frozenset(status for status, targets in APPROVAL_TRANSITIONS.items() if destination in targets)


def is_closed(status: ApprovalStatus | str) -> bool:
    """Whether an inbox item in ``status`` is closed: decided, expired or cancelled."""
    return _approval_status(status, "status") in CLOSED_STATUSES
