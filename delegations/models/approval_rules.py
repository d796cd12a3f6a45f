"""Approval rules: standing decisions an approver wrote down, so routine inbox items are
decided by policy and people see only what needs them.

A rule is data, never code: ``match`` is structured JSON (see ``delegations.inbox.rules``
for its fields and how they are checked), ``effect`` what it decides. Every save is kept
as an :class:`ApprovalRuleVersion`, as a delegation's are, so a save based on an older
version is refused with what changed since, and the audit names the version that decided.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from .approvals import Approval


class RuleEffect(models.TextChoices):
    APPROVE = "approve", "Approve"
    REJECT = "reject", "Reject (with a comment the subagent gets)"
    TWO_APPROVERS = "two_approvers", "Require two different approvers"


class ApprovalRule(models.Model):
    name = models.CharField(max_length=200)
    reason = models.TextField(help_text="Why items like these may be decided without asking.")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                              related_name="approval_rules")
    match = models.JSONField(default=dict, help_text="What the rule matches (structured JSON).")
    effect = models.CharField(max_length=20, choices=RuleEffect.choices)
    comment = models.TextField(blank=True, help_text="For a rejection: what the subagent is told.")
    enabled = models.BooleanField(default=True)
    matches_everything = models.BooleanField(
        default=False, help_text="Confirmed: the rule approves an approval-required capability "
                                 "for every skill and host.")
    expires_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField(default=1, help_text="Goes up by one with every save.")
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["pk"]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"

    @property
    def label(self) -> str:
        """How the audit names it: rule 'price hosts' v3."""
        return f"rule '{self.name}' v{self.version}"

    def as_data(self) -> dict[str, Any]:
        """The fields a version keeps (and a stale save is diffed on)."""
        return {"name": self.name, "reason": self.reason, "match": self.match, "effect": self.effect,
                "comment": self.comment, "enabled": self.enabled,
                "matches_everything": self.matches_everything,
                "expires_at": self.expires_at.isoformat() if self.expires_at else None}

    def keep_version(self, saved_by: Any) -> ApprovalRuleVersion:
        return ApprovalRuleVersion.objects.create(rule=self, number=self.version, data=self.as_data(),
                                                  saved_by=saved_by)


class ApprovalRuleVersion(models.Model):
    """A rule as one save left it."""

    rule = models.ForeignKey(ApprovalRule, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    data = models.JSONField(default=dict)
    saved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                 on_delete=models.SET_NULL, related_name="+")
    saved_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["number"]
        constraints = [models.UniqueConstraint(fields=["rule", "number"],
                                               name="approval_rule_version_number_unique")]

    def __str__(self) -> str:
        return f"{self.data.get('name', self.rule_id)} v{self.number}"


class RuleDecision(models.Model):
    """The audit of a rule on one item: which rule and version, what it matched, when. Kept
    as written (the rule's name and version are copied), so revoking or editing the rule
    never changes what the item says decided it."""

    approval = models.OneToOneField(Approval, on_delete=models.CASCADE, related_name="rule_decision")
    rule = models.ForeignKey(ApprovalRule, null=True, on_delete=models.SET_NULL, related_name="decisions")
    rule_name = models.CharField(max_length=200)
    rule_version = models.PositiveIntegerField()
    effect = models.CharField(max_length=20, choices=RuleEffect.choices)
    matched = models.JSONField(default=dict, help_text="The item's inputs the rule matched.")
    decided_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.label

    @property
    def label(self) -> str:
        verb = {"approve": "approved", "reject": "rejected"}.get(self.effect, "sent to two approvers")
        return f"{verb} by rule '{self.rule_name}' v{self.rule_version}"

    def as_data(self) -> dict[str, Any]:
        return {"rule_id": self.rule_id, "name": self.rule_name, "version": self.rule_version,
                "effect": self.effect, "matched": self.matched, "label": self.label,
                "decided_at": self.decided_at.isoformat()}


class ApprovalSignoff(models.Model):
    """The first approval of an item a rule sent to two different approvers."""

    approval = models.ForeignKey(Approval, on_delete=models.CASCADE, related_name="signoffs")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    signed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["approval", "user"],
                                               name="approval_signoff_once_per_person")]

    def __str__(self) -> str:
        return f"#{self.approval_id} signed by {self.user_id}"
