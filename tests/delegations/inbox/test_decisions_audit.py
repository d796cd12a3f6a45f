"""Every decision is audited on its item, and admins read the audit in Django admin."""

from __future__ import annotations

from typing import Any

import pytest

from delegations.inbox.decisions import approval_decide
from delegations.models import Approval
from delegations.runs.workflows import run_create
from tests.delegations import scripts

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_a_decision_records_who_when_what_and_how_and_admin_shows_it_read_only(
        client: Any, composer: Any, approver: Any, admin_user: Any, immediate_tasks: None) -> None:
    run_create(packet=scripts.approval_packet(), adapter="scripted", config=scripts.needs_approval(),
               owner=composer)
    approval = Approval.objects.select_related("run").get()
    approval_decide(approval=approval, user=approver, decision="edit", comment="the other one",
                    edited_arguments={"path": "older.txt"}, always_allow=True)
    approval.refresh_from_db()
    assert (approval.decided_by, approval.decision, approval.status) == (approver, "edit", "edited")
    assert approval.decided_at is not None and approval.comment == "the other one"
    assert approval.edited_arguments == {"path": "older.txt"} and approval.always_allow is True
    client.force_login(admin_user)
    page = client.get(f"/admin/delegations/approval/{approval.pk}/change/").content.decode()
    assert "the other one" in page and "older.txt" in page and "alice" in page
    assert 'name="comment"' not in page                      # read only: no form fields
    listing = client.get("/admin/delegations/approval/?decision__exact=edit&always_allow__exact=1")
    assert listing.status_code == 200 and approval.title[:30] in listing.content.decode()
    changed = client.post(f"/admin/delegations/approval/{approval.pk}/change/", {"comment": "rewritten"})
    assert changed.status_code == 403
    approval.refresh_from_db()
    assert approval.comment == "the other one"
