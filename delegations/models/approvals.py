"""Inbox items: a run asks a person (a capability, a budget, a clarification...)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from delegations.protocol.approvals import ApprovalDecision, ApprovalKind, Decision

from .runs import Run


class ApprovalQuerySet(models.QuerySet["Approval"]):
    def pending(self) -> ApprovalQuerySet:
        return self.filter(status=Approval.Status.PENDING)

    def pending_in_tree(self, root_id: str) -> ApprovalQuerySet:
        """The undecided items of every run of the tree rooted at ``root_id``."""
        return self.pending().filter(models.Q(run_id=root_id) | models.Q(run__root_id=root_id))

    def decided(self) -> ApprovalQuerySet:
        return self.exclude(status__in=[Approval.Status.PENDING, Approval.Status.EXPIRED])

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
        EXPIRED = "expired"   # its run ended (cancelled, timed out) before anyone decided

    # what each decision makes of the item
    STATUS_FOR_DECISION = {Decision.APPROVE: Status.APPROVED, Decision.REJECT: Status.REJECTED,
                           Decision.ANSWER: Status.ANSWERED, Decision.EDIT: Status.EDITED}

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

    objects = ApprovalQuerySet.as_manager()

    class Meta:
        ordering = ["-requested_at"]

    def __str__(self) -> str:
        return f"{self.kind}: {self.title} ({self.status})"

    @property
    def is_pending(self) -> bool:
        return self.status == self.Status.PENDING

    def to_decision(self) -> ApprovalDecision | None:
        """The protocol decision, once a person has decided (None while pending/expired)."""
        if not self.decision or self.status in (self.Status.PENDING, self.Status.EXPIRED):
            return None
        return ApprovalDecision(Decision(self.decision), comment=self.comment, answer=self.answer,
                                edited_arguments=self.edited_arguments,
                                decided_by=self.decided_by.get_username() if self.decided_by else "")

    def record(self, decision: Decision, *, user: Any, comment: str = "", answer: str = "",
               edited_arguments: dict[str, Any] | None = None) -> None:
        """Fill in a person's decision (the caller checks it is still pending and saves)."""
        self.decision = decision
        self.status = self.STATUS_FOR_DECISION[decision]
        self.comment, self.answer, self.edited_arguments = comment, answer, edited_arguments
        self.decided_by = user
        self.decided_at = timezone.now()

    def as_event_data(self) -> dict[str, Any]:
        """What the run's `approval` event and the inbox websocket carry."""
        return {"id": self.pk, "key": self.key, "kind": self.kind, "status": self.status,
                "title": self.title, "payload": self.payload, "risk": self.risk,
                "run_id": self.run_id, "decision": self.decision or None,
                "comment": self.comment, "answer": self.answer}
