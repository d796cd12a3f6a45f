"""How a run ended, as the runner returns it (and reads it back from a checkpoint)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..approvals import ApprovalRequest
from ..budgets import Usage
from ..checkpoints import Checkpoint
from ..lifecycle import RunState
from ..lint import Finding, Severity
from ..results import ResponsePackage


@dataclass(slots=True)
class RunOutcome:
    """How a run ended (or where it stopped: AWAITING_APPROVAL with ``parked`` set)."""

    run_id: str
    state: RunState
    result: ResponsePackage | None = None
    usage: Usage = field(default_factory=Usage)
    criteria_report: dict[str, Any] | None = None
    findings: list[Finding] = field(default_factory=list)
    error: dict[str, Any] | None = None
    parked: ApprovalRequest | None = None
    announce: dict[str, Any] | None = None
    session_key: str = ""
    label: str = ""
    children: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.state is RunState.COMPLETE

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "state": self.state.value,
                "result": self.result.to_dict() if self.result is not None else None,
                "usage": self.usage.as_dict(), "criteria_report": self.criteria_report,
                "findings": [finding.as_dict() for finding in self.findings],
                "error": self.error, "announce": self.announce,
                "parked": request_dict(self.parked) if self.parked is not None else None,
                "session_key": self.session_key, "label": self.label, "children": self.children}


def request_dict(request: ApprovalRequest) -> dict[str, Any]:
    return {"key": request.key, "run_id": request.run_id, "kind": request.kind.value,
            "title": request.title, "payload": request.payload, "risk": request.risk}


def outcome_from(checkpoint: Checkpoint) -> RunOutcome:
    """The outcome a finished run's checkpoint records."""
    data = checkpoint.outcome or {}
    result = data.get("result")
    findings = [Finding(item["code"], Severity(item["severity"]), item["field"], item["message"])
                for item in data.get("findings") or []]
    return RunOutcome(
        run_id=checkpoint.run_id, state=RunState(data.get("state", checkpoint.state)),
        result=ResponsePackage.model_validate(result) if result else None,
        usage=Usage.from_dict(data.get("usage") or checkpoint.usage),
        criteria_report=data.get("criteria_report"), findings=findings, error=data.get("error"),
        announce=data.get("announce"), session_key=checkpoint.session_key, label=checkpoint.label,
        children=list(checkpoint.children.values()))
