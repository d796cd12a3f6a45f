"""Why a run did not finish, in one sentence a person can act on.

A run that ends REJECTED, FAILED, TIMEOUT or CANCELLED stores its ``error`` (code,
message, sometimes input issues, lint findings or details) and, unless it was rejected,
the runner's FAILURE result. The run page and ``run_delegation`` lead with
:func:`failure_headline`: what went wrong, naming the field, the skill or the limit, and
what to do next. The wording of the problem is the runner's and the registry's own; this
picks the part that names the culprit and adds the next step its error code calls for.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from delegations.protocol.errors import ErrorCode
from delegations.protocol.lifecycle import RunState

_VERBS: dict[str, str] = {
    RunState.REJECTED: "Rejected", RunState.FAILED: "Failed", RunState.TIMEOUT: "Timed out",
    RunState.CANCELLED: "Cancelled",
}
# each limit a run can use up: what it ran out of, and the packet fields that raise it
_LIMITS: dict[str, tuple[str, str]] = {
    "max_iterations": ("all {calls}its model calls", "raise max_iterations or budget.max_model_calls"),
    "max_model_calls": ("all {calls}its model calls", "raise budget.max_model_calls or max_iterations"),
    "max_tokens": ("up its token budget", "raise budget.max_tokens"),
    "max_cost_usd": ("up its cost budget", "raise budget.max_cost_usd"),
    "max_runtime_s": ("up its time budget", "raise budget.max_runtime_s or timeout_s"),
}
_ANCESTOR = re.compile(r"ancestor run (\w+)'s")
_TIMEOUT = re.compile(r"timeout of ([\d.]+) s")


def failure_headline(state: str, error: dict[str, Any] | None, result: dict[str, Any] | None, *,
                     skill: str = "", findings: Sequence[dict[str, Any]] = ()) -> str | None:
    """The sentence a run that ended ``state`` leads with; None unless it was rejected,
    failed, timed out or cancelled. ``skill`` is the run's ``name@version`` and
    ``findings`` its lint findings, when it has them."""
    verb = _VERBS.get(str(state))
    if verb is None:
        return None
    error = error if isinstance(error, dict) else {}
    report = result.get("error_report") if isinstance(result, dict) else None
    report = report if isinstance(report, dict) else {}
    code = str(error.get("code") or report.get("code") or "")
    message = " ".join(str(error.get("message") or report.get("message") or "").split())
    if state == RunState.CANCELLED:
        return _sentence(message if message.startswith("Cancelled")
                         else f"Cancelled: {_clause(message or 'no reason was given')}")
    if not message:
        return f"{verb}: the run recorded no reason; its timeline below shows how far it got."
    if code in (ErrorCode.INVALID_PACKET, ErrorCode.CONSTRAINT_VIOLATION) and state == RunState.REJECTED:
        return _refused(verb, code, error, findings, message, skill)
    if code == ErrorCode.RESOURCE_EXHAUSTED:
        return _exhausted(verb, error, report, message)
    if code == ErrorCode.TIMEOUT:
        found = _TIMEOUT.search(message)
        limit = f"its hard timeout of {found.group(1)} s" if found else "its hard timeout"
        return (f"{verb}: the run hit {limit} before handing back a result; raise timeout_s "
                f"(or budget.max_runtime_s) and start again.")
    return f"{verb}: {_sentence(_clause(message))}"


def _refused(verb: str, code: str, error: dict[str, Any], findings: Sequence[dict[str, Any]],
             message: str, skill: str) -> str:
    """A refused delegation: its first input issue or lint error names the field to fix."""
    issues = error.get("issues") or error.get("findings") or [
        finding for finding in findings if finding.get("severity") == "error"]
    first = issues[0] if isinstance(issues, list) and issues and isinstance(issues[0], dict) else {}
    field = str(first.get("field") or "")
    problem = _sentence(_clause(" ".join(str(first.get("message") or message).split())))
    if code == ErrorCode.CONSTRAINT_VIOLATION:
        where = f"{field}: " if field else ""
        return (f"{verb}: {where}{problem} A delegation gets no more than its parent has left; "
                f"ask for less or give the parent more.")
    if field.startswith("input_data"):
        schema = f"skill {skill}'s input_schema" if skill else "its skill's input_schema"
        return f"{verb}: {field} does not fit {schema}: {problem} Fix the input and start again."
    if field == "skill":      # the registry's own message says what to do
        return f"{verb}: {problem}"
    if field:
        return f"{verb}: {field}: {problem} Fix the packet and start again."
    return f"{verb}: {problem} Fix the packet and start again."


def _exhausted(verb: str, error: dict[str, Any], report: dict[str, Any], message: str) -> str:
    """A run out of a limit: which one, and which field raises it."""
    details = error.get("details")
    axis = str(details.get("axis") or "") if isinstance(details, dict) else ""
    if axis not in _LIMITS:
        axis = next((name for name in _LIMITS if name in message), "")
    if not axis:
        return f"{verb}: {_sentence(_clause(message))}"
    used, advice = _LIMITS[axis]
    if message.startswith("Stopped at the soft budget threshold"):
        return f"{verb}: {_sentence(_clause(message))} To let it go further, {advice}."
    ancestor = _ANCESTOR.search(message)
    if ancestor is not None:
        return (f"{verb}: ancestor run {ancestor.group(1)} used up its {axis} limit; "
                f"{advice} where that run starts.")
    done = report.get("details")
    calls = done.get("model_calls") if isinstance(done, dict) else None
    used = used.format(calls=f"{calls} of " if isinstance(calls, int) and calls else "")
    return f"{verb}: the run used {used} before handing back a result; {advice}."


def _clause(text: str) -> str:
    """``text`` to follow a colon: a capitalized first word lowered ("The run" -> "the
    run"), a name ("OpenAI", "ERR_TIMEOUT") kept."""
    first = text.split(" ", 1)[0]
    if len(first) > 1 and first[0].isupper() and first[1:].islower():
        return text[0].lower() + text[1:]
    return text


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else f"{text}."
