"""Results: one canonical :class:`ResponsePackage` read from every dialect the seeds use.

Dialects (DESIGN §2.4), recorded in ``ResponsePackage.dialect``:

``yield_control`` (seed 000)
    The ``yield_control`` tool's arguments, as a dict, as JSON text, wrapped in a tool
    call (``{"name": "yield_control", "arguments": {...} | "<json>"}``, OpenAI's
    ``{"function": {...}}``, Anthropic's ``{"type": "tool_use", "input": {...}}``), or a
    JSON object inside prose or a ```json fence. Statuses SUCCESS, PARTIAL_COMPLETION,
    FAILURE, BLOCKED_AWAITING_CLARIFICATION (any case). ``output_payload`` must be an
    object; it is required for SUCCESS and PARTIAL_COMPLETION (seed 000 marks it
    required) and defaults to ``{}`` otherwise. Every canonical field is accepted too, in
    snake_case or camelCase, including seed 001's executor_output fields
    (files_modified, files_deleted, acceptance_criteria_confirmation, summary, warnings).
``result_block`` (seed 001)
    A ``## RESULT`` markdown block, possibly after prose (the last marker wins). Bullets
    ``**Status**`` (COMPLETE->SUCCESS, PARTIAL->PARTIAL_COMPLETION, FAILED->FAILURE),
    ``**Failed Reason**`` (a FailedReason), ``**Files Modified**``/``**Files Deleted**``
    (``[a, b]``, ``"none"``, ``a, b`` or sub-bullets), ``**Key Decisions**``,
    ``**Deliverables**``, ``**Blockers**``, ``**Warnings**``, ``**Open Questions**``
    (inline text, ``[a; b]`` or sub-bullets), ``**Needs Followup**`` (``agent: reason``;
    the first becomes ``handoff``), ``**Summary**``; other bullets go to output_payload
    under their snake_case name. A ```json fence in the prose holding an
    ``executor_output`` (or any ``*_output``) object supplies output_payload and its
    fields (acceptance_criteria_confirmation, summary, warnings...). Without a Summary
    bullet the prose before the block is the summary. JSON objects whose status is
    COMPLETE/PARTIAL/FAILED are read with the same mapping and the same dialect name.
``envelope`` (seed 003)
    ``status`` completed->SUCCESS, needs_input/blocked->BLOCKED_AWAITING_CLARIFICATION,
    failed->FAILURE; ``summary`` (required string), ``evidence`` [{source, artifactId}]
    (each item needs a source or an artifact/tool call id), ``openQuestions``,
    ``artifacts``, ``handoff`` {recommendedRole, reason}. A completed envelope without
    evidence is accepted with a warning (success criteria decide whether that is enough).
``announce`` (seed 004)
    ``status`` success->SUCCESS, error->FAILURE, timeout->FAILURE with error_report.code
    ERR_TIMEOUT; ``unknown`` (and anything else) is invalid. ``result``/``summary`` is the
    summary (an object result becomes output_payload), ``error`` the error details,
    ``notes`` the log summary, runtime and token usage go to ``metrics``. Also read when
    wrapped as ``{"announce": {...}}``.

A canonical dict (``ResponsePackage.model_dump()``, which carries ``dialect``) is read
back unchanged, so results round-trip through JSON.

FAILURE always carries an ``error_report``: when a dialect gives none, one is made from
what it does give (failed reason, blockers, error text) and a warning says so. Codes
without a better source are derived from the failed reason (CONTEXT_INSUFFICIENT ->
ERR_INSUFFICIENT_CONTEXT, TOOL_FAILURE -> ERR_TOOL_FAILURE, otherwise ``ERR_<REASON>``)
or ``ERR_UNSPECIFIED``.

:func:`parse_result` raises only ``ProtocolError(ERR_INVALID_RESULT)`` whatever it is
given, with a message naming the field and what was expected.
"""

from __future__ import annotations

import json
import math
import re
from enum import StrEnum
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import ErrorCode, FailedReason, Issue, ProtocolError


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
    """The canonical result (DESIGN §2.4); ``metrics`` holds seed 004's runtime/usage figures."""

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
MAX_RESULT_CHARS = 1_000_000
_MAX_JSON_CANDIDATES = 64

_YIELD_STATUSES = {status.value: status for status in ResultStatus}
_BLOCK_STATUSES = {"COMPLETE": ResultStatus.SUCCESS, "COMPLETED": ResultStatus.SUCCESS,
                   "PARTIAL": ResultStatus.PARTIAL_COMPLETION, "FAILED": ResultStatus.FAILURE}
_ENVELOPE_STATUSES = {"completed": ResultStatus.SUCCESS,
                      "needs_input": ResultStatus.BLOCKED_AWAITING_CLARIFICATION,
                      "blocked": ResultStatus.BLOCKED_AWAITING_CLARIFICATION,
                      "failed": ResultStatus.FAILURE}
_ANNOUNCE_STATUSES = {"success": ResultStatus.SUCCESS, "error": ResultStatus.FAILURE,
                      "timeout": ResultStatus.FAILURE}
_STATUS_HELP = ("expected SUCCESS, PARTIAL_COMPLETION, FAILURE or BLOCKED_AWAITING_CLARIFICATION "
                "(yield_control), COMPLETE, PARTIAL or FAILED (RESULT block), completed, "
                "needs_input, blocked or failed (envelope), or success, error or timeout (announce)")
_CODE_FOR_REASON = {FailedReason.CONTEXT_INSUFFICIENT: str(ErrorCode.INSUFFICIENT_CONTEXT),
                    FailedReason.TOOL_FAILURE: str(ErrorCode.TOOL_FAILURE)}
_NONE_WORDS = frozenset({"", "none", "n/a", "na", "-", "—", "–", "[]", "null", "nil", "nothing",
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


def _invalid(message: str, issues: list[Issue] | None = None) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_RESULT, message,
                         issues=issues if issues is not None else [Issue(message.split(":")[0], message)])


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


class _Reader:
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
        self.fail(field, f"expected a string; got {_kind(value)}")
        return None

    def text_list(self, value: object, field: str) -> list[str]:
        if value is None:
            return []
        if isinstance(value, str):
            return [] if value.strip().lower() in _NONE_WORDS else [value]
        if not isinstance(value, list):
            self.fail(field, f"expected a list of strings; got {_kind(value)}")
            return []
        out: list[str] = []
        for index, item in enumerate(value):
            if isinstance(item, str):
                out.append(item)
            elif isinstance(item, int | float) and not isinstance(item, bool):
                out.append(str(item))
            else:
                self.fail(f"{field}[{index}]", f"expected a string; got {_kind(item)}")
        return out

    def evidence(self, value: object, field: str) -> list[Evidence]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(field, f"expected a list of {{source, artifactId}} objects; got {_kind(value)}")
            return []
        out: list[Evidence] = []
        for index, item in enumerate(value):
            where = f"{field}[{index}]"
            if isinstance(item, str) and item.strip():
                out.append(Evidence(source=item))
                continue
            if not isinstance(item, dict):
                self.fail(where, f"expected an object with a source or an artifactId; got {_kind(item)}")
                continue
            source = self.text(item.get("source", item.get("url")), f"{where}.source") or ""
            artifact = item.get("artifact_id", item.get("artifactId",
                                item.get("tool_call_id", item.get("toolCallId"))))
            artifact_id = self.text(artifact, f"{where}.artifactId")
            if not source.strip() and not (artifact_id and artifact_id.strip()):
                self.fail(where, "evidence needs a source or a tool call/artifact id (seed 003)")
                continue
            out.append(Evidence(source=source, artifact_id=artifact_id))
        return out

    def handoff(self, value: object, field: str) -> Handoff | None:
        if value is None:
            return None
        if isinstance(value, str):
            return Handoff(recommended_role=value) if value.strip() else None
        if not isinstance(value, dict):
            self.fail(field, f"expected an object {{recommendedRole, reason}}; got {_kind(value)}")
            return None
        role = value.get("recommended_role", value.get("recommendedRole", value.get("role")))
        if not isinstance(role, str) or not role.strip():
            self.fail(f"{field}.recommendedRole", f"expected the role to hand off to; got {_kind(role)}")
            return None
        reason = self.text(value.get("reason"), f"{field}.reason") or ""
        return Handoff(recommended_role=role, reason=reason)

    def followups(self, value: object, field: str) -> list[Followup]:
        if value is None:
            return []
        items = [value] if isinstance(value, str | dict) else value
        if not isinstance(items, list):
            self.fail(field, f"expected a list of 'agent: reason' entries; got {_kind(value)}")
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
                self.fail(f"{field}[{index}]", f"expected 'agent: reason'; got {_kind(item)}")
        return out

    def confirmations(self, value: object, field: str) -> list[CriterionConfirmation]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(field, f"expected a list of {{criterion, met, evidence}}; got {_kind(value)}")
            return []
        out: list[CriterionConfirmation] = []
        for index, item in enumerate(value):
            where = f"{field}[{index}]"
            if not isinstance(item, dict):
                self.fail(where, f"expected {{criterion, met, evidence}}; got {_kind(item)}")
                continue
            criterion, met = item.get("criterion"), item.get("met")
            if not isinstance(criterion, str):
                self.fail(f"{where}.criterion", f"expected the criterion's text; got {_kind(criterion)}")
                continue
            if not isinstance(met, bool):
                self.fail(f"{where}.met", f"expected true or false; got {_kind(met)}")
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
        self.fail(field, f"expected a JSON object; got {_kind(value)}")
        return {}

    def items(self, value: object, field: str) -> list[Any]:
        if value is None:
            return []
        if isinstance(value, list):
            return value
        self.fail(field, f"expected a list; got {_kind(value)}")
        return []

    def error_report(self, value: object, field: str) -> ErrorReport | None:
        if value is None:
            return None
        if isinstance(value, str):
            return ErrorReport(code="ERR_UNSPECIFIED", message=value) if value.strip() else None
        if not isinstance(value, dict):
            self.fail(field, f"expected an object {{code, message, failed_reason}}; got {_kind(value)}")
            return None
        code = value.get("code", value.get("error_code", value.get("errorCode")))
        reason = self.failed_reason(value.get("failed_reason", value.get("failedReason")),
                                    f"{field}.failed_reason")
        if code is None:
            code = code_for_reason(reason)
        elif not isinstance(code, str) or not code.strip():
            self.fail(f"{field}.code", f"expected an error code string such as ERR_TOOL_FAILURE; got {_kind(code)}")
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
            if token.lower() in _NONE_WORDS:
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
    if cleaned.lower() in _NONE_WORDS:
        return None
    agent, sep, reason = cleaned.partition(":")
    if not sep:
        return Followup(agent=cleaned)
    return Followup(agent=agent.strip().strip("*`").strip(), reason=reason.strip())


def _pick(data: dict[str, Any], name: str) -> object:
    for key in _ALIASES[name]:
        if key in data:
            return data[key]
    return None


def _common(data: dict[str, Any], reader: _Reader) -> dict[str, Any]:
    """The canonical fields every JSON dialect may carry, type-checked."""
    fields: dict[str, Any] = {
        "summary": reader.text(_pick(data, "summary"), "summary"),
        "log_summary": reader.text(_pick(data, "log_summary"), "log_summary"),
        "evidence": reader.evidence(_pick(data, "evidence"), "evidence"),
        "open_questions": reader.text_list(_pick(data, "open_questions"), "open_questions"),
        "artifacts": reader.items(_pick(data, "artifacts"), "artifacts"),
        "handoff": reader.handoff(_pick(data, "handoff"), "handoff"),
        "files_modified": reader.text_list(_pick(data, "files_modified"), "files_modified"),
        "files_deleted": reader.text_list(_pick(data, "files_deleted"), "files_deleted"),
        "key_decisions": reader.text_list(_pick(data, "key_decisions"), "key_decisions"),
        "deliverables": reader.text_list(_pick(data, "deliverables"), "deliverables"),
        "needs_followup": reader.followups(_pick(data, "needs_followup"), "needs_followup"),
        "blockers": reader.text_list(_pick(data, "blockers"), "blockers"),
        "acceptance_criteria_confirmation": reader.confirmations(
            _pick(data, "acceptance_criteria_confirmation"), "acceptance_criteria_confirmation"),
        "warnings": reader.text_list(_pick(data, "warnings"), "warnings"),
        "metrics": reader.obj(_pick(data, "metrics"), "metrics"),
    }
    return fields


def _role_output(data: dict[str, Any]) -> dict[str, Any] | None:
    """seed 001's ``executor_output`` / ``research_output`` ... object, when there is one."""
    for key, value in data.items():
        if isinstance(key, str) and key.endswith("_output") and isinstance(value, dict):
            return value
    return None


def _finish(status: ResultStatus, dialect: ResultDialect, fields: dict[str, Any], reader: _Reader,
            output_payload: dict[str, Any], error_report: ErrorReport | None) -> ResponsePackage:
    if reader.issues:
        first = reader.issues[0]
        extra = f" (and {len(reader.issues) - 1} more problem(s))" if len(reader.issues) > 1 else ""
        raise _invalid(f"{first.field}: {first.message}{extra}", reader.issues)
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


# --- JSON dialects ----------------------------------------------------------------------

def _from_yield(data: dict[str, Any], status: ResultStatus) -> ResponsePackage:
    reader = _Reader()
    fields = _common(data, reader)
    raw_payload = _pick(data, "output_payload")
    if raw_payload is None:
        if status in (ResultStatus.SUCCESS, ResultStatus.PARTIAL_COMPLETION):
            reader.fail("output_payload", f"required for {status.value}: the object holding the "
                                          "result's data (seed 000 yield_control)")
        payload: dict[str, Any] = {}
    else:
        payload = reader.obj(raw_payload, "output_payload")
    error_report = reader.error_report(_pick(data, "error_report"), "error_report")
    return _finish(status, ResultDialect.YIELD_CONTROL, fields, reader, payload, error_report)


def _from_block_json(data: dict[str, Any], status: ResultStatus) -> ResponsePackage:
    reader = _Reader()
    role_output = _role_output(data)
    fields = _common(role_output if role_output is not None and not _has_common(data) else data, reader)
    payload = role_output if role_output is not None else reader.obj(_pick(data, "output_payload"),
                                                                     "output_payload")
    reason = reader.failed_reason(data.get("failed_reason", data.get("failedReason")), "failed_reason")
    error_report = reader.error_report(_pick(data, "error_report"), "error_report")
    if error_report is None and (reason is not None or status is ResultStatus.FAILURE):
        message = "; ".join(fields["blockers"]) or (reason.value if reason else "FAILED")
        error_report = ErrorReport(code=code_for_reason(reason), message=message, failed_reason=reason)
    return _finish(status, ResultDialect.RESULT_BLOCK, fields, reader, payload, error_report)


def _has_common(data: dict[str, Any]) -> bool:
    return any(key in data for names in _ALIASES.values() for key in names)


def _from_envelope(data: dict[str, Any], status_text: str) -> ResponsePackage:
    reader = _Reader()
    status = _ENVELOPE_STATUSES[status_text]
    fields = _common(data, reader)
    if not isinstance(data.get("summary"), str):
        reader.fail("summary", "required in a seed 003 envelope: a string saying what was found or done")
    payload = reader.obj(data.get("output_payload", data.get("output", data.get("data"))), "output_payload")
    error_report = reader.error_report(data.get("error", _pick(data, "error_report")), "error")
    if status is ResultStatus.FAILURE and error_report is None and isinstance(data.get("summary"), str):
        error_report = ErrorReport(code="ERR_UNSPECIFIED", message=data["summary"])
    if status_text == "blocked" and not fields["blockers"] and isinstance(data.get("summary"), str):
        fields["blockers"] = [data["summary"]]
    if status is ResultStatus.SUCCESS and not fields["evidence"]:
        reader.warnings.append("completed envelope without evidence (seed 003 asks for a source "
                               "or tool call id behind each conclusion)")
    return _finish(status, ResultDialect.ENVELOPE, fields, reader, payload, error_report)


_METRIC_KEYS = ("runtime", "runtime_s", "runtimeSeconds", "runtime_seconds", "runtime_ms", "runtimeMs", "duration_ms",
                "usage", "tokens", "token_usage", "tokenUsage", "input_tokens", "output_tokens",
                "total_tokens", "cost_usd", "model_calls")


def _from_announce(data: dict[str, Any], status_text: str) -> ResponsePackage:
    reader = _Reader()
    status = _ANNOUNCE_STATUSES[status_text]
    fields = _common(data, reader)
    result = data.get("result")
    payload: dict[str, Any] = reader.obj(_pick(data, "output_payload"), "output_payload")
    if isinstance(result, dict):
        payload = payload or result
    elif result is not None:
        summary = reader.text(result, "result")
        fields["summary"] = fields["summary"] or summary
    notes = data.get("notes")
    if isinstance(notes, list):
        notes = "\n".join(str(note) for note in notes)
    fields["log_summary"] = fields["log_summary"] or reader.text(notes, "notes")
    metrics = dict(fields["metrics"])
    metrics.update({key: data[key] for key in _METRIC_KEYS if key in data})
    fields["metrics"] = metrics
    error = data.get("error", _pick(data, "error_report"))
    error_report = reader.error_report(error, "error")
    if status_text == "timeout":
        message = error_report.message if error_report else "the subagent hit its hard timeout"
        details = error_report.details if error_report else {}
        error_report = ErrorReport(code=str(ErrorCode.TIMEOUT), message=message, details=details)
    elif status is ResultStatus.FAILURE and error_report is None:
        error_report = ErrorReport(code="ERR_UNSPECIFIED",
                                   message=fields["summary"] or "the subagent reported an error")
    return _finish(status, ResultDialect.ANNOUNCE, fields, reader, payload, error_report)


def _from_canonical(data: dict[str, Any]) -> ResponsePackage:
    try:
        return ResponsePackage.model_validate(data)
    except ValidationError as exc:
        issues = [Issue(".".join(str(part) for part in error["loc"]) or "result",
                        str(error["msg"])[:300]) for error in exc.errors()[:20]]
        first = issues[0] if issues else Issue("result", "invalid")
        raise _invalid(f"{first.field}: {first.message}", issues) from None


def _unwrap(data: dict[str, Any], depth: int = 0) -> dict[str, Any]:
    """Tool-call and announce wrappers around the result object."""
    if depth > 4 or "status" in data:
        return data
    inner: object = None
    if isinstance(data.get("function"), dict):
        inner = data["function"].get("arguments")
    elif "arguments" in data:
        inner = data["arguments"]
    elif "input" in data and (data.get("type") == "tool_use" or "name" in data):
        inner = data["input"]
    elif isinstance(data.get("yield_control"), dict | str):
        inner = data["yield_control"]
    elif isinstance(data.get("announce"), dict):
        inner = data["announce"]
    elif isinstance(data.get("result"), dict) and "status" in data["result"]:
        inner = data["result"]
    elif isinstance(data.get("tool_calls"), list) and data["tool_calls"]:
        for call in data["tool_calls"]:
            if isinstance(call, dict):
                found = _unwrap(call, depth + 1)
                if "status" in found:
                    return found
        return data
    if isinstance(inner, str):
        try:
            inner = json.loads(inner, parse_constant=_reject_constant)
        except ValueError:
            raise _invalid("arguments: the tool call's arguments are not valid JSON") from None
    if isinstance(inner, dict):
        return _unwrap(inner, depth + 1)
    return data


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def parse_result_dict(data: dict[str, Any]) -> ResponsePackage:
    data = _unwrap(data)
    dialect = data.get("dialect")
    if isinstance(dialect, str) and dialect in ResultDialect._value2member_map_ and set(data) <= CANONICAL_FIELDS:
        return _from_canonical(data)
    if "status" not in data:
        keys = ", ".join(sorted(str(key) for key in data)[:8]) or "no keys"
        raise _invalid(f"status: missing; the result object has {keys}. A result needs a status: "
                       + _STATUS_HELP)
    raw = data["status"]
    if not isinstance(raw, str):
        raise _invalid(f"status: expected a string; got {_kind(raw)}. " + _STATUS_HELP)
    status_text = raw.strip()
    upper = status_text.upper()
    lower = status_text.lower()
    if status_text in _YIELD_STATUSES:
        return _from_yield(data, _YIELD_STATUSES[status_text])
    if upper in _BLOCK_STATUSES and status_text == upper:
        return _from_block_json(data, _BLOCK_STATUSES[upper])
    if lower in _ENVELOPE_STATUSES:
        return _from_envelope(data, lower)
    if lower == "success" and any(key in data for key in ("output_payload", "outputPayload", "error_report")):
        return _from_yield(data, ResultStatus.SUCCESS)
    if lower in _ANNOUNCE_STATUSES:
        return _from_announce(data, lower)
    if upper in _YIELD_STATUSES:
        return _from_yield(data, _YIELD_STATUSES[upper])
    if upper in _BLOCK_STATUSES:
        return _from_block_json(data, _BLOCK_STATUSES[upper])
    if lower == "unknown":
        raise _invalid("status: 'unknown' (seed 004 announce) means the subagent's outcome is not "
                       "known; it cannot be used as a result. Check the run's log or retry it")
    raise _invalid(f"status: {status_text[:60]!r} is not a result status; " + _STATUS_HELP)


# --- RESULT block (seed 001) --------------------------------------------------------------

_MARKER_LINE = re.compile(r"[ \t]*#{1,6}[ \t]*\**RESULT\**[ \t]*:?[ \t]*", re.IGNORECASE)
_SUB_BULLET = re.compile(r"^(?:[-*+]|\d+[.)])[ \t]+(?P<item>.*)$")
_FENCE = re.compile(r"```(?:json|JSON)?[ \t]*\n(?P<body>.*?)\n[ \t]*```", re.DOTALL)
_STATUS_TOKEN = re.compile(r"[A-Za-z_]+")
_LIST_KEYS = {"files modified": "files_modified", "files deleted": "files_deleted",
              "key decisions": "key_decisions", "deliverables": "deliverables",
              "blockers": "blockers", "warnings": "warnings", "open questions": "open_questions"}
_FILE_KEYS = frozenset({"files_modified", "files_deleted"})


@lru_cache(maxsize=256)
def _key_name(key: str) -> str:
    return " ".join(key.strip().lower().replace("_", " ").split())


def find_result_marker(text: str) -> tuple[int, int] | None:
    """(start, end) of the last "## RESULT" heading line; plain string search keeps it cheap."""
    position = len(text)
    while True:
        position = max(text.rfind("RESULT", 0, position), text.rfind("Result", 0, position))
        if position == -1:
            return None
        start = text.rfind("\n", 0, position) + 1
        end = text.find("\n", position)
        end = len(text) if end == -1 else end
        if _MARKER_LINE.fullmatch(text, start, end):
            return start, end


# "- **Key**: value", "- **Key:** value", "- __Key__: value" or "- Key: value" (one C-level
# match per line: this runs on every RESULT block).
_BULLET_HEAD = re.compile(r"[-*+][ \t]+(?:\*\*|__)([^*_:]+):?(?:\*\*|__)[ \t]*:?[ \t]*(.*)"
                          r"|[-*+][ \t]+([A-Za-z][\w /-]{0,30}):[ \t]*(.*)")


def _block_bullets(block: str) -> list[tuple[str, str, list[str]]]:
    """(key, inline value, sub-items) for each top-level bullet, up to the next heading."""
    bullets: list[tuple[str, str, list[str]]] = []
    head_match = _BULLET_HEAD.match
    for line in block.splitlines():
        if not line or line.isspace():
            continue
        first = line[0]
        if first == " " or first == "\t":
            if bullets:
                _continue_bullet(bullets, line.strip())
            continue
        if first == "#":
            break
        head = head_match(line)
        if head is not None:
            bold_key, bold_value, plain_key, plain_value = head.groups()
            if bold_key is not None:
                bullets.append((_key_name(bold_key), bold_value.rstrip(), []))
            else:
                bullets.append((_key_name(plain_key), plain_value.rstrip(), []))
    return bullets


def _continue_bullet(bullets: list[tuple[str, str, list[str]]], stripped: str) -> None:
    key, value, items = bullets[-1]
    sub = _SUB_BULLET.match(stripped) if stripped[0] in "-*+0123456789" else None
    if sub:
        items.append(sub["item"].strip())
    elif items:
        items[-1] += " " + stripped
    else:
        bullets[-1] = (key, f"{value} {stripped}".strip(), items)


def _clean_item(item: str) -> str:
    return item.strip().strip("`\"'").strip()


def _inline_list(value: str, files: bool) -> list[str]:
    text = value.strip()
    if text.lower() in _NONE_WORDS:
        return []
    if text.startswith("["):
        parsed = None
        if text[1:2] in ('"', "]") or text[1:3] in (' "',):
            try:
                parsed = json.loads(text)
            except (ValueError, RecursionError):
                parsed = None
        if isinstance(parsed, list):
            return [str(item) for item in parsed if str(item).strip()]
        inner = text[1:-1] if text.endswith("]") else text[1:]
        sep = ";" if ";" in inner else ","
        return [cleaned for part in inner.split(sep) if (cleaned := _clean_item(part))]
    if files:
        return [cleaned for part in re.split(r"[,;]", text) if (cleaned := _clean_item(part))]
    if ";" in text:
        return [cleaned for part in text.split(";") if (cleaned := part.strip())]
    return [text]


def _bullet_list(value: str, items: list[str], files: bool) -> list[str]:
    out = _inline_list(value, files) if value else []
    for item in items:
        cleaned = _clean_item(item) if files else item.strip()
        if cleaned and cleaned.lower() not in _NONE_WORDS:
            out.append(cleaned)
    return out


def _parse_status_value(value: str) -> ResultStatus | None:
    token = _STATUS_TOKEN.search(value)
    if token is None:
        return None
    word = token.group(0).upper()
    if word in _BLOCK_STATUSES:
        return _BLOCK_STATUSES[word]
    if word in _YIELD_STATUSES:
        return _YIELD_STATUSES[word]
    return {"SUCCESS": ResultStatus.SUCCESS, "FAILURE": ResultStatus.FAILURE,
            "BLOCKED": ResultStatus.BLOCKED_AWAITING_CLARIFICATION}.get(word)


def _fenced_output(prose: str, reader: _Reader) -> tuple[dict[str, Any], dict[str, Any]]:
    """(output_payload, canonical fields) from a ```json executor_output fence in the prose."""
    if "```" not in prose:
        return {}, {}
    for match in _FENCE.finditer(prose):
        try:
            data = json.loads(match["body"], parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            continue
        if not isinstance(data, dict):
            continue
        output = _role_output(data)
        source = output if output is not None else data
        if "status" in source:
            continue
        return source, _common(source, reader)
    return {}, {}


def parse_result_block(text: str, marker: tuple[int, int]) -> ResponsePackage:
    prose = text[: marker[0]].strip()
    bullets = _block_bullets(text[marker[1]:])
    reader = _Reader()
    payload, fields = _fenced_output(prose, reader)
    payload = dict(payload)
    status: ResultStatus | None = None
    reason: FailedReason | None = None
    for key, value, items in bullets:
        if key == "status":
            status = _parse_status_value(value)
            if status is None:
                reader.fail("Status", f"expected COMPLETE, PARTIAL or FAILED; got {value[:60]!r}")
        elif key in ("failed reason", "failure reason", "reason"):
            reason = reader.failed_reason(value or (items[0] if items else None), "Failed Reason")
        elif key in _LIST_KEYS:
            name = _LIST_KEYS[key]
            fields[name] = _bullet_list(value, items, name in _FILE_KEYS)
        elif key in ("needs followup", "needs follow up", "needs follow-up", "followup", "follow up"):
            entries = _bullet_list(value, items, files=False)
            fields["needs_followup"] = [f for entry in entries if (f := followup_from_text(entry))]
        elif key == "summary":
            fields["summary"] = " ".join([value, *items]).strip() or None
        elif key not in ("status",):
            payload[key.replace(" ", "_").replace("-", "_")] = value if not items else [value, *items] if value else items
    if status is None and not reader.issues:
        found = ", ".join(key for key, _, _ in bullets) or "no bullets"
        reader.fail("Status", "the ## RESULT block has no **Status** bullet (expected "
                              f"'- **Status**: COMPLETE | PARTIAL | FAILED'); found {found}")
    defaults: dict[str, Any] = {
        "summary": None, "log_summary": None, "evidence": [], "open_questions": [], "artifacts": [],
        "handoff": None, "files_modified": [], "files_deleted": [], "key_decisions": [],
        "deliverables": [], "needs_followup": [], "blockers": [],
        "acceptance_criteria_confirmation": [], "warnings": [], "metrics": {}}
    merged = {**defaults, **{key: value for key, value in fields.items() if value not in (None, [], {})}}
    if merged["summary"] is None and prose:
        merged["summary"] = prose if len(prose) <= 4000 else prose[:3997] + "..."
    error_report: ErrorReport | None = None
    if status is ResultStatus.SUCCESS and reason is not None:
        reader.warnings.append(f"Failed Reason {reason.value} given with Status COMPLETE; ignored")
        reason = None
    if reason is not None or status is ResultStatus.FAILURE:
        message = "; ".join(merged["blockers"]) or (f"FAILED: {reason.value}" if reason else "FAILED")
        error_report = ErrorReport(code=code_for_reason(reason), message=message, failed_reason=reason)
        if status is ResultStatus.FAILURE and reason is None:
            reader.warnings.append("Status FAILED without a Failed Reason")
    return _finish(status or ResultStatus.FAILURE, ResultDialect.RESULT_BLOCK, merged, reader,
                   payload, error_report)


# --- text -----------------------------------------------------------------------------------

def _json_candidates(text: str) -> list[dict[str, Any]]:
    """JSON objects inside prose: fenced blocks first, then objects starting at a '{'."""
    found: list[dict[str, Any]] = []
    if "```" in text:
        for match in _FENCE.finditer(text):
            try:
                value = json.loads(match["body"], parse_constant=_reject_constant)
            except (ValueError, RecursionError):
                continue
            if isinstance(value, dict):
                found.append(value)
        if found:
            return found
    decoder = json.JSONDecoder(parse_constant=_reject_constant)
    position, attempts = text.find("{"), 0
    while position != -1 and attempts < _MAX_JSON_CANDIDATES:
        attempts += 1
        try:
            value, end = decoder.raw_decode(text, position)
        except (ValueError, RecursionError):
            position = text.find("{", position + 1)
            continue
        if isinstance(value, dict):
            found.append(value)
        position = text.find("{", end)
    return found


def _has_status(data: dict[str, Any]) -> bool:
    try:
        return "status" in _unwrap(data)
    except ProtocolError:
        return False


def parse_result_text(text: str) -> ResponsePackage:
    if len(text) > MAX_RESULT_CHARS:
        raise _invalid(f"result: {len(text)} characters is more than the {MAX_RESULT_CHARS} allowed; "
                       "return file references instead of inlining large output")
    stripped = text.strip()
    if not stripped:
        raise _invalid("result: empty text; expected a yield_control JSON object, a '## RESULT' "
                       "block or a JSON envelope")
    if stripped[0] == "{":
        try:
            data = json.loads(stripped, parse_constant=_reject_constant)
        except ValueError:
            data = None
        if isinstance(data, dict):
            return parse_result_dict(data)
    marker = find_result_marker(text)
    if marker is not None:
        return parse_result_block(text, marker)
    candidates = [data for data in _json_candidates(text) if _has_status(data)]
    if candidates:
        return parse_result_dict(candidates[-1])
    raise _invalid("result: no result found in the text; expected a yield_control JSON object "
                   "(with a status), a '## RESULT' block with '- **Status**: COMPLETE | PARTIAL | "
                   "FAILED', or a seed 003 JSON envelope")


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class _NotPlain(Exception):
    """The value needs json's conversions (or is refused by them): see _plain_copy."""


_MAX_PLAIN_DEPTH = 64
_MAX_PLAIN_INT_BITS = 14_000   # below the 4300-digit limit of int -> str conversion


def _plain_copy(value: object, depth: int = 0) -> object:
    """A copy of plain JSON data built from exact dict/list/str/int/float/bool/None only.

    Gives what ``json.loads(json.dumps(value))`` gives for such data (finite floats and
    ints round-trip exactly, keys keep their order) without the text in between; raises
    _NotPlain for anything else (tuples, non-string keys, subclasses, NaN, lone
    surrogates, huge ints, deep nesting) so the caller falls back to json and its exact
    behaviour.
    """
    if isinstance(value, str) and type(value) is str:
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise _NotPlain from None
        return value
    kind = type(value)
    if kind is bool or value is None:
        return value
    if kind is int:
        if value.bit_length() > _MAX_PLAIN_INT_BITS:  # type: ignore[attr-defined]
            raise _NotPlain
        return value
    if isinstance(value, float) and kind is float:
        if not math.isfinite(value):
            raise _NotPlain
        return value
    if depth > _MAX_PLAIN_DEPTH:
        raise _NotPlain
    if isinstance(value, dict) and kind is dict:
        copy: dict[str, object] = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain
            if not key.isascii():
                _plain_copy(key)
            copy[key] = _plain_copy(item, depth + 1)
        return copy
    if isinstance(value, list) and kind is list:
        return [_plain_copy(item, depth + 1) for item in value]
    raise _NotPlain


def _json_clean(data: object) -> object:
    """A JSON-only copy: no NaN/Infinity, no lone surrogates, no non-JSON objects."""
    try:
        return _plain_copy(data)
    except _NotPlain:
        pass
    text = json.dumps(data, ensure_ascii=False, allow_nan=False)
    text.encode("utf-8")
    return json.loads(text)


def parse_result(source: str | bytes | dict[str, Any] | object) -> ResponsePackage:
    """Any dialect's result -> ResponsePackage; raises only ProtocolError(ERR_INVALID_RESULT)."""
    try:
        if isinstance(source, bytes | bytearray):
            try:
                source = bytes(source).decode("utf-8")
            except UnicodeDecodeError:
                raise _invalid("result: the bytes are not UTF-8 text") from None
        if isinstance(source, str):
            try:
                source.encode("utf-8")
            except UnicodeEncodeError:
                raise _invalid("result: the text holds characters that are not valid Unicode "
                               "(lone surrogates)") from None
            package = parse_result_text(source)
            if _SURROGATE_ESCAPE.search(source):
                _check_serializable(package)
        elif isinstance(source, dict):
            try:
                cleaned = _json_clean(source)
            except (TypeError, ValueError, RecursionError):
                raise _invalid("result: the object is not plain JSON (it holds NaN/Infinity, "
                               "non-JSON values or invalid text)") from None
            package = parse_result_dict(cleaned)  # type: ignore[arg-type]
        elif isinstance(source, ResponsePackage):
            return source
        else:
            raise _invalid(f"result: expected text or a JSON object; got {_kind(source)}")
        return package
    except ProtocolError as exc:
        if exc.code is ErrorCode.INVALID_RESULT:
            raise
        raise _invalid(f"result: {exc.message}", exc.issues) from None
    except RecursionError:
        raise _invalid("result: the JSON nests too deeply") from None
    except Exception as exc:  # the contract: nothing but ProtocolError escapes
        raise _invalid(f"result: could not be read ({type(exc).__name__}: {str(exc)[:200]})") from None


def _check_serializable(package: ResponsePackage) -> None:
    """Refuse lone surrogates decoded from JSON escapes (``"\\ud800"``): they cannot round-trip."""
    try:
        json.dumps(package.model_dump(mode="json"), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise _invalid("result: the JSON holds an invalid \\u escape (a lone surrogate)") from None
