"""REST routes for the approval inbox (``/api/approvals``).

Approvers and staff see every inbox item; others see the items of their own runs. The
rules of deciding are :mod:`delegations.inbox.decisions`': 403 for someone who may not
decide (not an approver, or the run's own owner), 409 for an item decided, expired or
cancelled, 422 for a decision the item's kind does not allow or one missing what it needs
(the schema errors of edited arguments listed in ``errors``), 404 for an item one cannot see.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Q
from django.http import Http404, HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Query, Router, Schema
from pydantic import Field

from delegations.accounts.roles import visible_approvals
from delegations.api_lists import PAGE_SIZE, iso, page_bounds
from delegations.inbox.context import approval_context
from delegations.inbox.decisions import (
    approval_decide,
    approvals_decide_batch,
    decide_refusal,
    run_budgets,
)
from delegations.models import Approval, Run
from delegations.protocol.approvals import RAISABLE_AXES, ApprovalKind, ancestors_left
from delegations.protocol.budgets import describe_usage
from delegations.protocol.capabilities import CAPABILITY_DESCRIPTIONS
from delegations.protocol.text_limits import MAX_MESSAGE_CHARS
from delegations.protocol.tools import RUNTIME_TOOLS
from delegations.request_bodies import RequestBody

router = Router(tags=["approvals"])

RECENT_EVENTS = 10


class DecisionIn(RequestBody):
    decision: str = Field(description="approve | reject | answer | edit | retry, as the item's kind "
                                      "allows (see `allowed` on the item)")
    comment: str = Field(default="", description="Why; required to reject. The run reads it.")
    answer: str = Field(default="", description=(
        f"A clarification's answer (decision `answer`), at most {MAX_MESSAGE_CHARS:,} characters."))
    edited_arguments: dict[str, Any] | None = Field(
        default=None, description="The tool call's new arguments (decision `edit`), checked "
                                  "against the tool's parameters schema.")
    always_allow: bool = Field(
        default=False, description="With approve/edit on a tool call: later calls of this tool "
                                   "in the run and its subagents go ahead without asking.")
    budget_limit: dict[str, Any] | None = Field(
        default=None, description=f"With approve on a budget item: new limits ({', '.join(RAISABLE_AXES)}), "
                                  f"never above what the parent has left.")


class BatchIn(RequestBody):
    ids: list[int] = Field(description="Items of one run's tree, decided together.")
    decision: str
    comment: str = ""


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
    expires_at: str | None
    time_left_s: float | None = Field(description="Seconds until the item expires, while pending.")
    allowed: list[str] = Field(description="The decisions this kind of item allows.")
    decided_at: str | None
    decided_by: str | None
    decision: str | None
    comment: str
    answer: str
    edited_arguments: dict[str, Any] | None
    always_allow: bool
    budget_limit: dict[str, Any] | None
    rule: dict[str, Any] | None = Field(
        description="The approval rule that decided the item (or sent it to two approvers): its "
                    "id, name, version, effect, the inputs it matched and when.")
    signed_by: list[str] = Field(description="Who gave the first of two approvals a rule requires.")


class LineageNode(Schema):
    run_id: str
    depth: int
    role: str
    skill: str
    label: str
    state: str


class ApprovalDetailOut(ApprovalOut):
    refusal: str | None = Field(description="Why you may not decide it now (None: you may).")
    lineage: list[LineageNode] = Field(description="Root first, the run that asks last.")
    grants: list[str] = Field(description="What approving does, in words.")
    budget: dict[str, Any] = Field(description="Used, limit and remaining per axis of the asking "
                                               "run, its root, and what its ancestors have left.")
    recent_events: list[dict[str, Any]]
    context: dict[str, Any] = Field(description="What the inbox page shows of the item.")


class ApprovalPageOut(Schema):
    count: int
    page: int
    pages: int
    page_size: int
    results: list[ApprovalOut]


class ApprovalFilters(Schema):
    # enums, so the schema lists the values a filter takes (and pydantic refuses the others)
    status: Approval.Status | None = None
    kind: ApprovalKind | None = None
    run: str | None = Field(default=None, description="Items of this run and of every run in its tree.")
    risk: Literal["low", "medium", "high"] | None = None
    page: int = Field(default=1, ge=1)
    page_size: int = Field(default=PAGE_SIZE, ge=1, le=200)


def approval_out(approval: Approval) -> dict[str, Any]:
    left = approval.time_left
    return {
        "id": approval.pk, "key": approval.key, "run_id": approval.run_id,
        "root_run_id": approval.run.root_run_id, "kind": approval.kind, "status": approval.status,
        "title": approval.title, "payload": approval.payload or {}, "risk": approval.risk,
        "requested_at": iso(approval.requested_at), "expires_at": iso(approval.expires_at),
        "time_left_s": left.total_seconds() if left is not None else None,
        "allowed": [decision.value for decision in approval.allowed],
        "decided_at": iso(approval.decided_at),
        "decided_by": approval.decider, "rule": approval.rule_audit(),
        "signed_by": [signoff.user.get_username() for signoff in approval.signoffs.all()],
        "decision": approval.decision or None, "comment": approval.comment,
        "answer": approval.answer, "edited_arguments": approval.edited_arguments,
        "always_allow": approval.always_allow, "budget_limit": approval.budget_limit,
    }


@router.get("", response=ApprovalPageOut, summary="Inbox items")
def list_approvals(request: HttpRequest, filters: Query[ApprovalFilters]) -> dict[str, Any]:
    """Newest first; filter by status, kind, run (its whole tree) and risk."""
    items = (visible_approvals(request.user).select_related("run", "decided_by", "rule_decision")
             .prefetch_related("signoffs__user"))
    if filters.status:
        items = items.filter(status=filters.status)
    if filters.kind:
        items = items.filter(kind=filters.kind)
    if filters.risk:
        items = items.filter(risk=filters.risk)
    if filters.run:
        items = items.filter(Q(run_id=filters.run) | Q(run__root_id=filters.run))
    total = items.count()
    pages, start, end = page_bounds(total, filters.page, filters.page_size)
    return {"count": total, "page": filters.page, "pages": pages, "page_size": filters.page_size,
            "results": [approval_out(a) for a in items.order_by("-requested_at", "-pk")[start:end]]}


def _visible_approval(request: HttpRequest, approval_id: int) -> Approval:
    return get_object_or_404(visible_approvals(request.user).select_related("run", "decided_by"),
                             pk=approval_id)


# -- one item in full ----------------------------------------------------------------------

def lineage(run: Run) -> list[dict[str, Any]]:
    """The delegation chain from the root to ``run``."""
    ids = [*reversed(run.ancestor_ids()), run.pk]
    rows = {r.pk: r for r in Run.objects.filter(pk__in=ids).only(
        "id", "depth", "subagent_type", "skill", "label", "state")}
    return [{"run_id": r.pk, "depth": r.depth, "role": r.subagent_type, "skill": r.skill,
             "label": r.label, "state": r.state} for r in (rows[pk] for pk in ids if pk in rows)]


def budget_left(run: Run) -> dict[str, Any]:
    """The asking run's budget, its root's, and what its ancestors have left (the ceiling of
    a raised limit: see ``protocol.approvals.raised_budget``)."""
    ancestors = list(Run.objects.filter(pk__in=run.ancestor_ids()))
    figures = run_budgets([run, *ancestors])
    root = next((a for a in ancestors if a.is_root), None)
    left = ancestors_left(figures[a.pk] for a in ancestors)
    return {"run": describe_usage(*figures[run.pk]),
            "root": describe_usage(*figures[root.pk]) if root is not None else None,
            "ancestors_left": ({axis: getattr(left, axis) for axis in RAISABLE_AXES}
                               if left is not None else None)}


def grants(approval: Approval) -> list[str]:
    """What approving the item does, in words, per kind."""
    payload = approval.payload if isinstance(approval.payload, dict) else {}
    kind = approval.kind
    if kind == ApprovalKind.CAPABILITY:
        tool, capability = str(payload.get("tool") or "the tool"), str(payload.get("capability") or "")
        words = CAPABILITY_DESCRIPTIONS.get(capability, "")
        return [f"Runs {tool} once with the arguments shown (or your edit of them)"
                + (f": {capability}, {words}" if capability else "") + ".",
                f"With always allow: every later {tool} call of this run and its subagents runs "
                f"without asking.",
                "Rejecting returns ERR_CONSTRAINT_VIOLATION with your comment to the run."]
    if kind == ApprovalKind.CAPABILITY_REQUEST:
        capability = str(payload.get("capability") or "")
        tools = [t.name for t in RUNTIME_TOOLS.values() if t.capability == capability]
        return [f"Adds {capability} to the run's scope for the rest of the run"
                + (f" (tools: {', '.join(tools)})" if tools else "") + ".",
                "Rejecting refuses it with ERR_CONSTRAINT_VIOLATION and your comment."]
    if kind == ApprovalKind.CLARIFICATION:
        return ["Your answer joins the run's conversation and the same run goes on.",
                "Rejecting ends the run FAILED (ERR_INSUFFICIENT_CONTEXT) with your comment."]
    if kind == ApprovalKind.BUDGET:
        axis = str(payload.get("axis") or "the budget")
        return [f"The run goes on past {payload.get('used')} of its {axis} limit {payload.get('limit')}.",
                "With budget_limit: its limits rise to what you set, never above what its "
                "parent has left.",
                "Rejecting stops it (ERR_RESOURCE_EXHAUSTED)."]
    if kind == ApprovalKind.REVIEW:
        return ["approve confirms the value the model proposes, and the run completes with it.",
                "edit, with edited_arguments {field: value}, completes it with your value "
                "instead (checked against the field's schema).",
                "reject fails the run (ERR_INVALID_RESULT) with your comment."]
    if kind == ApprovalKind.INVALID_RESULT:
        return ["approve keeps the result, marked PARTIAL_COMPLETION, and the run completes.",
                "retry starts another attempt with a fresh context and the problems as its "
                "previous failure.",
                "reject fails the run (ERR_INVALID_RESULT) with your comment."]
    return []


def recent_events(run: Run) -> list[dict[str, Any]]:
    rows = list(run.events.order_by("-seq").values("seq", "type", "ts", "data")[:RECENT_EVENTS])
    return [{**row, "ts": iso(row["ts"])} for row in reversed(rows)]


def approval_detail(request: HttpRequest, approval: Approval) -> dict[str, Any]:
    run = approval.run
    context = json.loads(json.dumps(approval_context(approval), cls=DjangoJSONEncoder, default=str))
    return {**approval_out(approval), "refusal": decide_refusal(request.user, approval),
            "lineage": lineage(run), "grants": grants(approval), "budget": budget_left(run),
            "recent_events": recent_events(run), "context": context}


# -- the routes (the batch before "/{approval_id}": URL patterns are tried in order) --------

@router.post("/batch", response=list[ApprovalOut], summary="Decide several items of one run at once")
def decide_batch(request: HttpRequest, body: BatchIn) -> list[dict[str, Any]]:
    """The same decision and comment on every item, all or nothing: 422 naming an item of
    another run's tree, 409 naming one already decided, 404 naming one you cannot see."""
    visible = {a.pk: a for a in visible_approvals(request.user).select_related("run", "decided_by")
               .filter(pk__in=body.ids)}
    missing = [pk for pk in body.ids if pk not in visible]
    if missing:
        raise Http404(f"No inbox item {missing[0]} that you can see.")
    decided = approvals_decide_batch(approvals=[visible[pk] for pk in body.ids], user=request.user,
                                     decision=body.decision, comment=body.comment)
    return [approval_out(a) for a in decided]


@router.get("/{approval_id}", response=ApprovalDetailOut, summary="One inbox item, with its context")
def get_approval(request: HttpRequest, approval_id: int) -> dict[str, Any]:
    """The item, the chain of runs that leads to it, what approving grants, the budget
    left and the asking run's last events."""
    return approval_detail(request, _visible_approval(request, approval_id))


@router.post("/{approval_id}/decision", response=ApprovalOut, summary="Decide an inbox item")
def decide_approval(request: HttpRequest, approval_id: int, body: DecisionIn) -> dict[str, Any]:
    """approve | reject (a comment is required) | answer (a clarification) | edit (new tool
    call arguments, checked against the tool's schema; for a review, the corrected values
    ``{field: value}``) | retry (an invalid result), as the kind allows; ``always_allow`` and ``budget_limit`` ride on approve. The parked run
    resumes from its checkpoint."""
    approval = _visible_approval(request, approval_id)
    decided = approval_decide(approval=approval, user=request.user, decision=body.decision,
                              comment=body.comment, answer=body.answer,
                              edited_arguments=body.edited_arguments, always_allow=body.always_allow,
                              budget_limit=dict(body.budget_limit) if body.budget_limit is not None else None)
    return approval_out(decided)
