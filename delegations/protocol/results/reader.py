"""Reading a result's fields, whatever the dialect: typed, with every problem collected.

:class:`FieldReader` reads one field at a time (text, lists, evidence, hand-off,
follow-ups, confirmations, error report, failed reason) and records a problem instead of
raising, so a result with three bad fields reports all three; :func:`finish` turns what
was read into a :class:`ResponsePackage` or raises ``ERR_INVALID_RESULT`` listing them.
"""

from __future__ import annotations

from typing import Any

from ..errors import ErrorCode, FailedReason, Issue, ProtocolError
from .models import (
    CriterionConfirmation,
    ErrorReport,
    Evidence,
    Followup,
    Handoff,
    ResponsePackage,
    ResultDialect,
    ResultStatus,
)

_CODE_FOR_REASON = {FailedReason.CONTEXT_INSUFFICIENT: str(ErrorCode.INSUFFICIENT_CONTEXT),
                    FailedReason.TOOL_FAILURE: str(ErrorCode.TOOL_FAILURE)}
# What a list field or a bullet says when it means "nothing".
NONE_WORDS = frozenset({"", "none", "n/a", "na", "-", "—", "–", "[]", "null", "nil", "nothing",
                        '"none"', "'none'", "(none)", "no", "n.a."})
_REASONS = ", ".join(reason.value for reason in FailedReason)

# Spelling variants the JSON dialects use for canonical fields.
_ALIASES: dict[str, tuple[str, ...]] = {
    "output_payload": ("output_payload", "outputPayload"),
    "summary": ("summary",),
    "log_summary": ("log_summary", "logSummary"),
    "error_report": ("error_report", "errorReport"),
    "evidence": ("evidence",),
    "open_questions": ("open_questions", "openQuestions"),
    "artifacts": ("artifacts",),
    "handoff": ("handoff",),
    "files_modified": ("files_modified", "filesModified"),
    "files_deleted": ("files_deleted", "filesDeleted"),
    "key_decisions": ("key_decisions", "keyDecisions"),
    "deliverables": ("deliverables",),
    "needs_followup": ("needs_followup", "needsFollowup", "needs_follow_up"),
    "blockers": ("blockers",),
    "acceptance_criteria_confirmation": ("acceptance_criteria_confirmation",
                                         "acceptanceCriteriaConfirmation"),
    "warnings": ("warnings",),
    "metrics": ("metrics",),
}


def invalid_result(message: str, issues: list[Issue] | None = None) -> ProtocolError:
    """The one error parse_result raises; without ``issues``, the message names the field."""
    return ProtocolError(ErrorCode.INVALID_RESULT, message,
                         issues=issues if issues is not None else [Issue(message.split(":")[0], message)])


def kind_of(value: object) -> str:
    """What a JSON value is, as an issue message says it ("a list", "null")."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


class FieldReader:
    """Collects every problem of one result so they are reported together."""

    def __init__(self) -> None:
        self.issues: list[Issue] = []
        self.warnings: list[str] = []

    def fail(self, field: str, message: str) -> None:
        self.issues.append(Issue(field, message))

    def text(self, value: object, field: str) -> str | None:
        if value is None:
            return None
        if isinstance(value, str):
            return value
        self.fail(field, f"expected a string; got {kind_of(value)}")
        return None

    def text_list(self, value: object, field: str) -> list[str]:
        if value is None:
            return []
        if isinstance(value, str):
            return [] if value.strip().lower() in NONE_WORDS else [value]
        if not isinstance(value, list):
            self.fail(field, f"expected a list of strings; got {kind_of(value)}")
            return []
        out: list[str] = []
        for index, item in enumerate(value):
            if isinstance(item, str):
                out.append(item)
            elif isinstance(item, int | float) and not isinstance(item, bool):
                out.append(str(item))
            else:
                self.fail(f"{field}[{index}]", f"expected a string; got {kind_of(item)}")
        return out

    def evidence(self, value: object, field: str) -> list[Evidence]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(field, f"expected a list of {{source, artifactId}} objects; got {kind_of(value)}")
            return []
        out: list[Evidence] = []
        for index, item in enumerate(value):
            where = f"{field}[{index}]"
            if isinstance(item, str) and item.strip():
                out.append(Evidence(source=item))
                continue
            if not isinstance(item, dict):
                self.fail(where, f"expected an object with a source or an artifactId; got {kind_of(item)}")
                continue
            source = self.text(item.get("source", item.get("url")), f"{where}.source") or ""
            artifact = item.get("artifact_id", item.get("artifactId",
                                item.get("tool_call_id", item.get("toolCallId"))))
            artifact_id = self.text(artifact, f"{where}.artifactId")
            if not source.strip() and not (artifact_id and artifact_id.strip()):
                self.fail(where, "evidence needs a source or a tool call/artifact id (as delegation contracts ask)")
                continue
            out.append(Evidence(source=source, artifact_id=artifact_id))
        return out

    def handoff(self, value: object, field: str) -> Handoff | None:
        if value is None:
            return None
        if isinstance(value, str):
            return Handoff(recommended_role=value) if value.strip() else None
        if not isinstance(value, dict):
            self.fail(field, f"expected an object {{recommendedRole, reason}}; got {kind_of(value)}")
            return None
        role = value.get("recommended_role", value.get("recommendedRole", value.get("role")))
        if not isinstance(role, str) or not role.strip():
            self.fail(f"{field}.recommendedRole", f"expected the role to hand off to; got {kind_of(role)}")
            return None
        reason = self.text(value.get("reason"), f"{field}.reason") or ""
        return Handoff(recommended_role=role, reason=reason)

    def followups(self, value: object, field: str) -> list[Followup]:
        if value is None:
            return []
        items = [value] if isinstance(value, str | dict) else value
        if not isinstance(items, list):
            self.fail(field, f"expected a list of 'agent: reason' entries; got {kind_of(value)}")
            return []
        out: list[Followup] = []
        for index, item in enumerate(items):
            if isinstance(item, str):
                followup = followup_from_text(item)
                if followup is not None:
                    out.append(followup)
            elif isinstance(item, dict):
                agent = item.get("agent", item.get("agent_name", item.get("role")))
                if not isinstance(agent, str) or not agent.strip():
                    self.fail(f"{field}[{index}].agent", "expected the agent's name")
                    continue
                out.append(Followup(agent=agent, reason=self.text(item.get("reason"), f"{field}[{index}].reason") or ""))
            else:
                self.fail(f"{field}[{index}]", f"expected 'agent: reason'; got {kind_of(item)}")
        return out

    def confirmations(self, value: object, field: str) -> list[CriterionConfirmation]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(field, f"expected a list of {{criterion, met, evidence}}; got {kind_of(value)}")
            return []
        out: list[CriterionConfirmation] = []
        for index, item in enumerate(value):
            where = f"{field}[{index}]"
            if not isinstance(item, dict):
                self.fail(where, f"expected {{criterion, met, evidence}}; got {kind_of(item)}")
                continue
            criterion, met = item.get("criterion"), item.get("met")
            if not isinstance(criterion, str):
                self.fail(f"{where}.criterion", f"expected the criterion's text; got {kind_of(criterion)}")
                continue
            if not isinstance(met, bool):
                self.fail(f"{where}.met", f"expected true or false; got {kind_of(met)}")
                continue
            evidence = item.get("evidence")
            if isinstance(evidence, list):
                evidence = "; ".join(str(part) for part in evidence)
            out.append(CriterionConfirmation(criterion=criterion, met=met,
                                             evidence=self.text(evidence, f"{where}.evidence") or ""))
        return out

    def obj(self, value: object, field: str) -> dict[str, Any]:
        if value is None:
            return {}
        if isinstance(value, dict):
            return value
        self.fail(field, f"expected a JSON object; got {kind_of(value)}")
        return {}

    def items(self, value: object, field: str) -> list[Any]:
        if value is None:
            return []
        if isinstance(value, list):
            return value
        self.fail(field, f"expected a list; got {kind_of(value)}")
        return []

    def error_report(self, value: object, field: str) -> ErrorReport | None:
        if value is None:
            return None
        if isinstance(value, str):
            return ErrorReport(code="ERR_UNSPECIFIED", message=value) if value.strip() else None
        if not isinstance(value, dict):
            self.fail(field, f"expected an object {{code, message, failed_reason}}; got {kind_of(value)}")
            return None
        code = value.get("code", value.get("error_code", value.get("errorCode")))
        reason = self.failed_reason(value.get("failed_reason", value.get("failedReason")),
                                    f"{field}.failed_reason")
        if code is None:
            code = code_for_reason(reason)
        elif not isinstance(code, str) or not code.strip():
            self.fail(f"{field}.code", f"expected an error code string such as ERR_TOOL_FAILURE; got {kind_of(code)}")
            return None
        message = self.text(value.get("message", value.get("detail")), f"{field}.message") or ""
        details = {key: item for key, item in value.items() if key not in (
            "code", "error_code", "errorCode", "failed_reason", "failedReason", "message", "detail")}
        if isinstance(value.get("details"), dict) and len(details) == 1:
            details = value["details"]
        return ErrorReport(code=code, message=message, failed_reason=reason, details=details)

    def failed_reason(self, value: object, field: str) -> FailedReason | None:
        if value is None:
            return None
        if isinstance(value, str):
            token = value.strip().strip("`*[]\"'").strip().upper().replace(" ", "_")
            if token.lower() in NONE_WORDS:
                return None
            if token in FailedReason._value2member_map_:
                return FailedReason(token)
        self.fail(field, f"expected one of {_REASONS}; got {value!r}"[:300])
        return None


def code_for_reason(reason: FailedReason | None) -> str:
    if reason is None:
        return "ERR_UNSPECIFIED"
    return _CODE_FOR_REASON.get(reason, f"ERR_{reason.value}")


def followup_from_text(text: str) -> Followup | None:
    cleaned = text.strip().strip("[]").strip()
    if cleaned.lower() in NONE_WORDS:
        return None
    agent, sep, reason = cleaned.partition(":")
    if not sep:
        return Followup(agent=cleaned)
    return Followup(agent=agent.strip().strip("*`").strip(), reason=reason.strip())


def pick(data: dict[str, Any], name: str) -> object:
    """A canonical field's value under any of its spellings; None when it is absent."""
    for key in _ALIASES[name]:
        if key in data:
            return data[key]
    return None


def has_common_fields(data: dict[str, Any]) -> bool:
    """Whether ``data`` carries any canonical field, in any spelling."""
    return any(key in data for names in _ALIASES.values() for key in names)


def common_fields(data: dict[str, Any], reader: FieldReader) -> dict[str, Any]:
    """The canonical fields every JSON dialect may carry, type-checked."""
    fields: dict[str, Any] = {
        "summary": reader.text(pick(data, "summary"), "summary"),
        "log_summary": reader.text(pick(data, "log_summary"), "log_summary"),
        "evidence": reader.evidence(pick(data, "evidence"), "evidence"),
        "open_questions": reader.text_list(pick(data, "open_questions"), "open_questions"),
        "artifacts": reader.items(pick(data, "artifacts"), "artifacts"),
        "handoff": reader.handoff(pick(data, "handoff"), "handoff"),
        "files_modified": reader.text_list(pick(data, "files_modified"), "files_modified"),
        "files_deleted": reader.text_list(pick(data, "files_deleted"), "files_deleted"),
        "key_decisions": reader.text_list(pick(data, "key_decisions"), "key_decisions"),
        "deliverables": reader.text_list(pick(data, "deliverables"), "deliverables"),
        "needs_followup": reader.followups(pick(data, "needs_followup"), "needs_followup"),
        "blockers": reader.text_list(pick(data, "blockers"), "blockers"),
        "acceptance_criteria_confirmation": reader.confirmations(
            pick(data, "acceptance_criteria_confirmation"), "acceptance_criteria_confirmation"),
        "warnings": reader.text_list(pick(data, "warnings"), "warnings"),
        "metrics": reader.obj(pick(data, "metrics"), "metrics"),
    }
    return fields


def role_output(data: dict[str, Any]) -> dict[str, Any] | None:
    """The agloop roles' ``executor_output`` / ``research_output`` ... object, when there is one."""
    for key, value in data.items():
        if isinstance(key, str) and key.endswith("_output") and isinstance(value, dict):
            return value
    return None


def finish(status: ResultStatus, dialect: ResultDialect, fields: dict[str, Any], reader: FieldReader,
           output_payload: dict[str, Any], error_report: ErrorReport | None) -> ResponsePackage:
    """The package from what was read, or ERR_INVALID_RESULT listing every problem found.

    A FAILURE without an error report gets one made from its blockers or summary; the
    first needs-followup entry becomes the hand-off when none is given.
    """
    if reader.issues:
        first = reader.issues[0]
        extra = f" (and {len(reader.issues) - 1} more problem(s))" if len(reader.issues) > 1 else ""
        raise invalid_result(f"{first.field}: {first.message}{extra}", reader.issues)
    if status is ResultStatus.FAILURE and error_report is None:
        reasons = "; ".join(fields.get("blockers") or []) or fields.get("summary") or "no details given"
        error_report = ErrorReport(code="ERR_UNSPECIFIED", message=reasons)
        reader.warnings.append("FAILURE without an error_report: one was made from the result's text")
    if fields.get("handoff") is None and fields.get("needs_followup"):
        first_followup = fields["needs_followup"][0]
        fields["handoff"] = Handoff(recommended_role=first_followup.agent, reason=first_followup.reason)
    warnings = list(fields.pop("warnings", None) or []) + reader.warnings
    return ResponsePackage(status=status, dialect=dialect, output_payload=output_payload,
                           error_report=error_report, warnings=warnings, **fields)

