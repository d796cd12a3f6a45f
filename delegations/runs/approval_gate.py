"""The runner's approval gate, backed by the inbox: a request opens an ``Approval`` item,
and the run parks (no worker held) until a person decides it."""

from __future__ import annotations

from delegations.live import feed
from delegations.models import Approval
from delegations.protocol.approvals import ApprovalDecision, ApprovalRequest, Decision, RunParked
from delegations.runs.sink import DjangoEventSink


class DjangoApprovalGate:
    """Opens an inbox item per request key; answers from it once a person decided, else
    parks the run (the worker is released; the decision re-enqueues the run's root)."""

    def __init__(self, sink: DjangoEventSink) -> None:
        self.sink = sink
        self.opened: list[int] = []

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        await self.sink.flush()  # the asking run's row exists before the item points at it
        approval, created = await self.sink.db.call(_open_approval, request)
        if created:
            self.opened.append(approval.pk)
            await feed.publish(feed.inbox_message("approval.created", approval.as_event_data()))
        decision = approval.to_decision()
        if decision is not None:
            return decision
        if approval.status == Approval.Status.EXPIRED:
            return ApprovalDecision(Decision.REJECT, comment="The request expired.")
        raise RunParked(request)


def _open_approval(request: ApprovalRequest) -> tuple[Approval, bool]:
    return Approval.objects.select_related("decided_by").get_or_create(
        key=request.key,
        defaults={"run_id": request.run_id, "kind": str(request.kind), "title": request.title[:500],
                  "payload": request.payload, "risk": request.risk})
