"""Human decisions: what the runner asks for, what it gets back, and the gate interface.

A gate may answer at once (the CLI's --auto-approve, tests) or park the run: it raises
:class:`RunParked`, the runner checkpoints and returns, and the host resumes the run
later. On resume the runner asks again with the same ``key``, and the gate answers from
what was decided meanwhile. Keys are deterministic per run and step, so a resumed run
never opens a second inbox item for the same question.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol


class ApprovalKind(StrEnum):
    CAPABILITY = "capability"                  # a tool call that needs an approval-required capability
    CAPABILITY_REQUEST = "capability_request"  # the model asked for a capability outside its scope
    BUDGET = "budget"                          # soft budget threshold crossed
    CLARIFICATION = "clarification"            # BLOCKED_AWAITING_CLARIFICATION
    INVALID_RESULT = "invalid_result"          # a result failed validation after self-correction


class Decision(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"
    ANSWER = "answer"
    EDIT = "edit"


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
    """Decides everything the same way at once (scripts, tests, benchmarks)."""

    decision: Decision = Decision.APPROVE
    answer: str = ""
    asked: list[ApprovalRequest] = field(default_factory=list)

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(request)
        decision = Decision.ANSWER if (request.kind == ApprovalKind.CLARIFICATION
                                       and self.decision == Decision.APPROVE) else self.decision
        return ApprovalDecision(decision, comment="automatic", answer=self.answer, decided_by="auto")
