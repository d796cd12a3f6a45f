"""Inbox items: a run asks a person (a capability, a budget, a clarification...)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist
from django.db import models
from django.utils import timezone

from delegations.protocol.approvals import (
    ApprovalDecision,
    ApprovalKind,
    Decision,
    allowed_decisions,
)
from delegations.protocol.lifecycle import (
    CLOSED_STATUSES,
    DECIDED_STATUSES,
    STATUS_FOR_DECISION,
    ApprovalStatus,
    approval_sources,
    check_approval_transition,
)

from .runs import Run

_UNDECIDED = sorted(str(status) for status in set(ApprovalStatus) - DECIDED_STATUSES)


def _raised_by_runs_of(user: Any) -> models.Q:
    """Items of the user's runs and of every run in their trees."""
    return models.Q(run__owner=user) | models.Q(run__root__owner=user)


class ApprovalQuerySet(models.QuerySet["Approval"]):
    def pending(self) -> ApprovalQuerySet:
        return self.filter(status=Approval.Status.PENDING)

    def pending_in_tree(self, root_id: str) -> ApprovalQuerySet:
        """The undecided items of every run of the tree rooted at ``root_id``."""
        return self.pending().filter(models.Q(run_id=root_id) | models.Q(run__root_id=root_id))

    def decided(self) -> ApprovalQuerySet:
        """The items a person decided (not those that expired or were cancelled)."""
        # as the statuses it is not: SQLite then reads the newest decided items along the
        # decided_at index, where "status IN (...)" took its status index and sorted every
        # decided item (the inbox's "Recently decided", 72 ms with 20,000 of them)
        return self.exclude(status__in=_UNDECIDED)

    def awaiting(self, now: datetime | None = None) -> ApprovalQuerySet:
        """Pending items someone may still decide: not past their deadline."""
        return self.pending().exclude(expires_at__lte=now or timezone.now())

    def past_deadline(self, now: datetime | None = None) -> ApprovalQuerySet:
        """Pending items whose deadline has passed (the sweeper expires them)."""
        return self.pending().filter(expires_at__lte=now or timezone.now())

    def of_runs_owned_by(self, user: Any) -> ApprovalQuerySet:
        """The items raised by the user's runs (and every run in their trees)."""
        return self.filter(_raised_by_runs_of(user))

    def tally_by_kind(self, user: Any) -> list[tuple[str, bool, int]]:
        """``(kind, raised by the user's runs, how many)`` for these items, in one query."""
        rows = self.order_by().values("kind").annotate(
            total=models.Count("pk"), owned=models.Count("pk", filter=_raised_by_runs_of(user)))
        return [(row["kind"], owns, count) for row in rows
                for owns, count in ((True, row["owned"]), (False, row["total"] - row["owned"])) if count]

    def cancel(self) -> list[Approval]:
        """Cancel the pending items among these (their runs ended before anyone decided)
        and return them as cancelled. One UPDATE, filtered on the statuses the lifecycle
        lets an item be cancelled from, so a bulk cancel never closes an item twice."""
        sources = approval_sources(ApprovalStatus.CANCELLED)
        items: list[Approval] = list(self.filter(status__in=sources).select_related("decided_by"))
        if not items:
            return []
        now = timezone.now()
        Approval.objects.filter(pk__in=[item.pk for item in items], status__in=sources).update(
            status=ApprovalStatus.CANCELLED, decided_at=now)
        for item in items:
            item._close(ApprovalStatus.CANCELLED, now)
        return items


class Approval(models.Model):
    """An inbox item. Its status follows the lifecycle's table (APPROVAL_TRANSITIONS):
    :meth:`record` (a person's decision), :meth:`expire` and ``Approval.objects.cancel()``
    are its only writers, and each refuses a move the table forbids (ERR_ILLEGAL_TRANSITION)."""

    # the lifecycle's statuses (ApprovalStatus) as the column's choices, under the name the
    # API's schema gives them (a docstring here would show in that schema)
    class Status(models.TextChoices):
        PENDING = ApprovalStatus.PENDING.value
        APPROVED = ApprovalStatus.APPROVED.value
        REJECTED = ApprovalStatus.REJECTED.value
        ANSWERED = ApprovalStatus.ANSWERED.value
        EDITED = ApprovalStatus.EDITED.value
        RETRIED = ApprovalStatus.RETRIED.value
        EXPIRED = ApprovalStatus.EXPIRED.value
        CANCELLED = ApprovalStatus.CANCELLED.value

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
        # the inbox's "Recently decided" and its history, newest first
        indexes = [models.Index(fields=["decided_at"], name="approval_decided_at")]

    def __str__(self) -> str:
        return f"{self.kind}: {self.title} ({self.status})"

    @property
    def is_pending(self) -> bool:
        return self.status == ApprovalStatus.PENDING

    @property
    def is_closed(self) -> bool:
        """Nobody can decide the item any more: decided, expired or cancelled."""
        return self.status in CLOSED_STATUSES

    @property
    def time_left(self) -> timedelta | None:
        """Until the deadline (zero once passed) while pending; None without a deadline or
        once it is no longer pending."""
        if self.expires_at is None or not self.is_pending:
            return None
        return max(self.expires_at - timezone.now(), timedelta(0))

    @property
    def budget_axis(self) -> str | None:
        """The limit a budget item asks about (``max_tokens``...), as the runner put it in
        the payload; None for other kinds or a payload without one."""
        axis = self.payload.get("axis") if isinstance(self.payload, dict) else None
        return axis if self.kind == ApprovalKind.BUDGET and isinstance(axis, str) and axis else None

    @property
    def allowed(self) -> tuple[Decision, ...]:
        """The decisions a person may take on this kind of item."""
        return allowed_decisions(self.kind)

    def to_decision(self) -> ApprovalDecision | None:
        """The protocol decision, once a person has decided (None while pending, expired
        or cancelled)."""
        if not self.decision or self.status not in DECIDED_STATUSES:
            return None
        return ApprovalDecision(Decision(self.decision), comment=self.comment, answer=self.answer,
                                edited_arguments=self.edited_arguments,
                                decided_by=self.decider or "",
                                always_allow=self.always_allow, budget_limit=self.budget_limit)

    def record(self, decision: Decision, *, user: Any, comment: str = "", answer: str = "",
               edited_arguments: dict[str, Any] | None = None, always_allow: bool = False,
               budget_limit: dict[str, Any] | None = None) -> None:
        """Record and save a person's decision; ERR_ILLEGAL_TRANSITION when the item is
        closed (the caller holds its row lock and has told the person why first)."""
        self._close(STATUS_FOR_DECISION[decision])
        self.decision = decision
        self.comment, self.answer, self.edited_arguments = comment, answer, edited_arguments
        self.always_allow, self.budget_limit = always_allow, budget_limit
        self.decided_by = user
        self.save()

    def expire(self, now: datetime) -> None:
        """Close the item as expired (nobody decided before its deadline) and save it;
        ERR_ILLEGAL_TRANSITION when it is closed already."""
        self._close(ApprovalStatus.EXPIRED, now)
        self.save(update_fields=["status", "decided_at"])

    @property
    def decider(self) -> str | None:
        """Who decided: the person's username, or the approval rule ("rule 'price hosts' v3")."""
        if self.decided_by is not None:
            return str(self.decided_by.get_username())
        audit = self.rule_audit()
        return f"rule '{audit['name']}' v{audit['version']}" if audit is not None else None

    def rule_audit(self) -> dict[str, Any] | None:
        """What the approval rule that decided the item (or sent it to two approvers) recorded."""
        try:
            return self.rule_decision.as_data()  # type: ignore[attr-defined, no-any-return]
        except ObjectDoesNotExist:
            return None

    def _close(self, status: ApprovalStatus, now: datetime | None = None) -> None:
        self.status = check_approval_transition(self.status, status)
        self.decided_at = now or timezone.now()

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
                "decided_by": self.decider, "rule": self.rule_audit(),
                "decided_at": _iso(self.decided_at)}


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None
