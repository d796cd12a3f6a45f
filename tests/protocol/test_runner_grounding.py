"""Grounding criteria in a run: a copied or invented value fails them like any unmet
criterion (self-correction turn, then FAILED), a skill's own criteria apply to every run
of it, and an input the criteria check against but the run lacks is named as missing."""

from __future__ import annotations

from typing import Any

from delegations.protocol.adapters.scripted import ScriptedAdapter
from delegations.protocol.approvals import ApprovalKind, AutoGate
from delegations.protocol.events import MemorySink
from delegations.protocol.lifecycle import RunState
from delegations.protocol.manifest import SkillManifest, load_manifest
from delegations.protocol.runner import Runner

from .conftest import root_packet, yield_turn

QUOTE_READER: dict[str, Any] = {
    "skill_name": "quote-reader", "version": "1.0.0", "entry_point": "instructions.md",
    "instructions": "Read the price from quote_text.", "subagent_type": "researcher",
    "capabilities": [],
    "input_schema": {"type": "object", "required": ["query"],
                     "properties": {"query": {"type": "string"}, "quote_text": {"type": "string"}}},
    "output_schema": {"type": "object", "required": ["price", "currency"],
                      "properties": {"price": {"type": "number"}, "currency": {"type": "string"}}},
    "success_criteria": ["`price` appears in `quote_text`", "`currency` appears in `quote_text`"],
}


def with_skill(runner: Runner) -> Runner:
    manifest = load_manifest(QUOTE_READER)

    async def resolve(ref: str) -> SkillManifest | None:
        return manifest
    runner.skills = resolve
    return runner


def packet(**input_data: str) -> dict[str, Any]:
    return root_packet(skill="quote-reader", instruction_set=None, success_criteria=[],
                       goal="Report the price in the quote.", input_data={"query": "Headphones", **input_data})


def answering(*payloads: dict[str, Any]) -> ScriptedAdapter:
    return ScriptedAdapter({"script": [yield_turn(payload) for payload in payloads]})


async def test_a_value_found_in_the_quote_completes_with_every_criterion_met(runner: Runner) -> None:
    outcome = await with_skill(runner).start(packet(quote_text="Now $279.99, was $329."),
                                             adapter=answering({"price": 279.99, "currency": "USD"}))
    assert outcome.state is RunState.COMPLETE
    report = outcome.criteria_report or {}
    assert report["all_met"] and [item["criterion"] for item in report["items"]] == QUOTE_READER["success_criteria"]


async def test_a_copied_example_is_corrected_once_then_fails_visibly(runner: Runner, sink: MemorySink) -> None:
    copied = {"price": 189.84, "currency": "USD"}
    outcome = await with_skill(runner).start(packet(quote_text="Now $279.99."), adapter=answering(copied, copied))
    assert outcome.state is RunState.FAILED
    assert outcome.error is not None and outcome.error["code"] == "ERR_INVALID_RESULT"
    assert 'output_payload.price = 189.84, but "189.84" is not in quote_text' in outcome.error["message"]
    assert not (outcome.criteria_report or {}).get("all_met")
    corrections = [event for event in sink.of_run(outcome.run_id)
                   if event.type == "log" and event.data.get("message") == "Self-correction turn."]
    assert len(corrections) == 1


async def test_the_correction_turn_can_put_it_right(runner: Runner) -> None:
    outcome = await with_skill(runner).start(packet(quote_text="Ticker: 71,40 € a barrel"), adapter=answering(
        {"price": 172.5, "currency": "EUR"}, {"price": 71.4, "currency": "EUR"}))
    assert outcome.state is RunState.COMPLETE


async def test_without_the_quote_an_invented_price_fails_naming_the_missing_input(runner: Runner) -> None:
    invented = {"price": 2915, "currency": "JPY"}
    outcome = await with_skill(runner).start(packet(), adapter=answering(invented, invented))
    assert outcome.state is RunState.FAILED
    assert outcome.error is not None and outcome.error["code"] == "ERR_INSUFFICIENT_CONTEXT"
    assert outcome.error["message"].startswith(
        "The input lacks quote_text, which the success criteria check the answer against; give it and run again.")
    assert outcome.result is not None and outcome.result.error_report is not None
    assert outcome.result.error_report.details["missing_inputs"] == ["quote_text"]


async def test_without_the_quote_the_correction_turn_says_so_and_the_model_may_ask(
        runner: Runner, gate: AutoGate) -> None:
    seen: list[str] = []

    class Reading(ScriptedAdapter):
        async def complete(self, messages: Any, tools: Any, **options: Any) -> Any:
            seen.append(str(messages[-1].get("content")))
            return await super().complete(messages, tools, **options)

    asking = Reading({"script": [
        yield_turn({"price": 2915, "currency": "JPY"}),
        yield_turn({}, status="BLOCKED_AWAITING_CLARIFICATION", open_questions=["Paste the quote, please."]),
        yield_turn({}, status="FAILURE", error_report={"code": "ERR_INSUFFICIENT_CONTEXT",
                                                       "message": "No quote_text was given."})]})
    outcome = await with_skill(runner).start(packet(), adapter=asking)
    assert "The input has no quote_text: do not guess" in seen[1]
    assert [request.kind for request in gate.asked] == [ApprovalKind.CLARIFICATION]
    assert outcome.state is RunState.FAILED
    assert outcome.error is not None and outcome.error["code"] == "ERR_INSUFFICIENT_CONTEXT"


def test_a_small_models_compact_prompt_leaves_the_grounding_checks_out_and_the_full_one_states_them() -> None:
    from delegations.protocol.packet import parse_packet
    from delegations.protocol.runner.prompt import initial_messages

    parsed = parse_packet({**packet(quote_text="$1"), "success_criteria": [
        *QUOTE_READER["success_criteria"], "Word count < 50"]})
    compact = initial_messages(parsed, parsed.to_dict(), compact=True)[0]["content"]
    full = initial_messages(parsed, parsed.to_dict())[0]["content"]
    assert "appears in" not in compact and "- Word count < 50" in compact
    assert "- `price` appears in `quote_text`" in full
