"""The protocol's one exception type, its error codes, and the agloop delegation protocol's failure table.

Every failure the protocol core reports is a :class:`ProtocolError` carrying a stable
``code``; callers branch on the code, people read the message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    # the hand-off protocol's error handling
    INSUFFICIENT_CONTEXT = "ERR_INSUFFICIENT_CONTEXT"
    RESOURCE_EXHAUSTED = "ERR_RESOURCE_EXHAUSTED"
    CONSTRAINT_VIOLATION = "ERR_CONSTRAINT_VIOLATION"
    TOOL_FAILURE = "ERR_TOOL_FAILURE"
    TIMEOUT = "ERR_TIMEOUT"
    # Handoff's additions
    INVALID_RESULT = "ERR_INVALID_RESULT"
    WORKER_LOST = "ERR_WORKER_LOST"
    # raised by the library for bad input it is handed (not reported by subagents)
    INVALID_PACKET = "ERR_INVALID_PACKET"
    INVALID_MANIFEST = "ERR_INVALID_MANIFEST"
    INVALID_EDIT = "ERR_INVALID_EDIT"
    ILLEGAL_TRANSITION = "ERR_ILLEGAL_TRANSITION"
    INVALID_ADAPTER_CONFIG = "ERR_INVALID_ADAPTER_CONFIG"


def internal_error_message(what: str, run_id: str) -> str:
    """What a person (and the model) reads when ``what`` broke on a fault of Handoff's own:
    plain words and what to do, never the exception, whose class and traceback go to the
    server log under the run's id."""
    return (f"{what} stopped because of an internal error in Handoff, not because of the "
            f"subagent's work or its input. Try it again; if it happens again, an administrator "
            f"finds the details in the server log under run {run_id}.")


@dataclass(frozen=True, slots=True)
class Issue:
    """One problem found in an input, located by a dotted field path ("budget.max_tokens")."""

    field: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


class ProtocolError(Exception):
    """The protocol core's only exception type.

    ``issues`` lists every problem at once when an input had several (a manifest with
    three bad fields reports all three), so forms and APIs can show them together.
    """

    def __init__(self, code: ErrorCode | str, message: str, *, issues: list[Issue] | None = None,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = ErrorCode(code) if code in ErrorCode._value2member_map_ else code
        self.message = message
        self.issues = list(issues or [])
        self.details = dict(details or {})

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": str(self.code), "message": self.message}
        if self.issues:
            out["issues"] = [issue.as_dict() for issue in self.issues]
        if self.details:
            out["details"] = self.details
        return out

    def __repr__(self) -> str:
        return f"ProtocolError({str(self.code)!r}, {self.message!r})"


class FailedReason(StrEnum):
    """The agloop RESULT block's "Failed Reason" values."""

    DEPENDENCY_MISSING = "DEPENDENCY_MISSING"
    DESIGN_INCOMPATIBLE = "DESIGN_INCOMPATIBLE"
    TEST_REGRESSION = "TEST_REGRESSION"
    AMBIGUOUS_REQUIREMENT = "AMBIGUOUS_REQUIREMENT"
    TOOL_FAILURE = "TOOL_FAILURE"
    CONTEXT_INSUFFICIENT = "CONTEXT_INSUFFICIENT"
    VERIFICATION_FAILED = "VERIFICATION_FAILED"
    MAX_RETRIES_EXCEEDED = "MAX_RETRIES_EXCEEDED"


class CoordinatorAction(StrEnum):
    ADVANCE = "advance"                      # COMPLETE: advance to next phase/task
    CONTINUE_WITH_PARTIAL = "continue_with_partial"
    RETRY_WITH_MORE_CONTEXT = "retry_with_more_context"
    FRESH_EXECUTOR = "fresh_executor"        # new context window with the failure report
    MARK_FAILED = "mark_failed"
    RETURN_TO_PLAN = "return_to_plan"
    RETRY_ONCE = "retry_once"
    ESCALATE = "escalate"                    # log, interpret, escalate to a human if critical
    FIX_REGRESSION = "fix_regression"


@dataclass(frozen=True, slots=True)
class RecoveryRule:
    action: CoordinatorAction
    max_retries: int
    description: str
    retry: bool = field(default=False)


# The agloop delegation protocol's "Coordinator Response to RESULT Status", FAILED rows.
COORDINATOR_TABLE: dict[FailedReason, RecoveryRule] = {
    FailedReason.CONTEXT_INSUFFICIENT: RecoveryRule(
        CoordinatorAction.RETRY_WITH_MORE_CONTEXT, 2, "Retry with more context (max 2 retries)", True),
    FailedReason.VERIFICATION_FAILED: RecoveryRule(
        CoordinatorAction.FRESH_EXECUTOR, 2,
        "Launch fresh executor with failure report (new context window)", True),
    FailedReason.MAX_RETRIES_EXCEEDED: RecoveryRule(
        CoordinatorAction.MARK_FAILED, 0, "Mark task as failed, log, move to next independent task"),
    FailedReason.DEPENDENCY_MISSING: RecoveryRule(
        CoordinatorAction.RETURN_TO_PLAN, 0,
        "Check if dependency task exists; if not, return to plan"),
    FailedReason.TOOL_FAILURE: RecoveryRule(
        CoordinatorAction.RETRY_ONCE, 1, "Retry once; if still fails, mark failed", True),
    FailedReason.AMBIGUOUS_REQUIREMENT: RecoveryRule(
        CoordinatorAction.ESCALATE, 0,
        "Log ambiguity, attempt interpretation, escalate to user if critical"),
    FailedReason.DESIGN_INCOMPATIBLE: RecoveryRule(
        CoordinatorAction.RETURN_TO_PLAN, 0, "Return to plan phase for redesign"),
    FailedReason.TEST_REGRESSION: RecoveryRule(
        CoordinatorAction.FIX_REGRESSION, 1,
        "Delegate to executor to fix regression, then re-verify", True),
}

# The hand-off protocol's error codes map onto agloop failed reasons when a result carries only a code.
REASON_FOR_CODE: dict[str, FailedReason] = {
    ErrorCode.INSUFFICIENT_CONTEXT: FailedReason.CONTEXT_INSUFFICIENT,
    ErrorCode.TOOL_FAILURE: FailedReason.TOOL_FAILURE,
    ErrorCode.CONSTRAINT_VIOLATION: FailedReason.DESIGN_INCOMPATIBLE,
    ErrorCode.INVALID_RESULT: FailedReason.VERIFICATION_FAILED,
}


def recovery_for(reason: FailedReason | str | None) -> RecoveryRule:
    """The coordinator's action for a FAILED result; unknown reasons are marked failed."""
    try:
        return COORDINATOR_TABLE[FailedReason(reason)]  # type: ignore[arg-type]
    except (ValueError, KeyError):
        return RecoveryRule(CoordinatorAction.MARK_FAILED, 0, "No recovery rule: mark failed")
