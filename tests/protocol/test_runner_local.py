"""The real runner driving the real local model (SmolLM2-135M through llama-cpp-python).

Asserts on structure, never on wording: a 135M model's prose changes with any llama.cpp
update, but the run must still COMPLETE with a payload valid against the packet's
expected output schema (the offered ``yield_control`` carries that schema, so the local
adapter's constrained decoding writes a valid payload), metered and reported in events.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest

from delegations.protocol.adapters.local import LocalAdapter
from delegations.protocol.adapters.local_models import DEFAULT_LOCAL_MODEL
from delegations.protocol.events import MemorySink
from delegations.protocol.lifecycle import RunState
from delegations.protocol.packet import parse_packet
from delegations.protocol.results import ResultStatus
from delegations.protocol.runner import Runner

from .conftest import root_packet

pytestmark = pytest.mark.local_model

# Fixed seed and a low temperature: the same answer every time on the same llama.cpp
# build. max_tokens bounds a rambling log_summary (the payload comes first in the schema).
ADAPTER_CONFIG = {"seed": 5, "temperature": 0.1, "max_tokens": 160}

CITY = root_packet(
    goal="Report the city and its population from the input data",
    instruction_set="You are a researcher subagent. Read the input data and hand back the "
                    "city and its population with yield_control.",
    input_data={"city": "Lyon", "population": 522000},
    expected_output={"city": "string", "population": "integer"},
    success_criteria=["JSON is schema-valid"],
    max_depth=0,  # a leaf: nothing to delegate, the model's one move is to answer
    timeout_s=180,
    budget={"max_model_calls": 4, "max_tokens": 20000},
)
ANSWER = root_packet(
    goal="Compute the product of the two numbers in the input data",
    instruction_set="You are an executor subagent. Multiply a by b and hand back the "
                    "product as answer with yield_control.",
    subagent_type="executor",
    input_data={"a": 6, "b": 7},
    expected_output={"answer": "integer", "explanation": "string"},
    success_criteria=["JSON is schema-valid"],
    max_depth=0,
    timeout_s=180,
    budget={"max_model_calls": 4, "max_tokens": 20000},
)


@pytest.mark.parametrize("packet", [CITY, ANSWER], ids=["city", "answer"])
async def test_a_run_on_the_local_model_completes_with_a_schema_valid_result(
        gguf: Path, runner: Runner, sink: MemorySink, packet: dict[str, Any]) -> None:
    parsed = parse_packet(packet)
    schema = parsed.expected_output_schema
    assert schema is not None

    outcome = await runner.start(parsed, adapter=LocalAdapter(ADAPTER_CONFIG))

    assert outcome.state is RunState.COMPLETE, outcome.error
    result = outcome.result
    assert result is not None
    assert result.status in (ResultStatus.SUCCESS, ResultStatus.PARTIAL_COMPLETION)
    jsonschema.validate(result.output_payload, schema)
    assert set(result.output_payload) >= set(schema["required"])

    events = sink.of_run(outcome.run_id)
    calls = [event.data for event in events if event.type == "model_call"]
    assert len(calls) >= 1
    assert all(call["model"] == f"local/{DEFAULT_LOCAL_MODEL}" for call in calls)
    assert all(call["input_tokens"] > 0 and call["output_tokens"] > 0 for call in calls)
    states = [event.data["state"] for event in events if event.type == "state"]
    assert states == ["PENDING", "ACCEPTED", "WORKING", "COMPLETE"]
    final = events[-1]
    assert final.type == "result" and final.data["state"] == "COMPLETE"
    usage = final.data["usage"]
    assert usage["model_calls"] == len(calls) >= 1
    assert usage["input_tokens"] == sum(call["input_tokens"] for call in calls)
    assert usage["output_tokens"] == sum(call["output_tokens"] for call in calls) > 0
    report = final.data["criteria_report"]
    assert report is not None and report["all_met"]
    assert [item["kind"] for item in report["items"]] == ["json_schema"]


async def test_a_local_run_with_fs_read_hands_back_a_result_on_its_forced_last_turn(
        gguf: Path, runner: Runner, sink: MemorySink, tmp_path: Path) -> None:
    # the case: a small model that would list made-up folders until its turns ran out
    packet = root_packet(
        goal="Find the file that names the project and report its name",
        instruction_set="You are a researcher subagent. Look through the workspace files.",
        capabilities=["fs_read"], max_depth=0, max_iterations=2, timeout_s=180,
        budget={"max_model_calls": 4, "max_tokens": 20000})
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "README.md").write_text("The project is called Handoff.\n")

    outcome = await runner.start(parse_packet(packet), adapter=LocalAdapter(ADAPTER_CONFIG),
                                 workspace=workspace)

    assert outcome.result is not None, outcome.error
    final = sink.of_run(outcome.run_id)[-1]
    assert final.type == "result" and final.data["result"] is not None
    calls = [event.data for event in sink.of_run(outcome.run_id) if event.type == "model_call"]
    assert len(calls) <= 2
    yields = [event.data for event in sink.of_run(outcome.run_id)
              if event.type == "log" and event.data.get("last_turn")]
    if len(calls) == 2:
        assert len(yields) == 1   # the second call was the forced last turn
