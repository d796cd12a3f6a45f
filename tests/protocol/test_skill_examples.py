"""A skill's worked examples: checked against its schemas when it loads, shown to the model
as exchanges before the task, never counted as work the run did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from delegations.protocol.adapters.local import to_chat_messages
from delegations.protocol.adapters.model_host import fit_to_context
from delegations.protocol.adapters.scripted import ScriptedAdapter
from delegations.protocol.approvals import AutoGate
from delegations.protocol.checkpoints import MemoryCheckpointStore
from delegations.protocol.errors import ProtocolError
from delegations.protocol.events import MemorySink
from delegations.protocol.lifecycle import RunState
from delegations.protocol.manifest import validate_manifest
from delegations.protocol.packet import parse_packet
from delegations.protocol.runner import Runner, RunnerSettings
from delegations.protocol.runner.prompt import initial_messages

MANIFEST: dict[str, Any] = {
    "skill_name": "review-sentiment", "version": "1.0.0", "entry_point": "instructions.md",
    "instructions": "Classify the review.", "capabilities": [],
    "input_schema": {"type": "object", "properties": {"review": {"type": "string", "minLength": 1}},
                     "required": ["review"]},
    "output_schema": {"type": "object",
                      "properties": {"sentiment": {"enum": ["positive", "negative", "mixed"]}},
                      "required": ["sentiment"]},
    "examples": [
        {"input": {"review": "Broke after a week."}, "output": {"sentiment": "negative"}},
        {"input": {"review": "Lovely and fast."}, "output": {"sentiment": "positive"}},
    ],
}


def test_examples_load_with_the_manifest() -> None:
    skill = validate_manifest(MANIFEST)
    assert [example["output"]["sentiment"] for example in skill.examples] == ["negative", "positive"]
    assert skill.warnings == []   # a known field, not an unknown key kept as is


@pytest.mark.parametrize(("examples", "where", "says"), [
    ([{"input": {"review": ""}, "output": {"sentiment": "negative"}}], "examples[0].input.review",
     "non-empty"),
    ([{"input": {"review": "ok"}, "output": {"sentiment": "meh"}}], "examples[0].output.sentiment",
     "meh"),
    ([{"input": {"review": "ok"}}], "examples[0]", '"input" and "output"'),
    ({"input": {}}, "examples", "expected a list"),
    ([{"input": {"review": "ok"}, "output": {"sentiment": "mixed"}}] * 6, "examples", "at most 5"),
])
def test_an_example_the_skills_own_schemas_refuse_is_a_manifest_error(
        examples: Any, where: str, says: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        validate_manifest({**MANIFEST, "examples": examples})
    issue = caught.value.issues[0]
    assert issue.field == where
    assert says in issue.message


def test_the_model_reads_each_example_as_an_exchange_before_the_task() -> None:
    skill = validate_manifest(MANIFEST)
    packet = parse_packet({"skill": skill.ref, "goal": "Classify it",
                           "input_data": {"review": "Arrived cracked."}})
    messages = initial_messages(packet, packet.to_dict(), examples=skill.examples)
    roles = [message["role"] for message in messages]
    assert roles == ["system", "user", "assistant", "tool", "user", "assistant", "tool", "user"]
    assert '"Broke after a week."' in messages[1]["content"]
    [call] = messages[2]["tool_calls"]
    assert call["name"] == "yield_control"
    assert call["arguments"] == {"status": "SUCCESS", "output_payload": {"sentiment": "negative"}}
    assert messages[3]["tool_call_id"] == call["id"]
    assert all(message.get("example") for message in messages[1:-1])
    assert "Arrived cracked." in messages[-1]["content"] and not messages[-1].get("example")


def test_a_small_model_reads_them_as_input_then_answer_and_they_survive_fitting_the_context() -> None:
    skill = validate_manifest(MANIFEST)
    packet = parse_packet({"skill": skill.ref, "goal": "Classify it",
                           "input_data": {"review": "Arrived cracked."}})
    messages = initial_messages(packet, packet.to_dict(), examples=skill.examples, compact=True)
    messages += [{"role": "assistant", "content": "thinking " * 200},
                 {"role": "user", "content": "more " * 200}]
    chat = to_chat_messages(messages, [])
    assert [m["role"] for m in chat[:6]] == ["system", "user", "assistant", "user", "assistant", "user"]
    words = len   # one "token" per character is enough to force dropping
    fitted = fit_to_context(chat, words, sum(len(m["content"]) + 4 for m in chat[:6]) + 300, examples=2)
    assert fitted[:6] == chat[:6]   # the later turns went; the examples and the task stayed


def test_the_compact_prompt_lists_the_output_fields_instead_of_the_schema() -> None:
    packet = parse_packet({"goal": "Classify it", "input_data": {"review": "x"},
                           "success_criteria": [{"kind": "json_schema"}],
                           "expected_output_schema": MANIFEST["output_schema"]})
    compact = initial_messages(packet, packet.to_dict(), compact=True)[0]["content"]
    full = initial_messages(packet, packet.to_dict())[0]["content"]
    assert '- sentiment ("positive" or "negative" or "mixed")' in compact
    assert "JSON Schema" not in compact and "JSON Schema" in full
    assert len(compact) < len(full)


async def test_examples_are_not_counted_as_work_in_a_runner_written_failure(tmp_path: Path) -> None:
    runner = Runner(sink=MemorySink(), gate=AutoGate(), checkpoints=MemoryCheckpointStore(),
                    settings=RunnerSettings(token_key=b"examples-token-key-01", workspace_root=tmp_path))
    slow = ScriptedAdapter({"script": [{"text": "hmm", "delay_ms": 3000}]})
    packet = parse_packet({"skill": "review-sentiment@1.0.0", "goal": "Classify it",
                           "input_data": {"review": "Arrived cracked."}, "timeout_s": 0.2})
    outcome = await runner.start(packet, adapter=slow, skill=validate_manifest(MANIFEST))
    assert outcome.state is RunState.TIMEOUT
    assert outcome.result is not None and outcome.result.error_report is not None
    assert "Done so far: 0 model calls and no tool calls." in (outcome.result.summary or "")
    assert outcome.result.error_report.details["model_calls"] == 0
