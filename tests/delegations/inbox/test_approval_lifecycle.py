"""The inbox item's own methods are the only writers of its status, and refuse what the
lifecycle's table forbids: deciding a closed item, expiring a decided one, cancelling twice."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from delegations.models import Approval, Run
from delegations.protocol.approvals import Decision
from delegations.protocol.errors import ErrorCode, ProtocolError
from delegations.protocol.lifecycle import ApprovalStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(composer: Any) -> Run:
    return Run.objects.create(owner=composer, state="AWAITING_APPROVAL", input_hash="0" * 64,
                              adapter_name="scripted", goal="Tidy the notes")


def ask(run: Run, title: str, **fields: Any) -> Approval:
    return Approval.objects.create(run=run, key=f"{run.pk}:capability:{title}", kind="capability",
                                   title=title, **fields)


def test_recording_a_decision_closes_and_saves_the_item(run: Run, approver: Any) -> None:
    approval = ask(run, "Delete stale.txt")
    approval.record(Decision.EDIT, user=approver, edited_arguments={"path": "old.txt"})
    stored = Approval.objects.get(pk=approval.pk)
    assert (stored.status, stored.decision, stored.decided_by) == ("edited", "edit", approver)
    assert stored.edited_arguments == {"path": "old.txt"} and stored.decided_at is not None
    assert stored.is_closed


def test_the_model_refuses_to_decide_an_expired_item(run: Run, approver: Any) -> None:
    approval = ask(run, "Delete stale.txt", expires_at=timezone.now() - timedelta(minutes=1))
    approval.expire(timezone.now())
    with pytest.raises(ProtocolError) as caught:
        approval.record(Decision.APPROVE, user=approver)
    assert caught.value.code is ErrorCode.ILLEGAL_TRANSITION
    assert "cannot go from expired to approved" in caught.value.message
    stored = Approval.objects.get(pk=approval.pk)
    assert (stored.status, stored.decision, stored.decided_by) == ("expired", "", None)


def test_the_model_refuses_to_expire_a_decided_item(run: Run, approver: Any) -> None:
    approval = ask(run, "Delete stale.txt")
    approval.record(Decision.REJECT, user=approver, comment="Still used.")
    with pytest.raises(ProtocolError) as caught:
        approval.expire(timezone.now())
    assert "cannot go from rejected to expired" in caught.value.message
    assert Approval.objects.get(pk=approval.pk).status == "rejected"


def test_the_model_refuses_a_second_decision(run: Run, approver: Any) -> None:
    approval = ask(run, "Delete stale.txt")
    approval.record(Decision.APPROVE, user=approver)
    with pytest.raises(ProtocolError):
        approval.record(Decision.REJECT, user=approver, comment="Changed my mind.")
    assert Approval.objects.get(pk=approval.pk).status == "approved"


def test_a_bulk_cancel_closes_only_the_pending_items(run: Run, approver: Any) -> None:
    waiting = ask(run, "Delete stale.txt")
    decided = ask(run, "Write notes.md")
    decided.record(Decision.APPROVE, user=approver)
    cancelled = Approval.objects.filter(run=run).cancel()
    assert [item.pk for item in cancelled] == [waiting.pk]
    assert cancelled[0].status == "cancelled" and cancelled[0].decided_at is not None
    assert Approval.objects.get(pk=waiting.pk).status == "cancelled"
    assert Approval.objects.get(pk=decided.pk).status == "approved"
    assert Approval.objects.filter(run=run).cancel() == []


def test_the_status_column_offers_the_lifecycles_statuses() -> None:
    assert [value for value, _ in Approval.Status.choices] == [status.value for status in ApprovalStatus]
