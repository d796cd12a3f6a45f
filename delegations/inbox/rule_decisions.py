"""Approval rules at work: deciding an item as it opens, and the items waiting now when a
rule is saved or enabled, through the inbox's own decision function.

A rule never widens a run. It approves only what the run already may do: a tool call whose
capability is in the asking run's token, a budget item whose run and ancestors still have
some of that axis left (continuing raises no limit), an invalid result (accepting it as
partial grants nothing). A capability request asks for a capability outside the token, so
no rule approves one; a person must. And the inbox's rules hold for the rule's author: an
approver and rule author, who did not start the asking run (unless self-approval is on).
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from delegations.accounts.roles import can_approve, can_write_rules
from delegations.models import Approval, ApprovalRule, RuleEffect, Run
from delegations.protocol.approvals import ApprovalKind, ancestors_left
from delegations.protocol.capabilities import TOOL_CAPABILITY

from .decisions import approval_decide_by_rule, owns_run, run_budgets
from .rules import BUDGET_AXES, RULE_KINDS, ItemFacts, deciding_rule, split_skill

logger = logging.getLogger(__name__)


def item_facts(approval: Approval) -> ItemFacts:
    """What rules see of ``approval``: its request, the asking run, its tree and budget."""
    run = approval.run
    root = run.root if run.root_id not in (None, run.pk) else run
    owner = root.owner if root is not None and root.owner_id is not None else run.owner
    payload = approval.payload or {}
    arguments = payload.get("arguments")
    skill, version = split_skill(run.skill)
    return ItemFacts(
        kind=approval.kind, capability=str(payload.get("capability") or ""),
        tool=str(payload.get("tool") or ""),
        arguments=arguments if isinstance(arguments, dict) else {},
        skill=skill, skill_version=version,
        owner=owner.get_username() if owner is not None else "",
        groups=frozenset(owner.groups.values_list("name", flat=True)) if owner is not None else frozenset(),
        depth=run.depth, root_skill=split_skill(root.skill if root is not None else "")[0],
        budget_left=_budget_left(run))


def _budget_left(run: Run) -> dict[str, float]:
    """The tightest remainder on each limited axis of the run and all its ancestors."""
    tree = [run, *Run.objects.filter(pk__in=run.ancestor_ids())]
    figures = run_budgets(tree)
    left = ancestors_left(figures[member.pk] for member in tree)
    values = left.as_dict(include_unlimited=False) if left is not None else {}
    return {axis: float(value) for axis, value in values.items() if axis in BUDGET_AXES}


def widening_refusal(approval: Approval, facts: ItemFacts) -> str | None:
    """Why approving ``approval`` would give its run more than it has (None: it would not)."""
    run = approval.run
    if approval.kind == ApprovalKind.CAPABILITY:
        if facts.capability not in (run.capabilities or []):
            return f"{facts.capability or 'the capability'} is not in the run's capability token."
        needed = TOOL_CAPABILITY.get(facts.tool)
        if needed is not None and needed != facts.capability:
            return f"{facts.tool} needs {needed}, not {facts.capability}."
        return None
    if approval.kind == ApprovalKind.CAPABILITY_REQUEST:
        return "A capability request asks for more than the run's token holds; a person decides it."
    if approval.kind == ApprovalKind.BUDGET:
        axis = str((approval.payload or {}).get("axis") or "")
        if facts.budget_left.get(axis, 1.0) <= 0:
            return f"The run's tree has no {axis} left."
        return None
    return None if approval.kind in RULE_KINDS else f"Rules do not decide {approval.kind} items."


def author_refusal(rule: ApprovalRule, approval: Approval) -> str | None:
    """Why the rule's author could not decide ``approval`` themselves (the inbox's rules
    hold for rules too), else None."""
    author = rule.owner
    if author is None or not (can_write_rules(author) and can_approve(author)):
        return f"{rule.label}'s author is no longer an approver and rule author."
    if not settings.HANDOFF_ALLOW_SELF_APPROVAL and owns_run(author, approval.run):
        return f"{rule.label}'s author started this run; someone else must decide it."
    return None


def rule_for(approval: Approval, rules: list[ApprovalRule]) -> tuple[ApprovalRule, dict[str, Any]] | None:
    """The rule that may decide ``approval`` and what it matched, with the checks above;
    None when no rule may."""
    if approval.kind not in RULE_KINDS:
        return None
    facts = item_facts(approval)
    usable = [rule for rule in rules if author_refusal(rule, approval) is None]
    chosen = deciding_rule(usable, facts)
    if chosen is None:
        return None
    rule = chosen[0]
    if rule.effect == RuleEffect.APPROVE and widening_refusal(approval, facts) is not None:
        # an approve rule that would widen the run stands aside; a stricter rule may still apply
        stricter = deciding_rule([r for r in usable if r.effect != RuleEffect.APPROVE], facts)
        return stricter
    return chosen


def decide_by_rules(approval: Approval, *, resume: bool, rules: list[ApprovalRule] | None = None) -> bool:
    """Let the rules in force decide ``approval``; whether one did (or sent it to two
    approvers)."""
    chosen = rule_for(approval, rules if rules is not None else list(ApprovalRule.objects.in_force()))
    if chosen is None:
        return False
    rule, matched = chosen
    return approval_decide_by_rule(approval=approval, rule=rule, matched=matched, resume=resume) is not None


def decide_on_open(approval: Approval) -> None:
    """The gate's listener: rules decide a new item before anyone is asked. The gate's own
    copy of the item is refreshed, so it answers the run from the rule's decision at once."""
    try:
        if decide_by_rules(approval, resume=False):
            approval.refresh_from_db()
    except Exception:
        # a broken rule must never lose the item: it waits for a person as before
        logger.warning("Approval rules failed on item %s; it waits for a person", approval.pk, exc_info=True)


def rules_apply_to_waiting() -> list[int]:
    """Apply the rules in force to every waiting item (after a rule is saved or enabled);
    the ids of the items they decided. Each decided item leaves the inbox live."""
    rules = list(ApprovalRule.objects.in_force())
    if not rules:
        return []
    decided = []
    pending = Approval.objects.pending().exclude(rule_decision__isnull=False)
    for approval in pending.select_related("run", "run__root", "run__owner", "run__root__owner"):
        if decide_by_rules(approval, resume=True, rules=rules):
            decided.append(approval.pk)
    return decided
