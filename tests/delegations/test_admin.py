"""Django admin for runs, events, approvals and delegations."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from delegations.models import Approval, Delegation, RunEvent
from delegations.runs.workflows import run_create
from tests.delegations import scripts

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_admins_browse_runs_events_approvals_and_delegations_with_readable_json(
        client: Client, admin_user: Any, immediate_tasks: None) -> None:
    run = run_create(packet=scripts.approval_packet(), adapter="scripted",
                     config=scripts.needs_approval(), owner=admin_user)
    Delegation.objects.create(name="caching study", packet=scripts.packet(), owner=admin_user)
    client.force_login(admin_user)
    listing = client.get("/admin/delegations/run/?state__exact=AWAITING_APPROVAL&q=caching")
    assert listing.status_code == 200 and run.pk in listing.content.decode()
    page = client.get(f"/admin/delegations/run/{run.pk}/change/").content.decode()
    assert "&quot;goal&quot;" in page and "<pre" in page  # the packet, indented, read-only
    event = RunEvent.objects.filter(run=run).first()
    assert event is not None
    assert client.get(f"/admin/delegations/runevent/{event.pk}/change/").status_code == 200
    assert client.get("/admin/delegations/runevent/?type__exact=state").status_code == 200
    approval = Approval.objects.get()
    assert client.get(f"/admin/delegations/approval/{approval.pk}/change/").status_code == 200
    assert client.get("/admin/delegations/approval/?status__exact=pending").status_code == 200
    assert client.get("/admin/delegations/delegation/?q=caching").status_code == 200
    assert client.get("/admin/delegations/run/add/").status_code == 403


def test_an_admin_edit_of_a_delegation_keeps_a_version(admin_client: Any, admin_user: Any) -> None:
    from delegations.composer.services import delegation_create

    delegation = delegation_create(owner=admin_user, name="Draft", packet={"goal": "First goal"})
    response = admin_client.post(f"/admin/delegations/delegation/{delegation.pk}/change/", {
        "name": "Draft", "description": "", "owner": admin_user.pk, "parent": "", "position": 0,
        "packet": '{"goal": "Second goal"}', "versions-TOTAL_FORMS": 1, "versions-INITIAL_FORMS": 1,
        "versions-MIN_NUM_FORMS": 0, "versions-MAX_NUM_FORMS": 0,
        "versions-0-id": delegation.versions.get().pk, "versions-0-delegation": delegation.pk})
    assert response.status_code == 302, response.content.decode()[:2000]
    delegation.refresh_from_db()
    assert delegation.version == 2
    assert [v.packet["goal"] for v in delegation.versions.all()] == ["First goal", "Second goal"]
