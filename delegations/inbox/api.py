"""REST routes for the approval inbox (``/api/approvals``).

Approvers and staff see every inbox item; others see the items of their own runs.
Deciding needs the approver role (403 without it); a second decision answers 409.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Query, Router, Schema
from ninja.errors import HttpError
from pydantic import Field

from delegations.accounts.roles import can_approve, visible_approvals
from delegations.inbox.decisions import approval_decide
from delegations.models import Approval
from delegations.protocol.approvals import ApprovalKind
from delegations.runs.api import PAGE_SIZE, iso, page_bounds

router = Router(tags=["approvals"])


class DecisionIn(Schema):
    decision: str = Field(description="approve | reject | answer | edit")
    comment: str = ""
    answer: str = ""
    edited_arguments: dict[str, Any] | None = None


class ApprovalOut(Schema):
    id: int
    key: str
    run_id: str
    root_run_id: str
    kind: str
    status: str
    title: str
    payload: dict[str, Any]
    risk: str
    requested_at: str
    decided_at: str | None
    decided_by: str | None
    decision: str | None
    comment: str
    answer: str
    edited_arguments: dict[str, Any] | None


class ApprovalPageOut(Schema):
    count: int
    page: int
    pages: int
    page_size: int
    results: list[ApprovalOut]


class ApprovalFilters(Schema):
    status: str | None = None
    kind: str | None = None
    page: int = Field(default=1, ge=1)
    page_size: int = Field(default=PAGE_SIZE, ge=1, le=200)


def approval_out(approval: Approval) -> dict[str, Any]:
    return {
        "id": approval.pk, "key": approval.key, "run_id": approval.run_id,
        "root_run_id": approval.run.root_run_id, "kind": approval.kind, "status": approval.status,
        "title": approval.title, "payload": approval.payload or {}, "risk": approval.risk,
        "requested_at": iso(approval.requested_at), "decided_at": iso(approval.decided_at),
        "decided_by": approval.decided_by.get_username() if approval.decided_by else None,
        "decision": approval.decision or None, "comment": approval.comment,
        "answer": approval.answer, "edited_arguments": approval.edited_arguments,
    }


@router.get("", response=ApprovalPageOut, summary="Inbox items")
def list_approvals(request: HttpRequest, filters: Query[ApprovalFilters]) -> dict[str, Any]:
    items = visible_approvals(request.user).select_related("run", "decided_by")
    if filters.status:
        if filters.status not in Approval.Status.values:
            raise HttpError(422, f"Unknown status '{filters.status}'; use one of "
                                 f"{', '.join(Approval.Status.values)}.")
        items = items.filter(status=filters.status)
    if filters.kind:
        if filters.kind not in ApprovalKind._value2member_map_:
            raise HttpError(422, f"Unknown kind '{filters.kind}'; use one of "
                                 f"{', '.join(k.value for k in ApprovalKind)}.")
        items = items.filter(kind=filters.kind)
    total = items.count()
    pages, start, end = page_bounds(total, filters.page, filters.page_size)
    return {"count": total, "page": filters.page, "pages": pages, "page_size": filters.page_size,
            "results": [approval_out(a) for a in items.order_by("-requested_at", "-pk")[start:end]]}


def _visible_approval(request: HttpRequest, approval_id: int) -> Approval:
    return get_object_or_404(visible_approvals(request.user).select_related("run", "decided_by"),
                             pk=approval_id)


@router.get("/{approval_id}", response=ApprovalOut, summary="One inbox item")
def get_approval(request: HttpRequest, approval_id: int) -> dict[str, Any]:
    return approval_out(_visible_approval(request, approval_id))


@router.post("/{approval_id}/decision", response=ApprovalOut, summary="Decide an inbox item")
def decide_approval(request: HttpRequest, approval_id: int, body: DecisionIn) -> dict[str, Any]:
    """approve | reject (a comment is required) | answer (a clarification) | edit (new tool
    call arguments). 409 when already decided. The parked run resumes from its checkpoint."""
    approval = _visible_approval(request, approval_id)
    if not can_approve(request.user):
        raise PermissionDenied("Deciding inbox items needs the approver role.")
    decided = approval_decide(approval=approval, user=request.user, decision=body.decision,
                              comment=body.comment, answer=body.answer,
                              edited_arguments=body.edited_arguments)
    return approval_out(decided)
