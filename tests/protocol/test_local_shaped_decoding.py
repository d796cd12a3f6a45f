"""Criteria shape decoding on the local model: the request the adapter sends its host holds
quote, choice and number fields to what the criteria allow, and a source with nothing in it
fails the call with ERR_INSUFFICIENT_CONTEXT naming it; on the real model a quote is copied
by construction and a label comes back with its probability."""

from __future__ import annotations

from typing import Any

import pytest

from delegations.protocol.adapters.local import LocalAdapter
from delegations.protocol.adapters.quote_grammar import placeholder
from delegations.protocol.criteria.shaping import output_shapes
from delegations.protocol.errors import ErrorCode, ProtocolError
from delegations.protocol.events import MemorySink
from delegations.protocol.lifecycle import RunState
from delegations.protocol.runner import Runner
from delegations.protocol.tool_schemas import yield_control_for

from .conftest import local_model_or_skip, root_packet

SCHEMA = {"type": "object", "required": ["evidence", "sentiment", "price"],
          "properties": {"evidence": {"type": "string"}, "price": {"type": "number"},
                         "sentiment": {"type": "string", "enum": ["positive", "negative", "mixed"]}}}
CRITERIA = ["`evidence` is quoted from `review`", "`price` appears in `review`"]


def shaped_tool(input_data: dict[str, Any]) -> dict[str, Any]:
    shapes = output_shapes(CRITERIA, SCHEMA, input_data)
    return {**yield_control_for(SCHEMA), "output_shapes": shapes.as_dict()}


def payload_schema(request: dict[str, Any]) -> dict[str, Any]:
    arguments = request["schema"]["properties"]["arguments"]
    result = arguments["anyOf"][0]
    return dict(result["properties"]["output_payload"]["properties"])


def test_the_host_is_asked_for_a_quote_a_number_from_the_input_and_a_scored_label() -> None:
    review = "Paid 49,90 for it and it broke."
    request = LocalAdapter({"model": "gemma3-270m"})._shaped([shaped_tool({"review": review})])
    fields = payload_schema(request)
    assert fields["evidence"] == {"const": placeholder(0)}
    assert request["quotes"] == [[placeholder(0), review, False]]
    assert fields["price"] == {"enum": [49.9, 4990]}
    assert request["labels"] == {"sentiment": ["positive", "negative", "mixed"]}
    assert request["label_prompts"]["sentiment"]["content_free"].endswith("review: N/A\nsentiment:")


@pytest.mark.parametrize("review", ["", None])
def test_an_empty_source_fails_with_insufficient_context_naming_it(review: str | None) -> None:
    with pytest.raises(ProtocolError) as caught:
        LocalAdapter({"model": "gemma3-270m"})._shaped([shaped_tool({"review": review})])
    assert caught.value.code is ErrorCode.INSUFFICIENT_CONTEXT
    assert caught.value.message.startswith("The input has no review (or it is empty), and the success "
                                           "criteria say evidence, price must come from it")
    assert caught.value.details == {"missing_inputs": ["review"]}


def test_with_another_tool_offered_the_model_may_still_do_something_else_first() -> None:
    other = {"name": "read_file", "description": "Read a file.",
             "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}
    request = LocalAdapter({"model": "gemma3-270m"})._shaped([shaped_tool({"review": ""}), other])
    assert "anyOf" in request["schema"]


@pytest.mark.local_model
async def test_on_the_real_model_a_quote_is_copied_and_the_label_comes_with_its_probability(
        runner: Runner, sink: MemorySink) -> None:
    local_model_or_skip("gemma3-270m")
    review = "The drill is powerful, but the battery pack overheats after ten minutes of use."
    schema = {"type": "object", "required": ["evidence", "sentiment"],
              "properties": {"evidence": SCHEMA["properties"]["evidence"],
                             "sentiment": SCHEMA["properties"]["sentiment"]}}
    packet = root_packet(goal="Classify the review.", input_data={"review": review},
                         instruction_set="Classify the review as positive, negative or mixed, and quote "
                                         "the words of the review that decided it in evidence.",
                         expected_output_schema=schema, success_criteria=["`evidence` is quoted from `review`"],
                         max_depth=0, timeout_s=240)
    outcome = await runner.start(packet, adapter=LocalAdapter({"model": "gemma3-270m", "seed": 1}))
    assert outcome.state is RunState.COMPLETE, outcome.error
    assert outcome.result is not None
    evidence = outcome.result.output_payload["evidence"]
    assert evidence and evidence in review
    score = outcome.result.metrics["labels"]["sentiment"]
    assert score["value"] == outcome.result.output_payload["sentiment"]
    assert 0 < score["probability"] <= 1 and score["calibrated"] is True
    assert {alt["value"] for alt in score["alternatives"]} | {score["value"]} == {"positive", "negative", "mixed"}
    assert outcome.criteria_report["fields_unchecked"] == ["sentiment"]


@pytest.mark.local_model
async def test_on_the_real_model_an_empty_input_fails_the_run_naming_it(runner: Runner) -> None:
    local_model_or_skip("gemma3-270m")
    packet = root_packet(goal="Quote the review.", input_data={"review": "", "note": "x"},
                         expected_output_schema={"type": "object", "required": ["evidence"],
                                                 "properties": {"evidence": {"type": "string"}}},
                         success_criteria=["`evidence` is quoted from `review`"], max_depth=0, timeout_s=240)
    outcome = await runner.start(packet, adapter=LocalAdapter({"model": "gemma3-270m", "seed": 1}))
    assert outcome.state is RunState.FAILED
    assert outcome.error["code"] == "ERR_INSUFFICIENT_CONTEXT"
    assert "The input has no review" in outcome.error["message"]


@pytest.mark.local_model
async def test_on_the_real_model_a_passage_with_quote_marks_is_answered_from_its_spans(runner: Runner) -> None:
    # the answer's spans are an enum of the passage's pieces: a piece holding a quote mark
    # made llama-cpp-python's converter write a grammar that does not parse (every such run
    # failed with "did not make a valid grammar"), and non-ASCII was written as \u escapes
    local_model_or_skip("gemma3-270m")
    context = 'The sign at the entrance said "Open daily". The bridge opened on 4 May 1911 in Tórshavn.'
    schema = {"type": "object", "required": ["answer", "evidence"],
              "properties": {"answer": {"type": "string"}, "evidence": {"type": "string"}}}
    packet = root_packet(goal="When did the bridge open?", input_data={"context": context},
                         instruction_set="Answer from the context and quote the sentence that says so.",
                         expected_output_schema=schema,
                         success_criteria=["`evidence` is quoted from `context`", "`answer` appears in `context`"],
                         max_depth=0, timeout_s=240)
    outcome = await runner.start(packet, adapter=LocalAdapter({"model": "gemma3-270m", "seed": 1}))
    assert outcome.state is RunState.COMPLETE, outcome.error
    assert outcome.result is not None
    assert outcome.result.output_payload["answer"] in context
    assert outcome.result.output_payload["evidence"] in context
