"""Approval rules at work: deciding an item as it opens, and the items waiting now when a
rule is saved or enabled, through the inbox's own decision function.

A rule never widens a run. It approves only what the run already may do: a tool call whose
capability is in the asking run's token, a budget item whose run and ancestors still have
some of that axis left (continuing raises no limit), an invalid result (accepting it as
partial grants nothing), a value sent for review (confirming it grants nothing). A
capability request asks for a capability outside the token, so
no rule approves one; a person must. And the inbox's rules hold for the rule's author: an
approver and rule author, who did not start the asking run (unless self-approval is on).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Count, Max
from django.utils import timezone

from delegations.accounts.roles import can_approve, can_write_rules, owns_run
from delegations.models import Approval, ApprovalRule, RuleEffect, Run
from delegations.protocol.approvals import ApprovalKind, ancestors_left
from delegations.protocol.capabilities import TOOL_CAPABILITY

from .decisions import approval_decide_by_rule, run_budgets
from .rules import BUDGET_AXES, RULE_KINDS, ItemFacts, deciding_rule, review_facts, split_skill

logger = logging.getLogger(__name__)


# the facts that cost queries of their own, read only when some rule looks at them
COSTLY_FACTS = frozenset({"groups", "budget_left"})


def item_facts(approval: Approval, known_runs: dict[str, dict[str, Any]] | None = None, *,
               reads: frozenset[str] = COSTLY_FACTS) -> ItemFacts:
    """What rules see of ``approval``: its request, the asking run, its tree and budget
    (of :data:`COSTLY_FACTS`, those in ``reads``). ``known_runs`` keeps what was read of
    each run, for a caller looking at many items."""
    run = approval.run
    if known_runs is None or run.pk not in known_runs:
        facts = _run_facts(run, reads)
        if known_runs is not None:
            known_runs[run.pk] = facts
    else:
        facts = known_runs[run.pk]
    payload = approval.payload or {}
    arguments = payload.get("arguments") if approval.kind != ApprovalKind.REVIEW else review_facts(payload)
    return ItemFacts(kind=approval.kind, capability=str(payload.get("capability") or ""),
                     tool=str(payload.get("tool") or ""),
                     arguments=arguments if isinstance(arguments, dict) else {}, **facts)


def _run_facts(run: Run, reads: frozenset[str]) -> dict[str, Any]:
    root = run.root if run.root_id not in (None, run.pk) else run
    owner = root.owner if root is not None and root.owner_id is not None else run.owner
    skill, version = split_skill(run.skill)
    groups = (frozenset(owner.groups.values_list("name", flat=True))
              if owner is not None and "groups" in reads else frozenset())
    return {"skill": skill, "skill_version": version,
            "owner": owner.get_username() if owner is not None else "", "groups": groups,
            "depth": run.depth, "root_skill": split_skill(root.skill if root is not None else "")[0],
            "budget_left": _budget_left(run) if "budget_left" in reads else {}}


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


@dataclass(frozen=True)
class RuleBook:
    """The rules in force, oldest first, and their authors as the database has them now."""

    rules: list[ApprovalRule]
    authors: dict[int | None, Any]

    @property
    def reads(self) -> frozenset[str]:
        """The costly facts some rule matches on."""
        return frozenset(name for rule in self.rules for name in (rule.match or {})) & COSTLY_FACTS


_loaded: tuple[tuple[Any, ...], list[ApprovalRule]] | None = None


def rules_in_force() -> RuleBook:
    """The enabled rules not expired, read again only when a rule changed (one aggregate
    query instead of a hundred rows per item: bench_rules.py, 100 rules, about 25 ms of the
    decision), with their authors read fresh every time, so a role taken away counts at once."""
    global _loaded
    stamp = tuple(ApprovalRule.objects.aggregate(count=Count("pk"), last=Max("pk"),
                                                 changed=Max("updated_at")).values())
    if _loaded is None or _loaded[0] != stamp:
        _loaded = (stamp, list(ApprovalRule.objects.filter(enabled=True).order_by("pk")))
    now = timezone.now()
    rules = [rule for rule in _loaded[1] if rule.expires_at is None or rule.expires_at > now]
    owners = {rule.owner_id for rule in rules if rule.owner_id is not None}
    authors: dict[int | None, Any] = {user.pk: user for user in get_user_model().objects.filter(pk__in=owners, is_active=True)}
    return RuleBook(rules=rules, authors=authors)


def author_refusal(author: Any, approval: Approval) -> str | None:
    """Why the rule's author could not decide ``approval`` themselves (the inbox's rules
    hold for rules too), else None."""
    if author is None or not (can_write_rules(author) and can_approve(author)):
        return "The rule's author is no longer an approver and rule author."
    if not settings.HANDOFF_ALLOW_SELF_APPROVAL and owns_run(author, approval.run):
        return "The rule's author started this run; someone else must decide it."
    return None


def rule_for(approval: Approval, book: RuleBook) -> tuple[ApprovalRule, dict[str, Any]] | None:
    """The rule that may decide ``approval`` and what it matched, with the checks above;
    None when no rule may."""
    if approval.kind not in RULE_KINDS or not book.rules:
        return None
    # a budget item's budget is read anyway: no rule approves one beyond what the tree has left
    facts = item_facts(approval, reads=book.reads | ({"budget_left"} if approval.kind == ApprovalKind.BUDGET
                                                     else set()))
    # one check per author (a hundred rules are usually a few people's), not one per rule
    allowed = {owner_id: author_refusal(book.authors.get(owner_id), approval) is None
               for owner_id in {rule.owner_id for rule in book.rules}}
    usable = [rule for rule in book.rules if allowed[rule.owner_id]]
    chosen = deciding_rule(usable, facts)
    if chosen is None:
        return None
    rule = chosen[0]
    if rule.effect == RuleEffect.APPROVE and widening_refusal(approval, facts) is not None:
        # an approve rule that would widen the run stands aside; a stricter rule may still apply
        return deciding_rule([r for r in usable if r.effect != RuleEffect.APPROVE], facts)
    return chosen


def decide_by_rules(approval: Approval, *, resume: bool, book: RuleBook | None = None) -> bool:
    """Let the rules in force decide ``approval``; whether one did (or sent it to two
    approvers)."""
    chosen = rule_for(approval, book if book is not None else rules_in_force())
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
    book = rules_in_force()
    if not book.rules:
        return []
    decided = []
    pending = Approval.objects.pending().exclude(rule_decision__isnull=False)
    for approval in pending.select_related("run", "run__root", "run__owner", "run__root__owner"):
        if decide_by_rules(approval, resume=True, book=book):
            decided.append(approval.pk)
    return decided
