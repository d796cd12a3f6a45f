"""Skills in the runner: a child's skill resolved and pinned, refused when it cannot run,
and a skill's own approval rule kept even where the deployment's setting leaves it out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import respx

from delegations.protocol.adapters.scripted import ScriptedAdapter
from delegations.protocol.approvals import ApprovalDecision, AutoGate, Decision
from delegations.protocol.checkpoints import MemoryCheckpointStore
from delegations.protocol.errors import ErrorCode, ProtocolError
from delegations.protocol.events import MemorySink
from delegations.protocol.lifecycle import RunState
from delegations.protocol.manifest import SkillManifest, load_manifest
from delegations.protocol.packet import parse_packet
from delegations.protocol.runner import Runner, RunnerSettings, SkillResolver

from .conftest import ParkingGate, call_turn, root_packet, yield_turn

PRICE_RESEARCH: dict[str, Any] = {
    "skill_name": "price-research", "version": "1.1.0", "entry_point": "instructions.md",
    "instructions": "Look the price up and hand it back.", "subagent_type": "researcher",
    "requires_approval": True, "capabilities": ["network_outbound", "search"],
    "input_schema": {"type": "object", "required": ["query"],
                     "properties": {"query": {"type": "string", "minLength": 1}}},
    "output_schema": {"type": "object", "properties": {"price": {"type": "number"}}},
}
URL = "https://example.org/quote"


def price_research() -> SkillManifest:
    return load_manifest(PRICE_RESEARCH)


def registry(found: SkillManifest | None = None, *, refuse: str = "",
             asked: list[str] | None = None) -> SkillResolver:
    """A resolver that answers every ref with ``found`` (or refuses it with ``refuse``)."""
    async def resolve(ref: str) -> SkillManifest | None:
        if asked is not None:
            asked.append(ref)
        if refuse:
            raise ProtocolError(ErrorCode.INVALID_PACKET, refuse)
        return found
    return resolve


def delegating_to_price_research(child_script: list[dict[str, Any]]) -> ScriptedAdapter:
    arguments = {"label": "pricer", "skill": "price-research", "goal": "Price TSLA",
                 "input_data": {"query": "Current price of TSLA"}}
    return ScriptedAdapter({"script": [call_turn("delegate_task", arguments), yield_turn()],
                            "children": {"pricer": {"script": child_script}}})


def child_id(sink: MemorySink, run_id: str) -> str:
    [event] = [e for e in sink.of_run(run_id) if e.type == "child"]
    return str(event.data["child_run_id"])


def pending_event(sink: MemorySink, run_id: str) -> dict[str, Any]:
    return next(e.data for e in sink.of_run(run_id) if e.type == "state")


async def test_a_child_naming_a_skill_by_name_runs_pinned_to_the_version_resolved(
        sink: MemorySink, store: MemoryCheckpointStore, settings: RunnerSettings) -> None:
    asked: list[str] = []
    runner = Runner(sink=sink, gate=AutoGate(), checkpoints=store, settings=settings,
                    skills=registry(price_research(), asked=asked))
    adapter = delegating_to_price_research([yield_turn({"price": 175.22})])
    outcome = await runner.start(parse_packet(root_packet(capabilities=["network_outbound", "search"])),
                                 adapter=adapter)
    child = child_id(sink, outcome.run_id)
    assert store.checkpoints[child].state == "COMPLETE"
    assert asked == ["price-research"]
    assert pending_event(sink, child)["skill"] == "price-research@1.1.0"
    assert store.checkpoints[child].packet["skill"] == "price-research@1.1.0"
    assert store.checkpoints[child].packet["instruction_set"] == PRICE_RESEARCH["instructions"]


async def test_a_host_given_skill_pins_the_root_packet_too(
        sink: MemorySink, store: MemoryCheckpointStore, settings: RunnerSettings) -> None:
    runner = Runner(sink=sink, gate=AutoGate(), checkpoints=store, settings=settings)
    packet = parse_packet(root_packet(skill="price-research", input_data={"query": "TSLA"}))
    outcome = await runner.start(packet, adapter=ScriptedAdapter({"script": [yield_turn({"price": 1.0})]}),
                                 skill=price_research())
    assert outcome.state is RunState.COMPLETE, outcome.error
    assert store.checkpoints[outcome.run_id].packet["skill"] == "price-research@1.1.0"


async def test_a_child_whose_skill_the_registry_refuses_is_rejected_with_the_registrys_message(
        sink: MemorySink, store: MemoryCheckpointStore, settings: RunnerSettings) -> None:
    why = "skill: skill price-research@1.1.0's instruction file instructions.md is missing from its bundle"
    runner = Runner(sink=sink, gate=AutoGate(), checkpoints=store, settings=settings,
                    skills=registry(refuse=why))
    adapter = delegating_to_price_research([yield_turn({"price": 175.22})])
    outcome = await runner.start(parse_packet(root_packet()), adapter=adapter)
    child = child_id(sink, outcome.run_id)
    [result] = [e.data for e in sink.of_run(child) if e.type == "result"]
    assert result["state"] == "REJECTED"
    assert result["error"] == {"code": "ERR_INVALID_PACKET", "message": why}
    assert not [e for e in sink.of_run(child) if e.type == "model_call"]   # it never ran


async def test_a_skill_the_registry_lacks_still_rejects_the_child_naming_it(
        sink: MemorySink, store: MemoryCheckpointStore, settings: RunnerSettings) -> None:
    runner = Runner(sink=sink, gate=AutoGate(), checkpoints=store, settings=settings, skills=registry())
    outcome = await runner.start(parse_packet(root_packet()), adapter=delegating_to_price_research([]))
    child = child_id(sink, outcome.run_id)
    [result] = [e.data for e in sink.of_run(child) if e.type == "result"]
    assert result["state"] == "REJECTED" and "not in the registry" in result["error"]["message"]
    assert pending_event(sink, child)["skill"] == "price-research"


def no_approval_settings(tmp_path: Path) -> RunnerSettings:
    """A deployment whose setting leaves every capability out of the approval set."""
    return RunnerSettings(token_key=b"k" * 16, workspace_root=tmp_path / "runs", approval_required=frozenset())


@pytest.fixture
def quote() -> Any:
    """The quote page every approval test fetches, answered without the network."""
    with respx.mock:
            yield


def http_get_script() -> dict[str, Any]:
    return {"script": [call_turn("http_get", {"url": URL}), yield_turn({"price": 1.0})]}


@pytest.mark.usefixtures("quote")
async def test_a_skill_requiring_approval_sends_its_network_calls_to_the_gate_whatever_the_setting(
        sink: MemorySink, store: MemoryCheckpointStore, tmp_path: Path) -> None:
    gate = AutoGate()
    runner = Runner(sink=sink, gate=gate, checkpoints=store, settings=no_approval_settings(tmp_path))
    packet = parse_packet(root_packet(input_data={"query": "TSLA"}))
    outcome = await runner.start(packet, adapter=ScriptedAdapter(http_get_script()), skill=price_research())
    assert outcome.state is RunState.COMPLETE, outcome.error
    assert [(r.kind, r.payload["capability"]) for r in gate.asked] == [("capability", "network_outbound")]


@pytest.mark.usefixtures("quote")
async def test_without_such_a_skill_the_settings_approval_set_decides(
        sink: MemorySink, store: MemoryCheckpointStore, tmp_path: Path) -> None:
    gate = AutoGate()
    runner = Runner(sink=sink, gate=gate, checkpoints=store, settings=no_approval_settings(tmp_path))
    # a deployment that lets a skill use the network without approval
    relaxed = load_manifest({**PRICE_RESEARCH, "requires_approval": False}, approval_required=())
    for skill in (None, relaxed):
        packet = parse_packet(root_packet(capabilities=["network_outbound"], input_data={"query": "TSLA"}))
        outcome = await runner.start(packet, adapter=ScriptedAdapter(http_get_script()), skill=skill)
        assert outcome.state is RunState.COMPLETE, outcome.error
    assert gate.asked == []


@pytest.mark.usefixtures("quote")
async def test_a_child_of_a_run_whose_skill_requires_approval_asks_too(
        sink: MemorySink, store: MemoryCheckpointStore, tmp_path: Path) -> None:
    gate = AutoGate()
    runner = Runner(sink=sink, gate=gate, checkpoints=store, settings=no_approval_settings(tmp_path))
    child = {"label": "fetcher", "goal": "Fetch the quote", "instruction_set": "Fetch it.",
             "input_data": {"url": URL}}
    adapter = ScriptedAdapter({"script": [call_turn("delegate_task", child), yield_turn({"price": 1.0})],
                               "children": {"fetcher": http_get_script()}})
    # a run of a skill is a specialist: it delegates only when its packet allows nesting
    packet = parse_packet(root_packet(input_data={"query": "TSLA"}, allow_nested=True))
    outcome = await runner.start(packet, adapter=adapter, skill=price_research())
    assert outcome.state is RunState.COMPLETE, outcome.error
    [request] = gate.asked
    assert request.run_id == child_id(sink, outcome.run_id)


@pytest.mark.usefixtures("quote")
async def test_a_resumed_run_keeps_its_skills_approval_rule(
        sink: MemorySink, store: MemoryCheckpointStore, tmp_path: Path) -> None:
    gate = ParkingGate()
    runner = Runner(sink=sink, gate=gate, checkpoints=store, settings=no_approval_settings(tmp_path))
    packet = parse_packet(root_packet(input_data={"query": "TSLA"}))
    parked = await runner.start(packet, adapter=ScriptedAdapter(http_get_script()), skill=price_research())
    assert parked.state is RunState.AWAITING_APPROVAL and parked.parked is not None
    assert "network_outbound" in store.checkpoints[parked.run_id].approval_required
    gate.decide_key(parked.parked.key, ApprovalDecision(Decision.APPROVE))
    outcome = await runner.resume(parked.run_id)
    assert outcome.state is RunState.COMPLETE, outcome.error
    assert [r.key for r in gate.asked] == [parked.parked.key, parked.parked.key]


async def test_a_root_run_of_a_skill_is_not_offered_delegate_task_unless_nesting_is_allowed(
        sink: MemorySink, store: MemoryCheckpointStore, tmp_path: Path) -> None:
    runner = Runner(sink=sink, gate=AutoGate(), checkpoints=store, settings=no_approval_settings(tmp_path))
    offered: dict[bool, list[str]] = {}

    class ToolsSeen(ScriptedAdapter):
        async def complete(self, messages: Any, tools: Any, **options: Any) -> Any:
            offered[nested] = [tool["name"] for tool in tools]
            return await super().complete(messages, tools, **options)

    for nested in (False, True):
        adapter = ToolsSeen({"script": [yield_turn({"price": 1.0, "currency": "USD"})]})
        packet = parse_packet(root_packet(input_data={"query": "TSLA"}, allow_nested=nested))
        outcome = await runner.start(packet, adapter=adapter, skill=price_research())
        assert outcome.state is RunState.COMPLETE, outcome.error
    assert "delegate_task" not in offered[False]
    assert "delegate_task" in offered[True]
