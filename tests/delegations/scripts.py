"""Packets and scripted-adapter configs the run tests share (DESIGN §2.11's TURN format)."""

from __future__ import annotations

from typing import Any

from delegations.models import RunCheckpoint
from skills.models import Skill
from tests.skills.factories import add_skill

ANSWER = {"answer": 42}


def packet(**overrides: Any) -> dict[str, Any]:
    """A delegation that lints without errors (every delegation contract part is there)."""
    base: dict[str, Any] = {
        "goal": "Compare three caching options and answer with the best one",
        "subagent_type": "researcher",
        "instruction_set": "Compare the options; return JSON with your answer.",
        "input_data": {"options": ["a", "b", "c"]},
        "allowed_inputs": ["options"],
        "expected_output_schema": {"answer": "integer"},
        "success_criteria": ["JSON is schema-valid"],
        "timeout_s": 60,
        "budget": {"max_model_calls": 20, "max_tokens": 100000},
    }
    base.update(overrides)
    return base


def yield_turn(payload: dict[str, Any] | None = None, *, text: str = "Here is my answer.",
               status: str = "SUCCESS", **extra: Any) -> dict[str, Any]:
    return {"text": text, "tool_calls": [{"name": "yield_control", "arguments": {
        "status": status, "output_payload": payload if payload is not None else ANSWER}}], **extra}


def leaf(payload: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A subagent that answers at once."""
    return {"script": [yield_turn(payload, **extra)]}


def delegate_turn(*labels: str, finish: bool = False, **extra: Any) -> dict[str, Any]:
    calls = [{"name": "delegate_task", "arguments": {
        "label": label, "subagent_type": "researcher", "goal": f"Find part {label}",
        "instruction_set": "Find it and answer with JSON.", "input_data": {"part": label},
        "expected_output_schema": {"answer": "integer"}, "timeout_s": 30}} for label in labels]
    turn: dict[str, Any] = {"text": f"Delegating to {', '.join(labels)}.", "tool_calls": calls, **extra}
    if finish:
        turn["finish"] = "children"
    return turn


def with_child(child: dict[str, Any] | None = None, *, label: str = "kid") -> dict[str, Any]:
    """A coordinator that delegates to one child, then answers itself."""
    return {"script": [delegate_turn(label), yield_turn()],
            "children": {label: child if child is not None else leaf()}}


def needs_approval(**first_turn: Any) -> dict[str, Any]:
    """A subagent whose first tool call needs the approval-required `file_delete`."""
    return {"script": [
        {"text": "Removing the stale file.", "tool_calls": [
            {"name": "delete_file", "arguments": {"path": "stale.txt"}}], **first_turn},
        yield_turn()]}


def approval_packet(**overrides: Any) -> dict[str, Any]:
    return packet(capabilities=["file_delete"], **overrides)


# -- a registered skill the packets above fit ------------------------------------------------

SKILL_INSTRUCTIONS = "# Caching study\n\nBenchmark every option before you compare them.\n"
SKILL_OUTPUT = {"price": 1.5, "currency": "EUR"}


def add_caching_skill(version: str = "1.0.0", **overrides: Any) -> Skill:
    """Register ``caching@version``: instructions, an input_schema that ``packet()``'s
    input fits (``options``, at least one), and an output schema SKILL_OUTPUT fits."""
    fields: dict[str, Any] = {
        "instructions": SKILL_INSTRUCTIONS,
        "input_schema": {"type": "object", "required": ["options"], "properties": {
            "options": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}}},
        "output_schema": {"price": "number", "currency": "string"},
        "capabilities": [],
    }
    fields.update(overrides)
    return add_skill("caching", version, **fields)


def skill_packet(ref: str = "caching", **overrides: Any) -> dict[str, Any]:
    """``packet()`` naming a skill and leaving instructions and output schema to it."""
    base = packet(skill=ref, **overrides)
    for field in ("instruction_set", "expected_output_schema"):
        if field not in overrides:
            base.pop(field)
    return base


def first_system_message(run_id: str) -> str:
    """What the model read first in run ``run_id``: its checkpoint's opening system message."""
    data = RunCheckpoint.data_of(run_id)
    assert data is not None, f"run {run_id} has no checkpoint"
    return str(data["messages"][0]["content"])
