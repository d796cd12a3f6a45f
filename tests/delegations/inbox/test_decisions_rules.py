"""Who may decide, once only, until when: permissions, the race, expiry, cancellation,
batches and the inbox's websocket notices."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.db import close_old_connections
from django.test import override_settings
from django.utils import timezone

from delegations.accounts.roles import OWN_RUN
from delegations.inbox.decisions import (
    approval_decide,
    approvals_decide_batch,
    decide_refusal,
)
from delegations.live.routing import websocket_urlpatterns
from delegations.models import Approval, Run
from delegations.refusals import Refusal
from delegations.runs.maintenance import sweep_approvals
from delegations.runs.workflows import run_cancel, run_create
from tests.conftest import make_user
from tests.delegations import scripts
from tests.delegations.conftest import DATABASE

pytestmark = [pytest.mark.django_db(transaction=True)]


def parked_run(owner: Any, config: dict[str, Any] | None = None) -> Run:
    run = run_create(packet=scripts.approval_packet(), adapter="scripted",
                     config=config or scripts.needs_approval(), owner=owner)
    assert run.state == "AWAITING_APPROVAL", run.error
    return run


def item_of(run: Run) -> Approval:
    return Approval.objects.select_related("run", "decided_by").get(run__root_id=run.pk, status="pending")


def refused(approval: Approval, user: Any, **decision: Any) -> Refusal:
    with pytest.raises(Refusal) as caught:
        approval_decide(approval=approval, user=user, **{"decision": "approve", **decision})
    return caught.value


def two_children_deleting() -> dict[str, Any]:
    return {"script": [scripts.delegate_turn("a", "b"), scripts.yield_turn()],
            "children": {"a": scripts.needs_approval(), "b": scripts.needs_approval()}}


# -- who ---------------------------------------------------------------------------------------

def test_only_approvers_who_did_not_start_the_run_decide(composer, approver, outsider, admin_user,
                                                          immediate_tasks):
    own = parked_run(approver)
    theirs = parked_run(composer)
    admins = parked_run(admin_user)
    assert "approver role" in decide_refusal(outsider, item_of(theirs))
    assert "approver role" in decide_refusal(composer, item_of(theirs))    # the owner, no role
    assert decide_refusal(approver, item_of(own)) == OWN_RUN
    assert "Ask another approver, or add one" in OWN_RUN
    assert refused(item_of(own), approver).status == 403
    assert refused(item_of(admins), admin_user).status == 403                 # superusers too
    assert refused(item_of(theirs), outsider).status == 403
    assert decide_refusal(approver, item_of(theirs)) is None
    assert decide_refusal(admin_user, item_of(theirs)) is None
    assert Approval.objects.filter(status="pending").count() == 3     # nothing was decided


def test_the_owner_of_the_root_may_not_decide_its_subagents_items(approver, immediate_tasks):
    run = parked_run(approver, scripts.with_child(scripts.needs_approval()))
    approval = item_of(run)
    assert approval.run.parent_id == run.pk
    assert refused(approval, approver).status == 403


def test_self_approval_is_a_setting(approver, immediate_tasks):
    run = parked_run(approver)
    with override_settings(HANDOFF_ALLOW_SELF_APPROVAL=True):
        assert decide_refusal(approver, item_of(run)) is None
        approval_decide(approval=item_of(run), user=approver, decision="approve")
    run.refresh_from_db()
    assert run.state == "COMPLETE"


def test_a_decided_item_says_who_decided_it_and_when(composer, approver, immediate_tasks):
    run = parked_run(composer)
    approval = item_of(run)
    approval_decide(approval=approval, user=approver, decision="approve")
    approval.refresh_from_db()
    other = _make_user_approver("bob")
    message = decide_refusal(other, approval)
    assert message is not None and message.startswith("Already approved by alice at ")
    assert timezone.localtime(approval.decided_at).strftime("%H:%M") in message
    assert refused(approval, other).status == 409


def _make_user_approver(name: str) -> Any:
    from django.contrib.auth import get_user_model

    return make_user(get_user_model(), name, "approvers")


@pytest.mark.services   # on PostgreSQL too, where the row lock is real
def test_of_two_approvers_deciding_at_once_one_wins_and_the_other_gets_409(composer, approver,
                                                                          immediate_tasks, settings):
    run = parked_run(composer)
    approval = item_of(run)
    settings.TASKS = DATABASE     # the decision is what races here, not the resumed run
    bob = _make_user_approver("bob")
    start = threading.Barrier(2)
    outcomes: dict[str, Any] = {}

    def decide(user: Any, decision: str) -> None:
        start.wait()
        try:
            approval_decide(approval=Approval.objects.select_related("run").get(pk=approval.pk), user=user,
                            decision=decision, comment="racing")
            outcomes[user.username] = "won"
        except Refusal as error:
            outcomes[user.username] = error
        finally:
            close_old_connections()

    threads = [threading.Thread(target=decide, args=(approver, "approve")),
               threading.Thread(target=decide, args=(bob, "reject"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(str(type(o).__name__) for o in outcomes.values()) == ["Refusal", "str"]
    winner = next(name for name, o in outcomes.items() if o == "won")
    loser = next(o for o in outcomes.values() if isinstance(o, Refusal))
    approval.refresh_from_db()
    assert approval.decided_by.username == winner
    assert loser.status == 409 and f"by {winner} at" in loser.message


def test_no_tool_a_model_is_offered_can_decide() -> None:
    from delegations.protocol.tool_schemas import MODEL_TOOLS
    from delegations.protocol.tools import RUNTIME_TOOLS

    names = set(MODEL_TOOLS) | set(RUNTIME_TOOLS)
    assert not any(word in name for name in names for word in ("approv", "decide", "inbox"))


# -- until when ----------------------------------------------------------------------------------

def test_an_item_gets_its_kinds_deadline_when_it_opens(composer, immediate_tasks, settings):
    settings.HANDOFF_APPROVAL_EXPIRY = {**settings.HANDOFF_APPROVAL_EXPIRY, "capability": 600}
    approval = item_of(parked_run(composer))
    assert approval.expires_at is not None
    assert timedelta(seconds=590) < approval.time_left <= timedelta(seconds=600)
    assert approval.as_event_data()["expires_at"] == approval.expires_at.isoformat()


def test_the_default_deadline_is_a_day_and_zero_means_none(composer, immediate_tasks, settings):
    assert settings.HANDOFF_APPROVAL_EXPIRY["capability"] == 24 * 3600
    settings.HANDOFF_APPROVAL_EXPIRY = {**settings.HANDOFF_APPROVAL_EXPIRY, "capability": 0}
    approval = item_of(parked_run(composer))
    assert approval.expires_at is None and approval.time_left is None


def past_deadline(approval: Approval) -> None:
    Approval.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    approval.refresh_from_db()


def test_the_sweeper_expires_an_item_and_its_run_times_out(composer, immediate_tasks):
    run = parked_run(composer)
    approval = item_of(run)
    past_deadline(approval)
    assert sweep_approvals() == {"expired": [approval.pk], "cancelled": []}
    approval.refresh_from_db()
    run.refresh_from_db()
    assert approval.status == "expired"
    assert run.state == "TIMEOUT" and run.error["code"] == "ERR_TIMEOUT"
    assert f"inbox item #{approval.pk}" in run.error["message"] and "expired" in run.error["message"]
    assert run.result["status"] == "FAILURE"
    assert decide_refusal(_make_user_approver("bob"), approval).startswith("Expired at ")


def test_deciding_an_item_past_its_deadline_is_409_and_expires_it(composer, approver, immediate_tasks):
    run = parked_run(composer)
    approval = item_of(run)
    past_deadline(approval)
    error = refused(approval, approver)
    assert error.status == 409 and error.message.startswith("Expired at ")
    approval.refresh_from_db()
    run.refresh_from_db()
    assert approval.status == "expired" and run.state == "TIMEOUT"


def test_a_subagents_expired_item_times_it_out_and_its_parent_goes_on(composer, immediate_tasks):
    run = parked_run(composer, scripts.with_child(scripts.needs_approval()))
    approval = item_of(run)
    past_deadline(approval)
    sweep_approvals()
    kid = Run.objects.get(parent=run)
    run.refresh_from_db()
    assert kid.state == "TIMEOUT"
    assert run.state == "COMPLETE"      # resumed: its model read the child's timeout and answered


def test_an_item_of_a_tree_a_worker_executes_expires_once_it_parks(composer, immediate_tasks):
    run = parked_run(composer)
    approval = item_of(run)
    past_deadline(approval)
    Run.objects.filter(pk=run.pk).update(lease_owner="elsewhere",
                                         lease_expires_at=timezone.now() + timedelta(minutes=1))
    assert sweep_approvals()["expired"] == []
    Run.objects.filter(pk=run.pk).update(lease_owner="", lease_expires_at=None)
    assert sweep_approvals()["expired"] == [approval.pk]


def test_cancelling_a_parked_run_cancels_its_items(composer, approver, immediate_tasks):
    run = parked_run(composer)
    approval = item_of(run)
    run_cancel(run=run, reason="Not needed.")
    approval.refresh_from_db()
    assert approval.status == "cancelled" and approval.to_decision() is None
    assert decide_refusal(approver, approval) == "Cancelled: its run ended."
    assert refused(approval, approver).status == 409


def test_items_left_pending_by_a_run_that_ended_are_cancelled_by_the_sweeper(composer, queued_tasks):
    run = Run.objects.create(id="r-ended", root_id="r-ended", owner=composer, adapter_name="scripted",
                             input_hash="0" * 64, state="FAILED")
    approval = Approval.objects.create(run=run, key="r-ended:capability:1", kind="capability", title="x")
    assert sweep_approvals()["cancelled"] == [approval.pk]
    approval.refresh_from_db()
    assert approval.status == "cancelled"


# -- batches --------------------------------------------------------------------------------------

def test_a_batch_decides_every_item_of_one_run_and_resumes_it(composer, approver, immediate_tasks):
    run = parked_run(composer, two_children_deleting())
    items = list(Approval.objects.select_related("run").filter(status="pending").order_by("pk"))
    assert len(items) == 2
    decided = approvals_decide_batch(approvals=items, user=approver, decision="approve", comment="both fine")
    assert [a.status for a in decided] == ["approved", "approved"]
    assert {a.comment for a in decided} == {"both fine"}
    run.refresh_from_db()
    assert run.state == "COMPLETE", run.error


def test_a_batch_mixing_runs_is_422_naming_the_item_and_decides_nothing(composer, approver, immediate_tasks):
    first, second = parked_run(composer), parked_run(composer)
    items = [item_of(first), item_of(second)]
    with pytest.raises(Refusal) as caught:
        approvals_decide_batch(approvals=items, user=approver, decision="approve")
    assert caught.value.status == 422 and f"#{items[1].pk}" in caught.value.message
    assert Approval.objects.filter(status="pending").count() == 2


def test_a_batch_holding_a_decided_item_is_409_naming_it_and_decides_nothing(composer, approver,
                                                                            immediate_tasks):
    parked_run(composer, two_children_deleting())
    first, second = Approval.objects.select_related("run").filter(status="pending").order_by("pk")
    stale = Approval.objects.select_related("run").get(pk=second.pk)
    Approval.objects.filter(pk=second.pk).update(status="rejected", decision="reject", comment="no",
                                                 decided_at=timezone.now(), decided_by=approver)
    with pytest.raises(Refusal) as caught:
        approvals_decide_batch(approvals=[first, stale], user=approver, decision="reject", comment="no")
    assert caught.value.status == 409 and f"#{second.pk}" in caught.value.message
    first.refresh_from_db()
    assert first.is_pending


def test_a_batch_rejection_needs_its_comment(composer, approver, immediate_tasks):
    run = parked_run(composer, two_children_deleting())
    items = list(Approval.objects.select_related("run").filter(run__root_id=run.pk))
    with pytest.raises(Refusal) as caught:
        approvals_decide_batch(approvals=items, user=approver, decision="reject")
    assert caught.value.status == 422 and caught.value.message.startswith("Rejecting needs a comment")
    assert "#" not in caught.value.message   # said of the batch, not of the first item in it


# -- the inbox websocket --------------------------------------------------------------------------

@pytest.mark.services
async def test_the_inbox_socket_hears_items_created_decided_cancelled_and_expired(
        composer: Any, approver: Any, immediate_tasks: None) -> None:
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), "/ws/inbox/")
    communicator.scope["user"] = approver
    connected, _ = await communicator.connect()
    assert connected
    assert json.loads(await communicator.receive_from(timeout=5))["type"] == "inbox.synced"

    async def next_notice() -> dict[str, Any]:
        """The next notice, past the pending counts that follow each one."""
        while True:
            frame = dict(json.loads(await communicator.receive_from(timeout=10)))
            if frame["type"] != "inbox.count":
                return frame

    decided = await database_sync_to_async(parked_run)(composer)
    created = await next_notice()
    assert created["type"] == "approval.created"
    assert created["approval"]["allowed"] == ["approve", "edit", "reject"]
    assert created["approval"]["expires_at"] and created["approval"]["decided_by"] is None
    item = await database_sync_to_async(item_of)(decided)
    await database_sync_to_async(approval_decide)(approval=item, user=approver, decision="approve")
    notice = await next_notice()
    assert notice["type"] == "approval.decided" and notice["approval"]["decided_by"] == "alice"
    assert notice["approval"]["decided_at"]

    cancelled = await database_sync_to_async(parked_run)(composer)
    assert (await next_notice())["type"] == "approval.created"
    await database_sync_to_async(run_cancel)(run=cancelled)
    notice = await next_notice()
    assert notice["type"] == "approval.cancelled" and notice["approval"]["status"] == "cancelled"

    expired = await database_sync_to_async(parked_run)(composer)
    assert (await next_notice())["type"] == "approval.created"
    await database_sync_to_async(lambda: past_deadline(item_of(expired)))()
    await database_sync_to_async(sweep_approvals)()
    notice = await next_notice()
    assert notice["type"] == "approval.expired" and notice["approval"]["status"] == "expired"
    await communicator.disconnect()
