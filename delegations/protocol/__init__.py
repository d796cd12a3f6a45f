"""The hand-off protocol: Django-free, typed, validated (see README.md beside this file).

    from delegations.protocol import HandoffPacket, SkillManifest, ResponsePackage, parse_result, lint_packet
"""

from .approvals import (
    ApprovalDecision,
    ApprovalGate,
    ApprovalKind,
    ApprovalRequest,
    AutoGate,
    Decision,
    RunParked,
)
from .budgets import Budget, Usage, narrow, remaining
from .capabilities import (
    APPROVAL_REQUIRED_CAPABILITIES,
    CAPABILITY_DESCRIPTIONS,
    KNOWN_CAPABILITIES,
    issue_token,
    verify_token,
)
from .criteria import CriteriaReport, Criterion, evaluate_criteria, parse_criterion
from .edits import apply_edits, parse_edits
from .errors import COORDINATOR_TABLE, ErrorCode, FailedReason, Issue, ProtocolError, recovery_for
from .events import EventSink, EventType, MemorySink
from .lifecycle import A2A_STATE, TERMINAL_STATES, RunState, check_transition
from .lint import Finding, Severity, lint_packet, review_depth
from .manifest import SkillBundle, SkillManifest, load_bundle, load_manifest
from .packet import HandoffPacket, parse_packet
from .results import ResponsePackage, ResultStatus, parse_result
from .schemas import normalize_schema, validate_instance
from .tool_schemas import DELEGATE_TASK_TOOL, REQUEST_CAPABILITY_TOOL, YIELD_CONTROL_TOOL

__all__ = [
    "A2A_STATE", "APPROVAL_REQUIRED_CAPABILITIES", "CAPABILITY_DESCRIPTIONS", "COORDINATOR_TABLE",
    "DELEGATE_TASK_TOOL", "KNOWN_CAPABILITIES", "REQUEST_CAPABILITY_TOOL", "TERMINAL_STATES",
    "YIELD_CONTROL_TOOL", "ApprovalDecision", "ApprovalGate", "ApprovalKind", "ApprovalRequest",
    "AutoGate", "Budget", "CriteriaReport", "Criterion", "Decision", "ErrorCode", "EventSink",
    "EventType", "FailedReason", "Finding", "HandoffPacket", "Issue", "MemorySink", "ProtocolError",
    "ResponsePackage", "ResultStatus", "RunParked", "RunState", "Severity", "SkillBundle",
    "SkillManifest", "Usage", "apply_edits", "check_transition", "evaluate_criteria", "issue_token",
    "lint_packet", "load_bundle", "load_manifest", "narrow", "normalize_schema", "parse_criterion",
    "parse_edits", "parse_packet", "parse_result", "recovery_for", "remaining", "review_depth",
    "validate_instance", "verify_token",
]
