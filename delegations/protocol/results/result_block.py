"""The agloop ``## RESULT`` block: markdown bullets at the end of a subagent's answer.

The block may follow prose (the last marker wins). Bullets ``**Status**``
(COMPLETE->SUCCESS, PARTIAL->PARTIAL_COMPLETION, FAILED->FAILURE), ``**Failed Reason**``
(a FailedReason), ``**Files Modified**``/``**Files Deleted**`` (``[a, b]``, ``"none"``,
``a, b`` or sub-bullets), ``**Key Decisions**``, ``**Deliverables**``, ``**Blockers**``,
``**Warnings**``, ``**Open Questions**`` (inline text, ``[a; b]`` or sub-bullets),
``**Needs Followup**`` (``agent: reason``; the first becomes ``handoff``),
``**Summary**``; other bullets go to output_payload under their snake_case name. A
```json fence in the prose holding an ``executor_output`` (or any ``*_output``) object
supplies output_payload and its fields. Without a Summary bullet the prose before the
block is the summary.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from ..errors import FailedReason
from ..text_limits import parse
from .models import (
    BLOCK_STATUSES,
    YIELD_STATUSES,
    ErrorReport,
    ResponsePackage,
    ResultDialect,
    ResultStatus,
)
from .reader import (
    NONE_WORDS,
    FieldReader,
    code_for_reason,
    common_fields,
    finish,
    followup_from_text,
    role_output,
)

_MARKER_LINE = re.compile(r"[ \t]*#{1,6}[ \t]*\**RESULT\**[ \t]*:?[ \t]*", re.IGNORECASE)
_SUB_BULLET = re.compile(r"^(?:[-*+]|\d+[.)])[ \t]+(?P<item>.*)$")
JSON_FENCE = re.compile(r"```(?:json|JSON)?[ \t]*\n(?P<body>.*?)\n[ \t]*```", re.DOTALL)
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


def parse_result_block(text: str, marker: tuple[int, int]) -> ResponsePackage:
    """The block at ``marker`` (see :func:`find_result_marker`), with the prose before it."""
    prose = text[: marker[0]].strip()
    bullets = _block_bullets(text[marker[1]:])
    reader = FieldReader()
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
    return finish(status or ResultStatus.FAILURE, ResultDialect.RESULT_BLOCK, merged, reader,
                  payload, error_report)


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
    if text.lower() in NONE_WORDS:
        return []
    if text.startswith("["):
        parsed = None
        if text[1:2] in ('"', "]") or text[1:3] in (' "',):
            try:
                parsed = parse(text)
            except ValueError:
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
        if cleaned and cleaned.lower() not in NONE_WORDS:
            out.append(cleaned)
    return out


def _parse_status_value(value: str) -> ResultStatus | None:
    token = _STATUS_TOKEN.search(value)
    if token is None:
        return None
    word = token.group(0).upper()
    if word in BLOCK_STATUSES:
        return BLOCK_STATUSES[word]
    if word in YIELD_STATUSES:
        return YIELD_STATUSES[word]
    return {"SUCCESS": ResultStatus.SUCCESS, "FAILURE": ResultStatus.FAILURE,
            "BLOCKED": ResultStatus.BLOCKED_AWAITING_CLARIFICATION}.get(word)


def _fenced_output(prose: str, reader: FieldReader) -> tuple[dict[str, Any], dict[str, Any]]:
    """(output_payload, canonical fields) from a ```json executor_output fence in the prose."""
    if "```" not in prose:
        return {}, {}
    for match in JSON_FENCE.finditer(prose):
        try:
            data = parse(match["body"])
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        output = role_output(data)
        source = output if output is not None else data
        if "status" in source:
            continue
        return source, common_fields(source, reader)
    return {}, {}
