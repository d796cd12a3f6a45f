"""Writing approval rules: who may, what a save checks, and what a rule would have done.

Saving (or enabling) a rule first simulates it on the last decided items: how many it
would have approved or rejected, and every item where it disagrees with the person who
decided. A rule that would have approved something a person rejected is saved only with
an explicit confirmation. A save based on an older version is refused with what changed
since (409), as a delegation's is. Once saved and in force, the rule decides the items
waiting now.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from delegations.accounts.roles import can_write_rules
from delegations.models import Approval, ApprovalRule, RuleEffect
from delegations.protocol.approvals import Decision
from delegations.refusals import Refusal

from .rule_decisions import item_facts, rules_apply_to_waiting, widening_refusal
from .rules import matched_inputs, rule_problems

SIMULATION_WINDOW = 200
NOT_A_RULE_AUTHOR = ("Writing approval rules needs the rule author role (a rule is a standing "
                     "approval): ask an admin to add you to the “rule_authors” group.")
EDITABLE = ("name", "reason", "match", "effect", "comment", "enabled", "matches_everything", "expires_at")


class RuleRefusal(Refusal):
    """A rule the inbox will not save, or a person who may not write rules."""

    default_status = 422


@dataclass
class Simulation:
    """What a rule would have done to the last ``window`` decided items."""

    window: int
    looked_at: int = 0
    approved: int = 0
    rejected: int = 0
    two_approvers: int = 0
    disagreements: list[dict[str, Any]] = field(default_factory=list)

    @property
    def approves_what_a_person_rejected(self) -> bool:
        return any(d["rule"] == "approve" and d["person"] == "reject" for d in self.disagreements)

    def as_data(self) -> dict[str, Any]:
        return {"window": self.window, "looked_at": self.looked_at, "approved": self.approved,
                "rejected": self.rejected, "two_approvers": self.two_approvers,
                "disagreements": self.disagreements,
                "approves_what_a_person_rejected": self.approves_what_a_person_rejected}


def _person_verdict(approval: Approval) -> str:
    return "approve" if approval.decision in (Decision.APPROVE, Decision.EDIT) else str(approval.decision)


def rule_simulate(*, rule: ApprovalRule, window: int = SIMULATION_WINDOW) -> Simulation:
    """Run ``rule`` (saved or not) over the last ``window`` items people decided."""
    result = Simulation(window=window)
    items = (Approval.objects.decided().filter(decided_by__isnull=False).order_by("-decided_at")
             .select_related("run", "run__root", "run__owner", "run__root__owner")[:window])
    known_runs: dict[str, dict[str, Any]] = {}
    for approval in items:
        result.looked_at += 1
        facts = item_facts(approval, known_runs)
        if matched_inputs(rule.match, facts) is None:
            continue
        if rule.effect == RuleEffect.TWO_APPROVERS:
            result.two_approvers += 1
            continue
        if rule.effect == RuleEffect.APPROVE and widening_refusal(approval, facts) is not None:
            continue   # the rule would stand aside; a person decides, as one did
        verdict = "approve" if rule.effect == RuleEffect.APPROVE else "reject"
        result.approved += verdict == "approve"
        result.rejected += verdict == "reject"
        person = _person_verdict(approval)
        if person != verdict:
            result.disagreements.append({
                "id": approval.pk, "title": approval.title, "kind": approval.kind, "rule": verdict,
                "person": person, "decided_by": approval.decider, "comment": approval.comment,
                # the asking run's page, where the item and its audit are listed
                "url": f"{reverse('delegations:run_detail', args=[approval.run_id])}#run-approvals"})
    return result


# -- saving ---------------------------------------------------------------------------------

def rule_fields(data: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The editable fields of ``data`` as the model holds them, and every problem by field."""
    values = {name: data[name] for name in EDITABLE if name in data}
    problems: dict[str, list[str]] = {}
    if "name" in values and not str(values["name"] or "").strip():
        problems["name"] = ["Give the rule a name people will recognise in the audit."]
    if "reason" in values and not str(values["reason"] or "").strip():
        problems["reason"] = ["Say why items like these may be decided without asking."]
    expires = values.get("expires_at")
    if isinstance(expires, str):
        parsed = parse_datetime(expires) if expires else None
        if expires and parsed is None:
            problems["expires_at"] = [f"{expires!r} is not a date and time (ISO 8601)."]
        values["expires_at"] = parsed
    elif expires is not None and not isinstance(expires, datetime):
        problems["expires_at"] = ["Expected a date and time (ISO 8601)."]
    return values, problems


def rule_save(*, rule: ApprovalRule | None, data: Mapping[str, Any], user: Any,
              base_version: int | None = None, confirm_disagreements: bool = False) -> tuple[ApprovalRule, Simulation]:
    """Create (``rule`` None) or change a rule, and apply it to the waiting items. Raises
    RuleRefusal: 403 (not a rule author), 422 (every problem on its field, or disagreements
    with people not confirmed), 409 (a save based on an older version, with the diff)."""
    if not can_write_rules(user):
        raise RuleRefusal(NOT_A_RULE_AUTHOR, status=403)
    values, problems = rule_fields(data)
    draft = ApprovalRule(owner=user) if rule is None else ApprovalRule.objects.get(pk=rule.pk)
    for name, value in values.items():
        setattr(draft, name, value)
    missing = [name for name in ("name", "reason", "effect") if not getattr(draft, name)]
    for name in missing:
        problems.setdefault(name, ["Required."])
    problems.update({k: v for k, v in rule_problems(match=draft.match, effect=draft.effect, comment=draft.comment,
                                                    matches_everything=draft.matches_everything).items()
                     if k not in problems})
    if problems:
        raise RuleRefusal("The rule cannot be saved: " + " ".join(
            f"{where}: {'; '.join(messages)}" for where, messages in problems.items()),
            details={"errors": problems})
    simulation = rule_simulate(rule=draft)
    if draft.enabled and simulation.approves_what_a_person_rejected and not confirm_disagreements:
        raise RuleRefusal("This rule would have approved items a person rejected; look at them and "
                          "confirm to save it anyway.", details={"simulation": simulation.as_data()})
    saved = _store(rule, draft, user, base_version)
    if saved.enabled:
        rules_apply_to_waiting()
    return saved, simulation


def _store(rule: ApprovalRule | None, draft: ApprovalRule, user: Any, base_version: int | None) -> ApprovalRule:
    with transaction.atomic():
        if rule is None:
            draft.updated_by = user
            draft.save()
            draft.keep_version(saved_by=user)
            return draft
        base = rule.version if base_version is None else base_version
        changes = {name: getattr(draft, name) for name in EDITABLE}
        updated = ApprovalRule.objects.filter(pk=rule.pk, version=base).update(
            **changes, version=F("version") + 1, updated_by=user, updated_at=timezone.now())
        if not updated:
            raise _stale(rule, base)
        draft.refresh_from_db()
        draft.keep_version(saved_by=user)
        return draft


def _stale(rule: ApprovalRule, base_version: int) -> RuleRefusal:
    current = ApprovalRule.objects.get(pk=rule.pk)
    kept = current.versions.filter(number=base_version).values_list("data", flat=True).first()
    before = json.dumps(kept or {}, indent=2, sort_keys=True, default=str).splitlines(keepends=True)
    after = json.dumps(current.as_data(), indent=2, sort_keys=True, default=str).splitlines(keepends=True)
    diff = "".join(difflib.unified_diff(before, after, fromfile=f"version {base_version}",
                                        tofile=f"version {current.version}"))
    who = current.updated_by.get_username() if current.updated_by else "someone"
    return RuleRefusal(f"{who} saved this rule since version {base_version} (it is at version "
                       f"{current.version}); look at what changed and save again on top of it.",
                       status=409, details={"current_version": current.version, "diff": diff})
