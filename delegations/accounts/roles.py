"""Who may do what. Three groups carry the roles; superusers have them all."""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from django.db.models.functions import Coalesce

from delegations.models import Approval, Run
from delegations.models.approvals import ApprovalQuerySet
from delegations.models.runs import RunQuerySet

COMPOSERS = "composers"
APPROVERS = "approvers"
RULE_AUTHORS = "rule_authors"


def _in_group(user: Any, group: str) -> bool:
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return False
    if user.is_superuser:
        return True
    names = getattr(user, "_handoff_groups", None)
    if names is None:
        names = set(user.groups.values_list("name", flat=True))
        user._handoff_groups = names  # cached for the request
    return group in names


def can_compose(user: Any) -> bool:
    """Composers create and run delegations and import skills."""
    return _in_group(user, COMPOSERS)


def can_approve(user: Any) -> bool:
    """Approvers decide inbox items (approvals, clarifications, budget escalations)."""
    return _in_group(user, APPROVERS)


def can_write_rules(user: Any) -> bool:
    """Rule authors write approval rules: a rule is a standing approval, so it is a role of
    its own (an approver is not one by default)."""
    return _in_group(user, RULE_AUTHORS)


def visible_approvals(user: Any) -> ApprovalQuerySet:
    """The inbox items this user may see: approvers and staff see every item; others see
    the items of their own runs."""
    if not getattr(user, "is_authenticated", False):
        return Approval.objects.none()
    if user.is_staff or can_approve(user):
        return Approval.objects.all()
    return Approval.objects.of_runs_owned_by(user)


def visible_runs(user: Any) -> RunQuerySet:
    """The runs this user may open: their own trees (staff: every run), and for approvers
    also every tree in which some run asked the inbox something, so an item is decided
    with its run's whole page in front of them."""
    runs = Run.objects.visible_to(user)
    if user.is_staff or not can_approve(user):
        return runs
    asking_trees = Approval.objects.annotate(tree=Coalesce("run__root_id", "run_id")).values("tree")
    return runs | Run.objects.filter(Q(pk__in=asking_trees) | Q(root_id__in=asking_trees))
