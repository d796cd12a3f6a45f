"""The periodic jobs every worker runs on its heartbeat: the sweeper for runs whose worker
died and for inbox items past their deadline, and the archiver of finished trees
(OpenClaw's auto-archive)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from delegations.live import feed
from delegations.models import Approval, Run
from delegations.models.runs import TERMINAL
from delegations.protocol.errors import ErrorCode
from delegations.protocol.lifecycle import RunState
from delegations.runs.queue import dispatch_lane, enqueue_run
from delegations.runs.record import append_events, approvals_cancel, record_end

logger = logging.getLogger(__name__)

MAX_RECOVERIES = 3   # times a run is resumed after losing its worker before it is failed


def fail_worker_lost(root: Run, detail: str) -> None:
    error = {"code": ErrorCode.WORKER_LOST.value,
             "message": f"The worker executing this run stopped ({detail}) and the run could "
                        f"not be resumed; start it again (retry)."}
    with transaction.atomic():
        for member in sorted(root.tree().exclude(state__in=TERMINAL), key=lambda r: -r.depth):
            record_end(member, RunState.FAILED, error=error)
        dispatch_lane(root.owner_id)


def approval_expire(approval_id: int, now: datetime | None = None) -> bool:
    """Expire an item past its deadline: status ``expired`` (an ``approval.expired``
    notice), and the run that asked ends TIMEOUT (ERR_TIMEOUT saying the item expired),
    its unfinished subagents cancelled. A parent parked on that run is resumed to read
    its outcome. False when there is nothing to do: decided meanwhile, not due, or its
    tree executing in a worker now (it is expired once the tree parks)."""
    now = now or timezone.now()
    with transaction.atomic():
        approval = (Approval.objects.select_for_update().select_related("run")
                    .filter(pk=approval_id).past_deadline(now).first())
        if approval is None:
            return False
        run = approval.run
        root = Run.objects.select_for_update().get(pk=run.root_run_id)
        if root.holds_live_lease(now):
            return False
        approval.expire(now)
        notice = feed.inbox_message("approval.expired", approval.as_event_data())
        transaction.on_commit(lambda: feed.publish_sync(notice))
        deadline = timezone.localtime(approval.expires_at).strftime("%Y-%m-%d %H:%M:%S %Z")
        timed_out = {"code": ErrorCode.TIMEOUT.value,
                     "message": f"The inbox item #{approval.pk} ({approval.title}) expired at "
                                f"{deadline} before anyone decided it, so the run stopped.",
                     "approval_id": approval.pk}
        cancelled = {"code": "CANCELLED",
                     "message": f"Cancelled: run {run.pk} timed out waiting for a decision."}
        for member in sorted(run.tree().exclude(state__in=TERMINAL), key=lambda r: -r.depth):
            record_end(member, RunState.TIMEOUT if member.pk == run.pk else RunState.CANCELLED,
                       error=timed_out if member.pk == run.pk else cancelled)
        if not run.is_root:
            root.refresh_from_db()
            parked = root.state == RunState.AWAITING_APPROVAL
            if parked and not Approval.objects.pending_in_tree(root.pk).exists():
                enqueue_run(root.pk)
    return True


def sweep_approvals(now: datetime | None = None) -> dict[str, list[int]]:
    """Items past their deadline: expired (their runs time out); pending items of runs that
    ended while a worker executed their tree: cancelled."""
    now = now or timezone.now()
    expired = [pk for pk in Approval.objects.past_deadline(now).order_by("expires_at")
               .values_list("pk", flat=True) if approval_expire(pk, now)]
    with transaction.atomic():
        cancelled = approvals_cancel(Approval.objects.pending().filter(run__state__in=TERMINAL))
    return {"expired": expired, "cancelled": cancelled}


def sweep_runs(now: datetime | None = None) -> dict[str, list[str]]:
    """Runs whose worker died (lease expired): resumed from their checkpoint, or failed with
    ERR_WORKER_LOST; runs handed to a worker that never started them: enqueued again;
    parked trees whose items were all decided: resumed; owners with waiting runs and free
    lane slots: dispatched."""
    now = now or timezone.now()
    report: dict[str, list[str]] = {"resumed": [], "failed": [], "requeued": [], "unparked": [],
                                    "dispatched": []}
    for root in Run.objects.lease_expired(now):
        claimed = Run.objects.filter(pk=root.pk, lease_owner=root.lease_owner,
                                     lease_expires_at=root.lease_expires_at).update(
            lease_owner="", lease_expires_at=None, recoveries=root.recoveries + 1)
        if not claimed:
            continue  # another sweeper took it, or the worker renewed just now
        resumable = root.has_checkpoint or root.state in (RunState.PENDING, RunState.ACCEPTED)
        if resumable and root.recoveries < MAX_RECOVERIES:
            with transaction.atomic():
                append_events([(root, "log", {
                    "level": "warning",
                    "message": f"The worker {root.lease_owner} stopped renewing its lease; "
                               f"resuming from the last checkpoint."})])
                enqueue_run(root.pk)
            report["resumed"].append(root.pk)
        else:
            detail = (f"lease of {root.lease_owner} expired"
                      + ("" if resumable else " before the run saved a checkpoint")
                      + (f"; it was resumed {root.recoveries} times already" if resumable else ""))
            fail_worker_lost(root, detail)
            report["failed"].append(root.pk)
    # handed to a worker but never started (the process died between taking the task and
    # taking the lease): enqueue again, at most once per lease period
    stale = now - timedelta(seconds=settings.HANDOFF_LEASE_SECONDS)
    for root_id in list(Run.objects.roots().filter(state=RunState.PENDING, lease_owner="",
                                                   allocated_at__lt=stale).values_list("pk", flat=True)):
        with transaction.atomic():
            Run.objects.filter(pk=root_id).update(allocated_at=now)
            enqueue_run(root_id)
        report["requeued"].append(root_id)
    parked = (Run.objects.roots().filter(state=RunState.AWAITING_APPROVAL, lease_owner="")
              .exclude(pk__in=Approval.objects.pending().values("run__root_id")))
    for root_id in parked.values_list("pk", flat=True):
        with transaction.atomic():
            enqueue_run(root_id)
        report["unparked"].append(root_id)
    owners = set(Run.objects.waiting_in_lane().values_list("owner_id", flat=True))
    for owner_id in owners:
        report["dispatched"] += dispatch_lane(owner_id)
    return report


def archive_runs(now: datetime | None = None) -> dict[str, int]:
    """OpenClaw's auto-archive: finished trees older than HANDOFF_ARCHIVE_AFTER_MINUTES are
    archived, or deleted when their cleanup is 'delete'."""
    now = now or timezone.now()
    archived = deleted = 0
    for root in Run.objects.archivable(now):
        with transaction.atomic():
            if root.cleanup == Run.Cleanup.DELETE:
                deleted += root.tree().count()
                root.delete()
            else:
                archived += root.tree().update(archived_at=now)
    return {"archived": archived, "deleted": deleted}


def sweep_job(worker_id: str) -> None:
    report = sweep_runs()
    if report["resumed"] or report["failed"]:
        logger.warning("Worker %s swept runs whose worker was lost: %s", worker_id, report)
    closed = sweep_approvals()
    if closed["expired"]:
        logger.info("Worker %s expired inbox items past their deadline: %s", worker_id, closed["expired"])


def archive_job(worker_id: str) -> None:
    archive_runs()
