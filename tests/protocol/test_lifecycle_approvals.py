"""An inbox item's lifecycle: it opens pending and closes once, for good; illegal moves raise."""

from __future__ import annotations

import itertools

import pytest

from delegations.protocol.approvals import Decision
from delegations.protocol.errors import ErrorCode, ProtocolError
from delegations.protocol.lifecycle import (
    APPROVAL_TRANSITIONS,
    CLOSED_STATUSES,
    DECIDED_STATUSES,
    STATUS_FOR_DECISION,
    ApprovalStatus,
    approval_sources,
    check_approval_transition,
    is_closed,
)

A = ApprovalStatus
LEGAL = [(A.PENDING, target) for target in (A.APPROVED, A.REJECTED, A.ANSWERED, A.EDITED,
                                            A.RETRIED, A.EXPIRED, A.CANCELLED)]
ILLEGAL = [pair for pair in itertools.product(A, A) if pair not in LEGAL]


@pytest.mark.parametrize(("current", "target"), LEGAL)
def test_a_pending_item_can_be_decided_expired_or_cancelled(current: A, target: A) -> None:
    assert check_approval_transition(current, target) is target


@pytest.mark.parametrize(("current", "target"), ILLEGAL)
def test_every_other_move_is_refused_with_what_is_allowed(current: A, target: A) -> None:
    with pytest.raises(ProtocolError) as caught:
        check_approval_transition(current, target)
    assert caught.value.code is ErrorCode.ILLEGAL_TRANSITION
    assert f"an inbox item cannot go from {current} to {target}" in caught.value.message
    assert caught.value.details == {"from": str(current), "to": str(target)}


def test_deciding_an_expired_item_says_it_is_closed() -> None:
    with pytest.raises(ProtocolError) as caught:
        check_approval_transition(A.EXPIRED, A.APPROVED)
    assert "from expired it can go to none: it is closed" in caught.value.message


def test_expiring_a_decided_item_is_refused() -> None:
    with pytest.raises(ProtocolError):
        check_approval_transition(A.APPROVED, A.EXPIRED)


def test_pending_is_the_only_open_status_and_every_status_is_in_the_table() -> None:
    assert set(APPROVAL_TRANSITIONS) == set(A)
    assert frozenset(A) - {A.PENDING} == CLOSED_STATUSES
    assert all(is_closed(status) == (status is not A.PENDING) for status in A)


def test_every_decision_closes_the_item_in_its_own_decided_status() -> None:
    assert set(STATUS_FOR_DECISION) == set(Decision)
    assert len(DECIDED_STATUSES) == len(Decision)
    assert CLOSED_STATUSES - {A.EXPIRED, A.CANCELLED} == DECIDED_STATUSES


def test_a_bulk_move_filters_on_the_statuses_it_may_come_from() -> None:
    assert approval_sources(A.CANCELLED) == {A.PENDING}
    assert approval_sources(A.PENDING) == frozenset()


def test_status_names_are_accepted_as_strings_and_unknown_ones_raise() -> None:
    assert check_approval_transition("PENDING", "answered") is A.ANSWERED
    with pytest.raises(ProtocolError) as caught:
        check_approval_transition("pending", "waiting")
    assert caught.value.code is ErrorCode.ILLEGAL_TRANSITION
    assert "unknown target status 'waiting'" in caught.value.message
