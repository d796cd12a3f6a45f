"""Lifecycle: HandoffPackage states plus AWAITING_APPROVAL and CANCELLED; illegal moves raise."""

from __future__ import annotations

import pytest

from delegations.protocol.errors import ErrorCode, ProtocolError
from delegations.protocol.lifecycle import (
    A2A_STATE,
    TERMINAL_STATES,
    TRANSITIONS,
    RunState,
    a2a_state,
    can_transition,
    check_transition,
    is_terminal,
    read_a2a_state,
)

S = RunState


@pytest.mark.parametrize(("current", "target"), [
    (S.PENDING, S.ACCEPTED), (S.ACCEPTED, S.WORKING), (S.WORKING, S.COMPLETE),
    (S.PENDING, S.TIMEOUT), (S.WORKING, S.TIMEOUT), (S.AWAITING_APPROVAL, S.TIMEOUT),
    (S.PENDING, S.REJECTED), (S.ACCEPTED, S.REJECTED), (S.WORKING, S.FAILED),
    (S.COMPLETE, S.RETURNED), (S.WORKING, S.AWAITING_APPROVAL), (S.AWAITING_APPROVAL, S.WORKING),
    (S.AWAITING_APPROVAL, S.FAILED),
])
def test_the_design_transitions_are_allowed(current: RunState, target: RunState) -> None:
    assert can_transition(current, target)
    assert check_transition(current, target) is target


@pytest.mark.parametrize("state", [S.PENDING, S.ACCEPTED, S.WORKING, S.AWAITING_APPROVAL])
def test_any_non_terminal_state_can_be_cancelled(state: RunState) -> None:
    assert check_transition(state, S.CANCELLED) is S.CANCELLED


@pytest.mark.parametrize("state", sorted(TERMINAL_STATES))
def test_terminal_states_cannot_be_cancelled(state: RunState) -> None:
    assert not can_transition(state, S.CANCELLED)


@pytest.mark.parametrize(("current", "target"), [
    (S.PENDING, S.WORKING), (S.PENDING, S.COMPLETE), (S.ACCEPTED, S.COMPLETE),
    (S.ACCEPTED, S.TIMEOUT), (S.WORKING, S.REJECTED), (S.WORKING, S.RETURNED),
    (S.FAILED, S.WORKING), (S.COMPLETE, S.WORKING), (S.RETURNED, S.COMPLETE),
    (S.CANCELLED, S.PENDING), (S.TIMEOUT, S.FAILED), (S.REJECTED, S.ACCEPTED),
])
def test_illegal_transitions_raise_with_the_allowed_ones(current: RunState, target: RunState) -> None:
    assert not can_transition(current, target)
    with pytest.raises(ProtocolError) as caught:
        check_transition(current, target)
    assert caught.value.code is ErrorCode.ILLEGAL_TRANSITION
    assert f"from {current} to {target}" in caught.value.message
    assert caught.value.details == {"from": str(current), "to": str(target)}


def test_terminal_states_are_the_designs_six() -> None:
    assert frozenset({S.COMPLETE, S.RETURNED, S.FAILED, S.TIMEOUT, S.REJECTED, S.CANCELLED}) == TERMINAL_STATES
    assert all(is_terminal(state) == (state in TERMINAL_STATES) for state in S)


def test_only_complete_leaves_the_terminal_states_and_only_to_returned() -> None:
    exits = {state: TRANSITIONS[state] for state in TERMINAL_STATES if TRANSITIONS[state]}
    assert exits == {S.COMPLETE: frozenset({S.RETURNED})}


def test_state_names_are_accepted_as_strings_and_unknown_ones_raise() -> None:
    assert check_transition("pending", "ACCEPTED") is S.ACCEPTED
    assert not can_transition("PENDING", "LIMBO")
    with pytest.raises(ProtocolError) as caught:
        check_transition("LIMBO", "WORKING")
    assert "unknown current state 'LIMBO'" in caught.value.message


def test_every_state_maps_to_an_a2a_1_0_task_state() -> None:
    from a2a.types.a2a_pb2 import TaskState

    assert set(A2A_STATE) == set(S)
    assert set(A2A_STATE.values()) <= set(TaskState.keys()) - {"TASK_STATE_UNSPECIFIED"}
    assert A2A_STATE[S.CANCELLED] == "TASK_STATE_CANCELED" and A2A_STATE[S.TIMEOUT] == "TASK_STATE_FAILED"
    assert A2A_STATE[S.AWAITING_APPROVAL] == "TASK_STATE_AUTH_REQUIRED"


def test_a_clarification_wait_is_input_required_in_a2a() -> None:
    assert a2a_state(S.AWAITING_APPROVAL, approval_kind="clarification") == "TASK_STATE_INPUT_REQUIRED"
    assert a2a_state(S.AWAITING_APPROVAL, approval_kind="capability") == "TASK_STATE_AUTH_REQUIRED"
    assert a2a_state("WORKING") == "TASK_STATE_WORKING"


@pytest.mark.parametrize(("spelled", "read"), [
    ("auth-required", "TASK_STATE_AUTH_REQUIRED"), ("input-required", "TASK_STATE_INPUT_REQUIRED"),
    ("canceled", "TASK_STATE_CANCELED"), ("TASK_STATE_COMPLETED", "TASK_STATE_COMPLETED"),
    (" working ", "TASK_STATE_WORKING"),
])
def test_a2a_states_are_read_in_both_spellings(spelled: str, read: str) -> None:
    assert read_a2a_state(spelled) == read


def test_an_unknown_a2a_state_is_refused_with_the_ones_there_are() -> None:
    with pytest.raises(ProtocolError) as caught:
        read_a2a_state("paused")
    assert "'paused'" in caught.value.message and "TASK_STATE_AUTH_REQUIRED" in caught.value.message
