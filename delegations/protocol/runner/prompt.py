"""What the model reads: the opening messages built from a packet, and tool results as text."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from pydantic_core import PydanticSerializationError, to_json

from ..criteria import GROUNDING_KINDS, parse_criterion
from ..errors import ProtocolError
from ..packet import HandoffPacket
from ..tools import DELEGATE_TASK, YIELD_CONTROL

# what a small model reads instead (an adapter with ``compact_prompt``): its answers are
# held to the tool schemas by constrained decoding, so the rules it need not be told are
# left out; SmolLM2-135M's prompt went from about 870 tokens to about 300
COMPACT_GUIDE = ("Hand back your answer by calling yield_control with status SUCCESS and "
                 "output_payload. If you cannot do the task, use status FAILURE with "
                 "error_report {code, message}.")

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
    "previous_failure", "skill", "subagent_type", "planned_children"})


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


def initial_messages(packet: HandoffPacket, packet_dict: dict[str, Any], *,
                     examples: Sequence[dict[str, Any]] = (),
                     compact: bool = False) -> list[dict[str, Any]]:
    """The system and user messages a run's conversation starts with (``packet_dict`` is
    ``packet.to_dict()``, which the caller already holds).

    ``examples`` (a skill's worked examples, ``{"input", "output"}``) come between the two
    as earlier exchanges (:func:`example_turns`), the way small models learn a task best.
    ``compact`` is for small models whose
    answers are constrained to the tool schemas: the protocol guide in one sentence and the
    output schema as a list of its fields.
    """
    role = packet.subagent_type.value if packet.subagent_type is not None else "general"
    system = [packet.instruction_set or f"You are a {role} subagent working on one delegated task.",
              COMPACT_GUIDE if compact else PROTOCOL_GUIDE]
    criteria = [c for c in packet.success_criteria if not (compact and _told_otherwise(c))]
    if criteria:
        lines = "\n".join(f"- {c if isinstance(c, str) else json.dumps(c)}" for c in criteria)
        system.append(f"Your result is checked against these success criteria:\n{lines}")
    if packet.expected_output_schema:
        system.append(_schema_fields(packet.expected_output_schema) if compact else
                      "output_payload must be valid against this JSON Schema:\n"
                      + _json_text(packet.expected_output_schema))
    if packet.termination_trigger:
        system.append(f"Write {packet.termination_trigger!r} when you are done; the run ends there.")
    if packet.planned_children:
        system.append(_planned_text(packet.planned_children))
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
    return [{"role": "system", "content": "\n\n".join(system)}, *example_turns(examples),
            {"role": "user", "content": "\n\n".join(user)}]


def _told_otherwise(criterion: str | dict[str, Any]) -> bool:
    """Whether a small model may be spared this criterion: the schema, which constrained
    decoding holds it to, or a check that its answer comes from the input it reads anyway."""
    if isinstance(criterion, dict) and criterion.get("kind") == "json_schema":
        return True
    try:
        parsed = parse_criterion(criterion)
    except ProtocolError:
        return False
    return parsed is not None and parsed.kind in GROUNDING_KINDS


def example_turns(examples: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Worked examples as exchanges that already happened: the input as the task gives it,
    the ``yield_control`` call that answers it, and that call's result. Each message is
    marked ``example`` so that nothing counts it as work the run did.

    Measured on the price-research examples with SmolLM2-135M: written as text before the
    task, the model copied the first example's price; as exchanges, it answered the task.
    """
    turns: list[dict[str, Any]] = []
    for number, example in enumerate(examples, start=1):
        call_id = f"example-{number}"
        turns += [
            {"role": "user", "content": "Input data (JSON):\n" + _json_text(example["input"]),
             "example": True},
            {"role": "assistant", "content": "", "example": True, "tool_calls": [
                {"id": call_id, "name": YIELD_CONTROL,
                 "arguments": {"status": "SUCCESS", "output_payload": example["output"]}}]},
            {"role": "tool", "tool_call_id": call_id, "name": YIELD_CONTROL, "example": True,
             "content": "Accepted. (That was an example; the task follows.)"},
        ]
    return turns


_EXAMPLE_IN_TEXT = re.compile(r"[,;(]?\s*\be\.g\.")


def _planned_text(children: Sequence[HandoffPacket]) -> str:
    """The composed children, as the parent's model is told about them."""
    lines = []
    for child in children:
        role = f" ({child.subagent_type.value})" if child.subagent_type is not None else ""
        skill = f", skill {child.skill}" if child.skill else ""
        lines.append(f"- {child.label}{role}{skill}: {child.goal or child.instruction_set or ''}".rstrip(": "))
    return ("Planned subagents: start one with delegate_task naming its label (its contract, "
            "budget and capabilities are already set; you may add input_data):\n" + "\n".join(lines))


def _schema_fields(schema: dict[str, Any]) -> str:
    """An object schema's fields, one per line: name (type, enum or description); '?' marks
    the optional ones."""
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return "output_payload must be valid against this JSON Schema:\n" + _json_text(schema)
    required = set(schema.get("required") or [])
    lines = []
    for name, spec in properties.items():
        spec = spec if isinstance(spec, dict) else {}
        if "enum" in spec:
            kind = " or ".join(json.dumps(value) for value in spec["enum"])
        else:
            kind = "/".join(spec["type"]) if isinstance(spec.get("type"), list) else str(spec.get("type", "any"))
        # "e.g. USD" left out: a small model copies it (SmolLM2-135M answered USD for a
        # price in pounds)
        note = _EXAMPLE_IN_TEXT.split(str(spec.get("description") or ""))[0].rstrip(" .,;:")
        note = f": {note}" if note else ""
        lines.append(f"- {name}{'' if name in required else '?'} ({kind}){note}")
    return "output_payload fields:\n" + "\n".join(lines)


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
