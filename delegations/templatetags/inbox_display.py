"""Template helpers of the inbox's decision forms, shared by the inbox and the run page."""

from __future__ import annotations

import json
from typing import Any

from django import template

from delegations.inbox.context import arguments_diff, decision_items
from delegations.models import Approval
from delegations.protocol.approvals import ApprovalKind, decided_as

register = template.Library()


@register.simple_tag(takes_context=True)
def decision_item(context: template.Context, approval: Approval) -> dict[str, Any]:
    """What the decision forms of one item need, for the person viewing the page (the run
    page asks per pending item; the inbox builds a page of them at once)."""
    return decision_items(context.get("user"), [approval])[0]


@register.filter
def edited_diff(approval: Approval) -> list[dict[str, str]]:
    """A decided item's edited arguments against the ones the subagent asked for."""
    payload = approval.payload if isinstance(approval.payload, dict) else {}
    return arguments_diff(payload.get("arguments"), approval.edited_arguments)


@register.filter
def outcome(approval: Approval) -> str:
    """How a decided item's outcome reads: its status, in a review's own words (a confirmed,
    corrected or failed label, not an approved, edited or rejected call)."""
    if approval.kind == ApprovalKind.REVIEW and approval.decision:
        return decided_as(approval.kind, approval.decision)
    return str(approval.status)


@register.filter
def as_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
