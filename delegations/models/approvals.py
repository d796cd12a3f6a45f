"""Inbox items: a run asks a person (a capability, a budget, a clarification...)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from delegations.protocol.approvals import (
    ApprovalDecision,
    ApprovalKind,
    Decision,
    allowed_decisions,
)

from .runs import Run


class ApprovalQuerySet(models.QuerySet["Approval"]):
    def pending(self) -> ApprovalQuerySet:
        return self.filter(status=Approval.Status.PENDING)

    def pending_in_tree(self, root_id: str) -> ApprovalQuerySet:
        """The undecided items of every run of the tree rooted at ``root_id``."""
        return self.pending().filter(models.Q(run_id=root_id) | models.Q(run__root_id=root_id))

    def decided(self) -> ApprovalQuerySet:
        """The items a person decided (not those that expired or were cancelled)."""
        return self.exclude(status__in=Approval.UNDECIDED)

    def past_deadline(self, now: datetime | None = None) -> ApprovalQuerySet:
        """Pending items whose deadline has passed (the sweeper expires them)."""
        return self.pending().filter(expires_at__lte=now or timezone.now())

    def of_runs_owned_by(self, user: Any) -> ApprovalQuerySet:
        """The items raised by the user's runs (and every run in their trees)."""
        return self.filter(models.Q(run__owner=user) | models.Q(run__root__owner=user))


class Approval(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        REJECTED = "rejected"
        ANSWERED = "answered"
        EDITED = "edited"
        RETRIED = "retried"       # an invalid result sent back for a fresh attempt
        EXPIRED = "expired"       # its deadline passed before anyone decided: the run timed out
        CANCELLED = "cancelled"   # its run ended (cancelled, timed out, failed) before anyone decided

    # what each decision makes of the item
    STATUS_FOR_DECISION = {Decision.APPROVE: Status.APPROVED, Decision.REJECT: Status.REJECTED,
                           Decision.ANSWER: Status.ANSWERED, Decision.EDIT: Status.EDITED,
                           Decision.RETRY: Status.RETRIED}
    # the statuses no person decided
    UNDECIDED = (Status.PENDING, Status.EXPIRED, Status.CANCELLED)

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="approvals")
    key = models.CharField(max_length=255, unique=True,
                           help_text="Deterministic per run and step: a resumed run asks again "
                                     "with the same key.")
    kind = models.CharField(max_length=30, choices=[(k.value, k.value) for k in ApprovalKind])
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING,
                              db_index=True)
    title = models.CharField(max_length=500)
    payload = models.JSONField(default=dict, blank=True)
    risk = models.CharField(max_length=10, default="low")
    requested_at = models.DateTimeField(default=timezone.now, db_index=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="approval_decisions")
    decision = models.CharField(max_length=10, blank=True,
                                choices=[(d.value, d.value) for d in Decision])
    comment = models.TextField(blank=True)
    answer = models.TextField(blank=True)
    edited_arguments = models.JSONField(null=True, blank=True)
    always_allow = models.BooleanField(
        default=False, help_text="Approved for the rest of the run and its subagents: later "
                                 "calls of the same tool go ahead without asking.")
    budget_limit = models.JSONField(null=True, blank=True,
                                    help_text="The raised limits a person let the run go on with.")
    expires_at = models.DateTimeField(null=True, blank=True, db_index=True,
                                      help_text="Past this deadline the item expires and its run "
                                                "times out (ERR_TIMEOUT).")

    objects = ApprovalQuerySet.as_manager()

    class Meta:
        ordering = ["-requested_at"]

    def __str__(self) -> str:
        return f"{self.kind}: {self.title} ({self.status})"

    @property
    def is_pending(self) -> bool:
        return self.status == self.Status.PENDING

    @property
    def time_left(self) -> timedelta | None:
        """Until the deadline (zero once passed) while pending; None without a deadline or
        once it is no longer pending."""
        if self.expires_at is None or not self.is_pending:
            return None
        return max(self.expires_at - timezone.now(), timedelta(0))

    @property
    def allowed(self) -> tuple[Decision, ...]:
        """The decisions a person may take on this kind of item."""
        return allowed_decisions(self.kind)

    def to_decision(self) -> ApprovalDecision | None:
        """The protocol decision, once a person has decided (None while pending, expired
        or cancelled)."""
        if not self.decision or self.status in self.UNDECIDED:
            return None
        return ApprovalDecision(Decision(self.decision), comment=self.comment, answer=self.answer,
                                edited_arguments=self.edited_arguments,
                                decided_by=self.decided_by.get_username() if self.decided_by else "",
                                always_allow=self.always_allow, budget_limit=self.budget_limit)

    def record(self, decision: Decision, *, user: Any, comment: str = "", answer: str = "",
               edited_arguments: dict[str, Any] | None = None, always_allow: bool = False,
               budget_limit: dict[str, Any] | None = None) -> None:
        """Fill in a person's decision (the caller checks it is still pending and saves)."""
        self.decision = decision
        self.status = self.STATUS_FOR_DECISION[decision]
        self.comment, self.answer, self.edited_arguments = comment, answer, edited_arguments
        self.always_allow, self.budget_limit = always_allow, budget_limit
        self.decided_by = user
        self.decided_at = timezone.now()

    def as_event_data(self) -> dict[str, Any]:
        """What the run's `approval` event and the inbox websocket carry."""
        return {"id": self.pk, "key": self.key, "kind": self.kind, "status": self.status,
                "title": self.title, "payload": self.payload, "risk": self.risk,
                "run_id": self.run_id, "decision": self.decision or None,
                "comment": self.comment, "answer": self.answer,
                "edited_arguments": self.edited_arguments, "always_allow": self.always_allow,
                "budget_limit": self.budget_limit,
                "requested_at": _iso(self.requested_at), "expires_at": _iso(self.expires_at),
                "allowed": [decision.value for decision in self.allowed],
                "decided_by": self.decided_by.get_username() if self.decided_by is not None else None,
                "decided_at": _iso(self.decided_at)}


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None
