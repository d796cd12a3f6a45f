"""A composed tree: planned children are read with their parent, offered to its model by
label, and run with the contract they were composed with, narrowed like any child."""

from __future__ import annotations

from typing import Any

import pytest

from delegations.protocol.adapters.scripted import ScriptedAdapter
from delegations.protocol.errors import ProtocolError
from delegations.protocol.events import MemorySink
from delegations.protocol.lifecycle import RunState
from delegations.protocol.packet import parse_packet
from delegations.protocol.runner import Runner

from .conftest import root_packet

PRICER: dict[str, Any] = {
    "label": "pricer", "subagent_type": "researcher", "goal": "Read the price from the quote",
    "instruction_set": "Read the price.", "input_data": {"quote": "TSLA at $175.22"},
    "budget": {"max_model_calls": 3, "max_tokens": 2000}, "capabilities": ["search"],
    "timeout_s": 20, "success_criteria": [{"kind": "field", "path": "price", "type": "number"}],
}


def composed(**fields: Any) -> dict[str, Any]:
    return root_packet(capabilities=["search", "fs_read"], planned_children=[PRICER], **fields)


def test_planned_children_are_read_in_any_dialect_and_need_unique_labels() -> None:
    packet = parse_packet(composed())
    child = packet.planned_child("pricer")
    assert child is not None and child.goal == "Read the price from the quote"
    assert parse_packet(packet.to_dict()) == packet
    with pytest.raises(ProtocolError) as caught:
        parse_packet(root_packet(planned_children=[{"goal": "no label"}, PRICER, PRICER,
                                                   {"label": "x", "max_iterations": 0}]))
    fields = [issue.field for issue in caught.value.issues]
    assert fields == ["planned_children[0].label", "planned_children[2].label",
                      "planned_children[3].max_iterations"]


async def test_the_parents_model_is_told_about_them_and_delegating_by_label_runs_the_composed_contract(
        runner: Runner, sink: MemorySink) -> None:
    seen: list[str] = []

    class Reading(ScriptedAdapter):
        async def complete(self, messages: Any, tools: Any, **options: Any) -> Any:
            seen.append(str(messages[0]["content"]))
            return await super().complete(messages, tools, **options)

    # the model names the label, adds an input and asks for more than was composed
    call = {"label": "pricer", "subagent_type": "coder", "instruction_set": "Do anything.",
            "input_data": {"currency_hint": "USD"}, "capabilities": ["fs_read", "search"],
            "budget": {"max_model_calls": 40}}
    adapter = Reading({"script": [
        {"tool_calls": [{"name": "delegate_task", "arguments": call}]},
        {"tool_calls": [{"name": "yield_control", "arguments": {"status": "SUCCESS", "output_payload": {"ok": 1}}}]}],
        "children": {"pricer": {"script": [{"tool_calls": [{"name": "yield_control", "arguments": {
            "status": "SUCCESS", "output_payload": {"price": 175.22}}}]}]}}})
    outcome = await runner.start(parse_packet(composed()), adapter=adapter)
    assert outcome.state is RunState.COMPLETE, outcome.error
    assert "Planned subagents" in seen[0] and "- pricer (researcher): Read the price from the quote" in seen[0]
    [child_event] = [e.data for e in sink.of_run(outcome.run_id) if e.type == "child"]
    assert child_event["planned"] is True
    packet = child_event["packet"]
    assert packet["subagent_type"] == "researcher" and packet["instruction_set"] == "Read the price."
    assert packet["input_data"] == {"quote": "TSLA at $175.22", "currency_hint": "USD"}
    assert child_event["capabilities"] == ["search"]           # as composed, not widened
    assert child_event["budget"]["max_model_calls"] == 3


async def test_a_label_no_plan_names_spawns_an_ordinary_child(runner: Runner, sink: MemorySink) -> None:
    call = {"label": "helper", "subagent_type": "researcher", "instruction_set": "Help.",
            "goal": "Help out", "input_data": {}}
    adapter = ScriptedAdapter({"script": [
        {"tool_calls": [{"name": "delegate_task", "arguments": call}]},
        {"tool_calls": [{"name": "yield_control", "arguments": {"status": "SUCCESS", "output_payload": {"ok": 1}}}]}],
        "children": {"helper": {"script": [{"tool_calls": [{"name": "yield_control", "arguments": {
            "status": "SUCCESS", "output_payload": {"done": True}}}]}]}}})
    outcome = await runner.start(parse_packet(composed()), adapter=adapter)
    assert outcome.state is RunState.COMPLETE, outcome.error
    [child_event] = [e.data for e in sink.of_run(outcome.run_id) if e.type == "child"]
    assert child_event["planned"] is False
    assert child_event["packet"]["instruction_set"] == "Help."


def test_a_planned_child_is_linted_against_its_parent_under_its_own_index() -> None:
    from delegations.protocol.lint import lint_packet

    greedy = {**PRICER, "budget": {"max_model_calls": 500, "max_tokens": 10_000_000},
              "capabilities": ["network_outbound"]}
    findings = lint_packet(parse_packet(root_packet(capabilities=["search"], planned_children=[greedy])))
    codes = {(f.code, f.field) for f in findings if f.field.startswith("planned_children[0]")}
    assert ("BUDGET_EXCEEDS_PARENT", "planned_children[0].budget.max_model_calls") in codes
    assert any(code == "CAPABILITY_EXCEEDS_PARENT" for code, _ in codes)
    clean = lint_packet(parse_packet(composed()))
    assert not [f for f in clean if f.field.startswith("planned_children") and f.severity == "error"]


async def test_the_delegate_task_tool_names_the_planned_children(runner: Runner) -> None:
    offered: list[Any] = []

    class Reading(ScriptedAdapter):
        async def complete(self, messages: Any, tools: Any, **options: Any) -> Any:
            offered.extend(tools)
            return await super().complete(messages, tools, **options)

    adapter = Reading({"script": [{"tool_calls": [{"name": "yield_control", "arguments": {
        "status": "SUCCESS", "output_payload": {"ok": 1}}}]}]})
    outcome = await runner.start(parse_packet(composed()), adapter=adapter)
    assert outcome.state is RunState.COMPLETE, outcome.error
    [delegate] = [tool for tool in offered if tool["name"] == "delegate_task"]
    assert delegate["description"].endswith(
        "Planned subagents, started by naming their label: pricer (researcher): Read the price from the quote.")
