"""The approval inbox without a browser: what waits, what was decided, deciding from it,
who may decide, and the nav's pending count."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from delegations.models import Approval, Run
from tests.delegations.runs.test_run_pages import make_run

pytestmark = pytest.mark.django_db


def ask(run: Run, title: str, *, kind: str = "capability", **fields: Any) -> Approval:
    return Approval.objects.create(run=run, key=f"{run.pk}:{kind}:{title}", kind=kind, title=title,
                                   **fields)


def decided(run: Run, title: str, user: Any, *, status: str = "approved", **fields: Any) -> Approval:
    decision = {"approved": "approve", "rejected": "reject", "answered": "answer"}[status]
    return ask(run, title, status=status, decision=decision, decided_by=user,
               decided_at=timezone.now(), **fields)


def section(html: str, element_id: str) -> str:
    match = re.search(rf'<section[^>]*id="{element_id}".*?</section>', html, re.S)
    assert match, f"no section #{element_id}"
    return match.group(0)


def inbox(client: Any) -> str:
    response = client.get("/inbox/")
    assert response.status_code == 200
    return response.content.decode()


def decide(client: Any, approval: Approval, **data: str) -> Any:
    return client.post(f"/inbox/{approval.pk}/decision/", data, follow=True)


def test_the_inbox_lists_pending_items_with_their_run_and_what_they_ask(approver_client, approver):
    run = make_run(approver, state="AWAITING_APPROVAL", label="cleanup")
    ask(run, "Delete stale.txt", risk="high", payload={"tool": "delete_file", "arguments": {"path": "stale.txt"}})
    pending = section(inbox(approver_client), "inbox-pending")
    assert "Delete stale.txt" in pending and "risk high" in pending and "capability" in pending
    assert f'href="/runs/{run.pk}/"' in pending and "cleanup" in pending
    assert "&quot;path&quot;: &quot;stale.txt&quot;" in pending   # indented JSON, escaped


def test_the_history_shows_the_last_twenty_decisions_and_not_pending_ones(approver_client, approver):
    run = make_run(approver, state="WORKING")
    for number in range(22):
        decided(run, f"old item {number:02}", approver)
    decided(run, "Spend more", approver, status="rejected", comment="Too expensive")
    ask(run, "Still waiting")
    history = section(inbox(approver_client), "inbox-history")
    assert history.count("<tr data-approval-id") == 20
    assert "Spend more" in history and "Too expensive" in history and "rejected" in history
    assert "Still waiting" not in history


def test_an_empty_inbox_says_what_would_appear_here(approver_client):
    page = inbox(approver_client)
    assert "Nothing waits for a decision" in section(page, "inbox-pending")
    assert "No decisions yet" in section(page, "inbox-history")


def test_an_approver_approves_from_the_inbox_and_comes_back_to_it(approver_client, approver, queued_tasks, composer):
    approval = ask(make_run(composer, state="AWAITING_APPROVAL"), "Delete stale.txt")
    response = decide(approver_client, approval, decision="approve")
    assert response.redirect_chain == [("/inbox/", 302)]
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.decided_by == approver
    assert f"#{approval.pk} approved" in response.content.decode()
    assert "Delete stale.txt" in section(response.content.decode(), "inbox-history")


def test_an_approver_rejects_with_a_reason(approver_client, approver, queued_tasks, composer):
    approval = ask(make_run(composer, state="AWAITING_APPROVAL"), "Delete stale.txt")
    decide(approver_client, approval, decision="reject", comment="Keep it, it is still used")
    approval.refresh_from_db()
    assert approval.status == "rejected" and approval.comment == "Keep it, it is still used"


def test_a_rejection_without_a_reason_is_refused_with_what_to_do(approver_client, approver, composer):
    approval = ask(make_run(composer, state="AWAITING_APPROVAL"), "Delete stale.txt")
    response = decide(approver_client, approval, decision="reject", comment="  ")
    assert "A rejection needs a comment" in response.content.decode()
    approval.refresh_from_db()
    assert approval.is_pending


def test_a_clarification_is_answered_from_the_inbox(approver_client, approver, queued_tasks, composer):
    approval = ask(make_run(composer, state="AWAITING_APPROVAL"), "Which currency?", kind="clarification")
    pending = section(inbox(approver_client), "inbox-pending")
    assert 'name="answer"' in pending and 'value="approve"' not in pending
    decide(approver_client, approval, decision="answer", answer="EUR")
    approval.refresh_from_db()
    assert approval.status == "answered" and approval.answer == "EUR"


def test_a_decided_item_cannot_be_decided_again(approver_client, approver, composer):
    approval = decided(make_run(composer, state="WORKING"), "Delete stale.txt", approver)
    response = decide(approver_client, approval, decision="reject", comment="changed my mind")
    assert "Already approved by" in response.content.decode()
    approval.refresh_from_db()
    assert approval.status == "approved"


def test_a_run_owner_without_the_approver_role_sees_the_item_but_cannot_decide(composer_client, composer):
    approval = ask(make_run(composer, state="AWAITING_APPROVAL"), "Delete stale.txt")
    page = inbox(composer_client)
    assert "Delete stale.txt" in section(page, "inbox-pending")
    assert 'name="decision"' not in page and "needs the approver role" in page
    response = composer_client.post(f"/inbox/{approval.pk}/decision/", {"decision": "approve"})
    assert response.status_code == 403
    approval.refresh_from_db()
    assert approval.is_pending


def test_other_peoples_items_stay_out_of_a_non_approvers_inbox(outsider_client, composer):
    ask(make_run(composer, state="AWAITING_APPROVAL"), "Delete stale.txt")
    assert "Delete stale.txt" not in inbox(outsider_client)


def test_deciding_only_accepts_post(approver_client, approver):
    approval = ask(make_run(approver, state="AWAITING_APPROVAL"), "Delete stale.txt")
    assert approver_client.get(f"/inbox/{approval.pk}/decision/").status_code == 405


def test_the_nav_links_the_inbox_with_the_pending_count_and_its_live_script(approver_client, approver, composer):
    run = make_run(composer, state="AWAITING_APPROVAL")
    ask(run, "one")
    ask(run, "two")
    decided(run, "three", approver)
    page = approver_client.get("/").content.decode()
    assert re.search(r'<a href="/inbox/"[^>]*>Inbox <span class="count" id="inbox-count" data-count="2"[^>]*>2</span>', page)
    assert "js/inbox_count.js" in page


def pending_counts(client: Any) -> tuple[str, str]:
    """The dashboard's "Pending approvals" and the nav badge, as the page shows them."""
    page = client.get("/").content.decode()
    badge = re.search(r'id="inbox-count" data-count="(\d+)"', page)
    stat = re.search(r'id="stat-approvals">(\d+)<', page)
    assert badge and stat
    return stat.group(1), badge.group(1)


def test_the_pending_counts_leave_out_the_items_of_the_approvers_own_runs(approver_client, approver, composer):
    mine = make_run(approver, state="AWAITING_APPROVAL")
    ask(mine, "my delete")
    ask(mine, "my budget", kind="budget")
    ask(mine, "my question", kind="clarification")     # the starter answers their run's question
    theirs = make_run(composer, state="AWAITING_APPROVAL")
    ask(theirs, "their delete")
    ask(theirs, "their late delete", expires_at=timezone.now() - timedelta(minutes=1))
    assert pending_counts(approver_client) == ("2", "2")


def test_the_pending_counts_leave_out_items_that_need_a_role_the_viewer_lacks(client, composer):
    run = make_run(composer, state="AWAITING_APPROVAL")
    ask(run, "delete")
    ask(run, "question", kind="clarification")
    client.force_login(composer)
    assert pending_counts(client) == ("1", "1")


def test_the_pending_counts_follow_the_self_approval_setting(approver_client, approver, settings):
    ask(make_run(approver, state="AWAITING_APPROVAL"), "my delete")
    settings.HANDOFF_ALLOW_SELF_APPROVAL = True
    assert pending_counts(approver_client) == ("1", "1")


@pytest.mark.django_db(transaction=True)
def test_each_item_says_whose_it_is_by_delegation_node_and_skill(approver_client, composer, immediate_tasks):
    from delegations.composer.services import delegation_create, delegation_start_run
    from tests.delegations import scripts

    scripts.add_caching_skill(capabilities=["file_delete"], requires_approval=True)
    for name in ("Headphone prices", "Laptop prices"):
        delegation = delegation_create(owner=composer, name=name,
                                       packet=scripts.skill_packet(capabilities=["file_delete"]))
        delegation_start_run(delegation=delegation, user=composer, adapter="scripted",
                             config=scripts.needs_approval())
    titles = sorted(Approval.objects.values_list("title", flat=True))
    assert titles == [f"{name} › researcher (caching@1.0.0) wants to delete_file (file_delete)"
                      for name in ("Headphone prices", "Laptop prices")]
    pending = section(inbox(approver_client), "inbox-pending")
    assert all(title in pending for title in titles)


def test_an_item_decided_in_place_is_listed_under_recently_decided_at_once(approver_client, approver, composer,
                                                                          queued_tasks):
    approval = ask(make_run(composer, state="AWAITING_APPROVAL"), "Delete stale.txt")
    response = approver_client.post(f"/inbox/{approval.pk}/decision/", {"decision": "approve"},
                                    HTTP_HX_REQUEST="true")
    text = response.content.decode()
    assert f'id="approval-{approval.pk}"' in text and 'data-pending="0"' in text
    recent = section(text, "inbox-history")
    assert 'hx-swap-oob="true"' in recent and "Delete stale.txt" in recent and "approved" in recent
