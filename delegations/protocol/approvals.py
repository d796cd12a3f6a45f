"""Human decisions: what the runner asks for, what it gets back, and the gate interface.

A gate may answer at once (the CLI's --auto-approve, tests) or park the run: it raises
:class:`RunParked`, the runner checkpoints and returns, and the host resumes the run
later. On resume the runner asks again with the same ``key``, and the gate answers from
what was decided meanwhile. Keys are deterministic per run and step, so a resumed run
never opens a second inbox item for the same question.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from .budgets import Budget, Usage, narrow, remaining, used


class ApprovalKind(StrEnum):
    CAPABILITY = "capability"                  # a tool call that needs an approval-required capability
    CAPABILITY_REQUEST = "capability_request"  # the model asked for a capability outside its scope
    BUDGET = "budget"                          # soft budget threshold crossed
    CLARIFICATION = "clarification"            # BLOCKED_AWAITING_CLARIFICATION
    INVALID_RESULT = "invalid_result"          # a result failed validation after self-correction
    REVIEW = "review"                          # a value the model is unsure of: confirm or correct it


class Decision(StrEnum):
    APPROVE = "approve"    # go ahead (for a budget: continue; for an invalid result: accept as
                           # partial; for a review: confirm the proposed value)
    REJECT = "reject"      # refuse (for a budget: stop; for an invalid result or a review: fail)
    ANSWER = "answer"      # a clarification's answer
    EDIT = "edit"          # a tool call approved with edited arguments; a review's corrected values
    RETRY = "retry"        # an invalid result: try again with a fresh context


# how a decision reads once made; on a review item, in its own words (a value confirmed,
# corrected or failed, not a call approved, edited or rejected)
DECIDED: dict[str, str] = {Decision.APPROVE: "approved", Decision.REJECT: "rejected",
                           Decision.ANSWER: "answered", Decision.EDIT: "approved with edits",
                           Decision.RETRY: "sent back for a retry"}
REVIEW_DECIDED: dict[str, str] = {Decision.APPROVE: "confirmed", Decision.REJECT: "failed",
                                  Decision.EDIT: "corrected"}


def decided_as(kind: str, decision: str) -> str:
    """How ``decision`` on an item of ``kind`` reads once made."""
    return (REVIEW_DECIDED if kind == ApprovalKind.REVIEW else DECIDED).get(decision, decision)


# the one table of what a person may decide on each kind of item
_ALLOWED: dict[ApprovalKind, tuple[Decision, ...]] = {
    ApprovalKind.CAPABILITY: (Decision.APPROVE, Decision.EDIT, Decision.REJECT),
    ApprovalKind.CAPABILITY_REQUEST: (Decision.APPROVE, Decision.REJECT),
    ApprovalKind.CLARIFICATION: (Decision.ANSWER, Decision.REJECT),
    ApprovalKind.BUDGET: (Decision.APPROVE, Decision.REJECT),
    ApprovalKind.INVALID_RESULT: (Decision.APPROVE, Decision.RETRY, Decision.REJECT),
    ApprovalKind.REVIEW: (Decision.APPROVE, Decision.EDIT, Decision.REJECT),
}

# "always allow this tool for this run" and a raised budget limit ride on these decisions
ALWAYS_ALLOW_KINDS = frozenset({ApprovalKind.CAPABILITY})
ALWAYS_ALLOW_DECISIONS = frozenset({Decision.APPROVE, Decision.EDIT})


def allowed_decisions(kind: ApprovalKind | str) -> tuple[Decision, ...]:
    """The decisions a person may take on an item of ``kind``, in the order a page offers
    them (an unknown kind allows none)."""
    try:
        return _ALLOWED[ApprovalKind(kind)]
    except ValueError:
        return ()


# the limits a person may raise when a budget item asks whether a run goes on
RAISABLE_AXES = ("max_model_calls", "max_tokens", "max_cost_usd")


def ancestors_left(ancestors: Iterable[tuple[Budget, Usage]]) -> Budget | None:
    """What the ancestors of a run have left (the tightest figure on every axis), from
    their budgets and usages; None for a root run (no ancestor)."""
    left: Budget | None = None
    for budget, usage in ancestors:
        theirs = remaining(budget, usage)
        left = theirs if left is None else narrow(theirs, left)
    return left


def raised_budget(budget: Budget, limits: Mapping[str, Any], *, usage: Usage,
                  ancestors: Budget | None) -> tuple[Budget, list[str]]:
    """``budget`` with the limits a person raised on a budget item, and every reason the
    raise cannot be taken (then the budget comes back unchanged). A new limit is above the
    current one, and never lets the run use more than its ancestors have left
    (``ancestors``, see :func:`ancestors_left`): at most what it used so far plus that."""
    problems: list[str] = []
    values = budget.as_dict()
    if not limits:
        problems.append("budget_limit is empty; give at least one of "
                        f"{', '.join(RAISABLE_AXES)} with its new limit.")
    for axis, value in limits.items():
        if axis not in RAISABLE_AXES:
            problems.append(f"budget_limit.{axis}: only {', '.join(RAISABLE_AXES)} can be raised.")
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            problems.append(f"budget_limit.{axis}: expected a number, got {value!r}.")
            continue
        current = getattr(budget, axis)
        if current is None:
            problems.append(f"budget_limit.{axis}: the run has no {axis} limit to raise.")
            continue
        if value <= current:
            problems.append(f"budget_limit.{axis}: {value:g} is not above the current limit "
                            f"{current:g}; a raised limit must be higher.")
            continue
        cap = getattr(ancestors, axis) if ancestors is not None else None
        if cap is not None and value > used(usage, axis) + cap:
            problems.append(f"budget_limit.{axis}: {value:g} is above what the parent has left: "
                            f"at most {used(usage, axis) + cap:g} (used so far {used(usage, axis):g} "
                            f"plus the parent's remaining {cap:g}).")
            continue
        values[axis] = int(value) if axis != "max_cost_usd" else float(value)
    if problems:
        return budget, problems
    return Budget.model_validate(values), []


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    key: str                 # deterministic: f"{run_id}:{kind}:{step}"
    run_id: str
    kind: ApprovalKind
    title: str               # one line a person can act on
    payload: dict[str, Any] = field(default_factory=dict)  # tool name, arguments, question, budget figures...
    risk: str = "low"        # low | medium | high


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    decision: Decision
    comment: str = ""
    answer: str = ""                                   # for clarifications
    edited_arguments: dict[str, Any] | None = None     # for decision=edit on a tool call
    decided_by: str = ""
    # approve/edit of a tool call: later calls of the same tool in this run and its
    # subagents go ahead without asking
    always_allow: bool = False
    # approve of a budget item: the run's new limits ({"max_tokens": N, ...})
    budget_limit: dict[str, Any] | None = None

    @property
    def allows(self) -> bool:
        return self.decision in (Decision.APPROVE, Decision.ANSWER, Decision.EDIT)


class RunParked(Exception):  # a control-flow signal, not an error
    """Raised by a gate that will decide later: the run checkpoints and releases its worker."""

    def __init__(self, request: ApprovalRequest) -> None:
        super().__init__(request.title)
        self.request = request


class ApprovalGate(Protocol):
    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        """Return the decision, or raise RunParked when a person will decide later."""
        ...


@dataclass
class AutoGate:
    """Decides everything the same way at once (scripts, tests, benchmarks): approving
    answers a clarification with ``answer`` and fails an invalid result or a value sent for
    review (an automatic approval never accepts one nobody looked at); rejecting refuses
    anything."""

    decision: Decision = Decision.APPROVE
    answer: str = ""
    asked: list[ApprovalRequest] = field(default_factory=list)

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(request)
        decision = self.decision
        if decision == Decision.APPROVE and request.kind == ApprovalKind.CLARIFICATION:
            decision = Decision.ANSWER
        elif decision == Decision.APPROVE and request.kind in (ApprovalKind.INVALID_RESULT,
                                                               ApprovalKind.REVIEW):
            # nobody looked at it: an unseen invalid (or unsure) result fails, as it would
            # without an inbox
            decision = Decision.REJECT
        return ApprovalDecision(decision, comment="automatic", answer=self.answer, decided_by="auto")
