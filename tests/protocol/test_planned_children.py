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


async def test_a_subagent_that_plans_children_delegates_to_them_without_allow_nested(
        runner: Runner, sink: MemorySink) -> None:
    checker = {"label": "checker", "goal": "Check the price", "instruction_set": "Check it.",
               "input_data": {"price": 175.22}, "timeout_s": 10}
    reader = {**PRICER, "planned_children": [checker]}
    answer = {"name": "yield_control", "arguments": {"status": "SUCCESS", "output_payload": {"price": 175.22}}}
    adapter = ScriptedAdapter({"script": [
        {"tool_calls": [{"name": "delegate_task", "arguments": {"label": "pricer"}}]}, {"tool_calls": [answer]}],
        "children": {"pricer": {
            "script": [{"tool_calls": [{"name": "delegate_task", "arguments": {"label": "checker"}}]},
                       {"tool_calls": [answer]}],
            "children": {"checker": {"script": [{"tool_calls": [answer]}]}}}}})
    packet = root_packet(capabilities=["search"], planned_children=[reader])
    outcome = await runner.start(parse_packet(packet), adapter=adapter)
    assert outcome.state is RunState.COMPLETE, outcome.error
    spawned = [e.data["label"] for e in sink.events if e.type == "child"]
    assert spawned == ["pricer", "checker"]
    refused = [e.data for e in sink.events if e.type == "error" and e.data.get("code") == "ERR_CONSTRAINT_VIOLATION"]
    assert refused == []


def test_planned_children_share_their_parents_budget_as_the_tree_editor_counts_it() -> None:
    from delegations.protocol.lint import lint_packet

    first = {**PRICER, "budget": {"max_model_calls": 30}}
    second = {**PRICER, "label": "second", "budget": {"max_model_calls": 25}}
    findings = lint_packet(parse_packet(root_packet(capabilities=["search"], planned_children=[first, second])))
    over = {f.field: f.message for f in findings if f.code == "BUDGET_EXCEEDS_PARENT"}
    # 50 calls: the first leaves 20 for the second, the second 25 for the first
    assert "at most 20 model calls" in over["planned_children[1].budget.max_model_calls"]
    assert "at most 25 model calls" in over["planned_children[0].budget.max_model_calls"]


def _readme_script() -> dict[str, Any]:
    import json
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## The scripted adapter", 1)[1]
    match = re.search(r"```json\n(.*?)```", section, re.DOTALL)
    assert match is not None, "README's scripted adapter section has no JSON example"
    script: dict[str, Any] = json.loads(match.group(1))
    return script


async def test_the_readmes_scripted_example_runs_a_tree_and_a_misspelt_key_names_its_path(
        runner: Runner, sink: MemorySink) -> None:
    script = _readme_script()
    prices = {"label": "prices", "goal": "Read the price and currency from the quote",
              "instruction_set": "Read them.", "timeout_s": 10}
    outcome = await runner.start(parse_packet(root_packet(planned_children=[prices])),
                                 adapter=ScriptedAdapter(script))
    assert outcome.state is RunState.COMPLETE, outcome.error
    [child] = [e.data for e in sink.events if e.type == "child"]
    assert child["planned"] is True and child["packet"]["input_data"] == {"quote": "Headphones, 279.99 USD"}
    turn = script["children"]["prices"]["script"][0]
    turn["tool_call"] = turn.pop("tool_calls")
    with pytest.raises(ProtocolError) as refused:
        ScriptedAdapter(script)
    assert "config 'children.prices.script[0].tool_call' is not a known turn key" in refused.value.message
