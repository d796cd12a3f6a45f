"""The JSON dialects of a result: yield_control, the RESULT block as JSON, the result
envelope, announce, and the canonical form itself (see the package docstring)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ..errors import ErrorCode, Issue
from ..text_limits import parse
from .models import (
    ANNOUNCE_STATUSES,
    BLOCK_STATUSES,
    CANONICAL_FIELDS,
    ENVELOPE_STATUSES,
    YIELD_STATUSES,
    ErrorReport,
    ResponsePackage,
    ResultDialect,
    ResultStatus,
)
from .reader import (
    FieldReader,
    code_for_reason,
    common_fields,
    finish,
    has_common_fields,
    invalid_result,
    kind_of,
    pick,
    role_output,
)

_STATUS_HELP = ("expected SUCCESS, PARTIAL_COMPLETION, FAILURE or BLOCKED_AWAITING_CLARIFICATION "
                "(yield_control), COMPLETE, PARTIAL or FAILED (RESULT block), completed, "
                "needs_input, blocked or failed (envelope), or success, error or timeout (announce)")


def parse_result_dict(data: dict[str, Any]) -> ResponsePackage:
    """A result object in any JSON dialect -> ResponsePackage; the status picks the dialect."""
    data = unwrap_result(data)
    dialect = data.get("dialect")
    if isinstance(dialect, str) and dialect in ResultDialect._value2member_map_ and set(data) <= CANONICAL_FIELDS:
        return _from_canonical(data)
    if "status" not in data:
        keys = ", ".join(sorted(str(key) for key in data)[:8]) or "no keys"
        raise invalid_result(f"status: missing; the result object has {keys}. A result needs a status: "
                             + _STATUS_HELP)
    raw = data["status"]
    if not isinstance(raw, str):
        raise invalid_result(f"status: expected a string; got {kind_of(raw)}. " + _STATUS_HELP)
    status_text = raw.strip()
    upper = status_text.upper()
    lower = status_text.lower()
    if status_text in YIELD_STATUSES:
        return _from_yield(data, YIELD_STATUSES[status_text])
    if upper in BLOCK_STATUSES and status_text == upper:
        return _from_block_json(data, BLOCK_STATUSES[upper])
    if lower in ENVELOPE_STATUSES:
        return _from_envelope(data, lower)
    if lower == "success" and any(key in data for key in ("output_payload", "outputPayload", "error_report")):
        return _from_yield(data, ResultStatus.SUCCESS)
    if lower in ANNOUNCE_STATUSES:
        return _from_announce(data, lower)
    if upper in YIELD_STATUSES:
        return _from_yield(data, YIELD_STATUSES[upper])
    if upper in BLOCK_STATUSES:
        return _from_block_json(data, BLOCK_STATUSES[upper])
    if lower == "unknown":
        raise invalid_result("status: 'unknown' (an OpenClaw announce) means the subagent's outcome "
                             "is not known; it cannot be used as a result. Check the run's log or "
                             "retry it")
    raise invalid_result(f"status: {status_text[:60]!r} is not a result status; " + _STATUS_HELP)


def _from_yield(data: dict[str, Any], status: ResultStatus) -> ResponsePackage:
    reader = FieldReader()
    fields = common_fields(data, reader)
    raw_payload = pick(data, "output_payload")
    if raw_payload is None:
        if status in (ResultStatus.SUCCESS, ResultStatus.PARTIAL_COMPLETION):
            reader.fail("output_payload", f"required for {status.value}: the object holding the "
                                          "result's data (the hand-off protocol's yield_control)")
        payload: dict[str, Any] = {}
    else:
        payload = reader.obj(raw_payload, "output_payload")
    error_report = reader.error_report(pick(data, "error_report"), "error_report")
    return finish(status, ResultDialect.YIELD_CONTROL, fields, reader, payload, error_report)


def _from_block_json(data: dict[str, Any], status: ResultStatus) -> ResponsePackage:
    reader = FieldReader()
    output = role_output(data)
    fields = common_fields(output if output is not None and not has_common_fields(data) else data, reader)
    payload = output if output is not None else reader.obj(pick(data, "output_payload"), "output_payload")
    reason = reader.failed_reason(data.get("failed_reason", data.get("failedReason")), "failed_reason")
    error_report = reader.error_report(pick(data, "error_report"), "error_report")
    if error_report is None and (reason is not None or status is ResultStatus.FAILURE):
        message = "; ".join(fields["blockers"]) or (reason.value if reason else "FAILED")
        error_report = ErrorReport(code=code_for_reason(reason), message=message, failed_reason=reason)
    return finish(status, ResultDialect.RESULT_BLOCK, fields, reader, payload, error_report)


def _from_envelope(data: dict[str, Any], status_text: str) -> ResponsePackage:
    reader = FieldReader()
    status = ENVELOPE_STATUSES[status_text]
    fields = common_fields(data, reader)
    if not isinstance(data.get("summary"), str):
        reader.fail("summary", "required in a result envelope: a string saying what was found or done")
    payload = reader.obj(data.get("output_payload", data.get("output", data.get("data"))), "output_payload")
    error_report = reader.error_report(data.get("error", pick(data, "error_report")), "error")
    if status is ResultStatus.FAILURE and error_report is None and isinstance(data.get("summary"), str):
        error_report = ErrorReport(code="ERR_UNSPECIFIED", message=data["summary"])
    if status_text == "blocked" and not fields["blockers"] and isinstance(data.get("summary"), str):
        fields["blockers"] = [data["summary"]]
    if status is ResultStatus.SUCCESS and not fields["evidence"]:
        reader.warnings.append("completed envelope without evidence (a delegation contract asks "
                               "for a source or tool call id behind each conclusion)")
    return finish(status, ResultDialect.ENVELOPE, fields, reader, payload, error_report)


_METRIC_KEYS = ("runtime", "runtime_s", "runtimeSeconds", "runtime_seconds", "runtime_ms", "runtimeMs", "duration_ms",
                "usage", "tokens", "token_usage", "tokenUsage", "input_tokens", "output_tokens",
                "total_tokens", "cost_usd", "model_calls")


def _from_announce(data: dict[str, Any], status_text: str) -> ResponsePackage:
    reader = FieldReader()
    status = ANNOUNCE_STATUSES[status_text]
    fields = common_fields(data, reader)
    result = data.get("result")
    payload: dict[str, Any] = reader.obj(pick(data, "output_payload"), "output_payload")
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
    error = data.get("error", pick(data, "error_report"))
    error_report = reader.error_report(error, "error")
    if status_text == "timeout":
        message = error_report.message if error_report else "the subagent hit its hard timeout"
        details = error_report.details if error_report else {}
        error_report = ErrorReport(code=str(ErrorCode.TIMEOUT), message=message, details=details)
    elif status is ResultStatus.FAILURE and error_report is None:
        error_report = ErrorReport(code="ERR_UNSPECIFIED",
                                   message=fields["summary"] or "the subagent reported an error")
    return finish(status, ResultDialect.ANNOUNCE, fields, reader, payload, error_report)


def _from_canonical(data: dict[str, Any]) -> ResponsePackage:
    try:
        return ResponsePackage.model_validate(data)
    except ValidationError as exc:
        issues = [Issue(".".join(str(part) for part in error["loc"]) or "result",
                        str(error["msg"])[:300]) for error in exc.errors()[:20]]
        first = issues[0] if issues else Issue("result", "invalid")
        raise invalid_result(f"{first.field}: {first.message}", issues) from None


def unwrap_result(data: dict[str, Any], depth: int = 0) -> dict[str, Any]:
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
                found = unwrap_result(call, depth + 1)
                if "status" in found:
                    return found
        return data
    if isinstance(inner, str):
        try:
            inner = parse(inner)
        except ValueError:
            raise invalid_result("arguments: the tool call's arguments are not valid JSON") from None
    if isinstance(inner, dict):
        return unwrap_result(inner, depth + 1)
    return data
