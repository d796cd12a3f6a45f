"""The runner's approval gate, backed by the inbox: a request opens an ``Approval`` item,
and the run parks (no worker held) until a person decides it.

An item gets its deadline when it opens (``HANDOFF_APPROVAL_EXPIRY``, seconds per kind;
0: none). Whoever wants to hear of new items (the inbox's webhook) registers with
:func:`on_approval_opened`; listeners are called in the database thread once the item is
stored, and must not block it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from delegations.live import feed
from delegations.models import Approval, Run
from delegations.protocol.approvals import ApprovalDecision, ApprovalRequest, Decision, RunParked
from delegations.runs.sink import DjangoEventSink

logger = logging.getLogger(__name__)

OpenedListener = Callable[[Approval], None]
_opened_listeners: list[OpenedListener] = []


def on_approval_opened(listener: OpenedListener) -> None:
    """Call ``listener(approval)`` for every inbox item a run opens from now on (once each)."""
    if listener not in _opened_listeners:
        _opened_listeners.append(listener)


class DjangoApprovalGate:
    """Opens an inbox item per request key; answers from it once a person decided, else
    parks the run (the worker is released; the decision re-enqueues the run's root)."""

    def __init__(self, sink: DjangoEventSink) -> None:
        self.sink = sink
        self.opened: list[int] = []

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        await self.sink.flush()  # the asking run's row exists before the item points at it
        item = await self.sink.db.call(open_item, request)
        if item.created:
            self.opened.append(item.pk)
            if item.pending:   # not decided by an approval rule as it opened
                await feed.publish(feed.inbox_message("approval.created", item.event_data))
        if item.decision is not None:
            return item.decision
        if item.closed:
            # closed undecided (expired, cancelled): its run was ended by whoever closed the
            # item; a run still asking is refused
            return ApprovalDecision(Decision.REJECT, comment=f"The inbox item was {item.status}.")
        raise RunParked(request)


@dataclass(frozen=True)
class OpenedItem:
    """An inbox item as the gate's event loop sees it: every figure read in the database
    thread, so nothing on the loop touches the ORM (a lazy relation such as who decided,
    or the rule that did, would query from async code: Django refuses that)."""

    pk: int
    created: bool
    status: str
    pending: bool
    closed: bool
    decision: ApprovalDecision | None
    event_data: dict[str, Any]


def open_item(request: ApprovalRequest) -> OpenedItem:
    """Open the request's inbox item (or find it, on a resume) and read what the gate needs."""
    approval, created = _open_approval(request)
    return OpenedItem(pk=approval.pk, created=created, status=approval.status,
                      pending=approval.is_pending, closed=approval.is_closed,
                      decision=approval.to_decision(), event_data=approval.as_event_data())


def deadline_for(kind: str, now: datetime) -> datetime | None:
    seconds = int(settings.HANDOFF_APPROVAL_EXPIRY.get(kind, 0))
    return now + timedelta(seconds=seconds) if seconds > 0 else None


def _title(request: ApprovalRequest) -> str:
    """The runner's title (which names the asking run's label and skill) after the name of
    the delegation its tree was started from: items of three delegations read apart."""
    run = Run.objects.select_related("delegation", "root__delegation").filter(pk=request.run_id).first()
    root = run.root if run is not None and run.root is not None else run
    delegation = root.delegation if root is not None else None
    return f"{delegation.name} › {request.title}" if delegation is not None else request.title


def _open_approval(request: ApprovalRequest) -> tuple[Approval, bool]:
    now = timezone.now()
    kind = str(request.kind)
    approval, created = Approval.objects.select_related("decided_by").get_or_create(
        key=request.key,
        defaults={"run_id": request.run_id, "kind": kind, "title": _title(request)[:500],
                  "payload": request.payload, "risk": request.risk, "requested_at": now,
                  "expires_at": deadline_for(kind, now)})
    if created:
        for listener in _opened_listeners:
            try:
                listener(approval)
            except Exception:
                logger.warning("A listener of new inbox items failed", exc_info=True)
    return approval, created
