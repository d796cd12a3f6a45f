"""What the model reads: the opening messages built from a packet, and tool results as text."""

from __future__ import annotations

import json
from typing import Any

from pydantic_core import PydanticSerializationError, to_json

from ..packet import HandoffPacket
from ..tools import DELEGATE_TASK

PROTOCOL_GUIDE = (
    "How to hand back your work: call yield_control with status SUCCESS, PARTIAL_COMPLETION "
    "or FAILURE and output_payload (a JSON object); on FAILURE add error_report {code, "
    "message, failed_reason}. If the task is ambiguous in a way your instructions do not "
    "cover, do not guess: yield status BLOCKED_AWAITING_CLARIFICATION with your questions. "
    "A plain-text answer must end with a '## RESULT' block or be a JSON result envelope. "
    "Use only the tools offered; ask for a missing capability with request_capability.")

# packet fields the runner renders itself (or that only steer the runner) and so leaves
# out of the "delegation details" JSON the model is shown
RUNNER_FIELDS = frozenset({
    "instruction_set", "goal", "input_data", "success_criteria", "expected_output_schema",
    "termination_trigger", "budget", "capabilities", "depth", "max_depth", "allow_nested",
    "label", "agent_id", "model", "thinking", "cleanup", "max_iterations", "timeout_s",
    "previous_failure", "skill", "subagent_type"})


def _json_text(value: object) -> str:
    """JSON as the model reads it: pydantic-core's compact text, non-ASCII as it is, what
    JSON cannot hold written as its ``str``.

    Chosen on tests/benchmarks/bench_runner.py: W1 takes 0.40 ms of CPU per hand-off with
    this and 0.42 ms with ``json.JSONEncoder(ensure_ascii=False, default=str).encode``
    (``json.dumps``'s text, spaces after ``,`` and ``:``).
    """
    try:
        return to_json(value, fallback=str).decode()
    except PydanticSerializationError:
        # what pydantic-core will not write (a lone surrogate), json writes as it always has
        return json.dumps(value, ensure_ascii=False, default=str)


def initial_messages(packet: HandoffPacket, packet_dict: dict[str, Any]) -> list[dict[str, Any]]:
    """The system and user messages a run's conversation starts with (``packet_dict`` is
    ``packet.to_dict()``, which the caller already holds)."""
    role = packet.subagent_type.value if packet.subagent_type is not None else "general"
    system = [packet.instruction_set or f"You are a {role} subagent working on one delegated task.",
              PROTOCOL_GUIDE]
    if packet.success_criteria:
        lines = "\n".join(f"- {c if isinstance(c, str) else json.dumps(c)}" for c in packet.success_criteria)
        system.append(f"Your result is checked against these success criteria:\n{lines}")
    if packet.expected_output_schema:
        system.append("output_payload must be valid against this JSON Schema:\n"
                      + _json_text(packet.expected_output_schema))
    if packet.termination_trigger:
        system.append(f"Write {packet.termination_trigger!r} when you are done; the run ends there.")
    user = []
    if packet.goal:
        user.append(f"Goal: {packet.goal}")
    if packet.input_data:
        user.append("Input data (JSON):\n" + _json_text(packet.input_data))
    details = {key: value for key, value in packet_dict.items() if key not in RUNNER_FIELDS}
    if details:
        user.append("Delegation details (JSON):\n" + _json_text(details))
    if packet.previous_failure is not None:
        user.append("A previous attempt failed; fix what it reports:\n"
                    + json.dumps(packet.previous_failure.model_dump(mode="json"), ensure_ascii=False))
    if not user:
        user.append("Begin.")
    return [{"role": "system", "content": "\n\n".join(system)},
            {"role": "user", "content": "\n\n".join(user)}]


def tool_message_text(name: str, record: dict[str, Any]) -> str:
    """A tool call's record as the model reads it: its result, or ``{"error": ...}`` (with
    the record's ``hint`` when it repeats an earlier failed call). A
    child's announce (the result of ``delegate_task``) leaves out the empty fields of its result."""
    if not record.get("ok"):
        failure = {"error": record.get("error")}
        if record.get("hint"):
            failure["hint"] = record["hint"]
        return _json_text(failure)
    result = record.get("result")
    if name == DELEGATE_TASK and isinstance(result, dict):
        result = _compact_announce(result)
    return _json_text(result)


def failure_text(record: dict[str, Any]) -> str:
    """Why a failed tool call failed, in words (its error's message)."""
    error = record.get("error")
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"]).rstrip(".")
    return "of an error"


def _compact_announce(announce: dict[str, Any]) -> dict[str, Any]:
    result = announce.get("result")
    if not isinstance(result, dict):
        return announce
    return {**announce, "result": {key: value for key, value in result.items()
                                   if value is not None and value != [] and value != {}}}
