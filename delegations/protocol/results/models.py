"""The canonical result: :class:`ResponsePackage`, and each dialect's words for a status."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..errors import FailedReason


class ResultStatus(StrEnum):
    SUCCESS = "SUCCESS"
    PARTIAL_COMPLETION = "PARTIAL_COMPLETION"
    FAILURE = "FAILURE"
    BLOCKED_AWAITING_CLARIFICATION = "BLOCKED_AWAITING_CLARIFICATION"


class ResultDialect(StrEnum):
    YIELD_CONTROL = "yield_control"
    RESULT_BLOCK = "result_block"
    ENVELOPE = "envelope"
    ANNOUNCE = "announce"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorReport(_Model):
    code: str
    message: str = ""
    failed_reason: FailedReason | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class Evidence(_Model):
    source: str = ""
    artifact_id: str | None = None


class Handoff(_Model):
    recommended_role: str
    reason: str = ""


class Followup(_Model):
    agent: str
    reason: str = ""


class CriterionConfirmation(_Model):
    criterion: str
    met: bool
    evidence: str = ""


class ResponsePackage(_Model):
    """The canonical result; ``metrics`` holds an OpenClaw announce's runtime/usage figures."""

    status: ResultStatus
    output_payload: dict[str, Any] = Field(default_factory=dict)
    summary: str | None = None
    log_summary: str | None = None
    error_report: ErrorReport | None = None
    evidence: list[Evidence] = Field(default_factory=list)
    open_questions: list[str] = Field(default_factory=list)
    artifacts: list[Any] = Field(default_factory=list)
    handoff: Handoff | None = None
    files_modified: list[str] = Field(default_factory=list)
    files_deleted: list[str] = Field(default_factory=list)
    key_decisions: list[str] = Field(default_factory=list)
    deliverables: list[str] = Field(default_factory=list)
    needs_followup: list[Followup] = Field(default_factory=list)
    blockers: list[str] = Field(default_factory=list)
    acceptance_criteria_confirmation: list[CriterionConfirmation] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    metrics: dict[str, Any] = Field(default_factory=dict)
    dialect: ResultDialect = ResultDialect.YIELD_CONTROL

    @property
    def failed_reason(self) -> FailedReason | None:
        return self.error_report.failed_reason if self.error_report else None

    @property
    def ok(self) -> bool:
        return self.status in (ResultStatus.SUCCESS, ResultStatus.PARTIAL_COMPLETION)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


CANONICAL_FIELDS = frozenset(ResponsePackage.model_fields)

# Each dialect's status words: yield_control, the RESULT block, the result envelope, announce.
YIELD_STATUSES = {status.value: status for status in ResultStatus}
BLOCK_STATUSES = {"COMPLETE": ResultStatus.SUCCESS, "COMPLETED": ResultStatus.SUCCESS,
                  "PARTIAL": ResultStatus.PARTIAL_COMPLETION, "FAILED": ResultStatus.FAILURE}
ENVELOPE_STATUSES = {"completed": ResultStatus.SUCCESS,
                     "needs_input": ResultStatus.BLOCKED_AWAITING_CLARIFICATION,
                     "blocked": ResultStatus.BLOCKED_AWAITING_CLARIFICATION,
                     "failed": ResultStatus.FAILURE}
ANNOUNCE_STATUSES = {"success": ResultStatus.SUCCESS, "error": ResultStatus.FAILURE,
                     "timeout": ResultStatus.FAILURE}
