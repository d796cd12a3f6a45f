"""Packets and scripted-adapter configs the run tests share (DESIGN §2.11's TURN format)."""

from __future__ import annotations

from typing import Any

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
