"""Unsure goes to a person, with the work done: a result that fails only a ``confident``
criterion (or one marked ``review``) parks as a review item; a person confirms it,
corrects it within the schema, or fails it, and the run ends with their decision, audited.
A model that gives no probabilities never passes ``confident`` silently."""

from __future__ import annotations

from typing import Any

from delegations.protocol.adapters.scripted import ScriptedAdapter
from delegations.protocol.approvals import ApprovalDecision, ApprovalKind, Decision
from delegations.protocol.checkpoints import MemoryCheckpointStore
from delegations.protocol.events import MemorySink
from delegations.protocol.lifecycle import RunState
from delegations.protocol.runner import Runner

from .conftest import ParkingGate, root_packet, yield_turn

SCHEMA = {"type": "object", "required": ["evidence", "sentiment"],
          "properties": {"evidence": {"type": "string"},
                         "sentiment": {"type": "string", "enum": ["positive", "negative", "mixed"]}}}
REVIEW = "The kettle is loud, but it boils in a minute."
UNSURE = {"sentiment": {"value": "mixed", "probability": 0.55, "calibrated": True,
                        "alternatives": [{"value": "negative", "probability": 0.3},
                                         {"value": "positive", "probability": 0.15}]}}
SURE = {"sentiment": {**UNSURE["sentiment"], "probability": 0.93}}


def packet(*criteria: Any) -> dict[str, Any]:
    return root_packet(goal="Classify the review.", input_data={"review": REVIEW},
                       expected_output_schema=SCHEMA, success_criteria=[
                           "`evidence` is quoted from `review`",
                           {"kind": "confident", "path": "sentiment", "min": 0.8}, *criteria])


def answering(payload: dict[str, Any], scores: dict[str, Any] | None = None) -> ScriptedAdapter:
    turn = yield_turn(payload)
    if scores is not None:
        turn["label_scores"] = scores
    return ScriptedAdapter({"script": [turn, turn]})


MIXED = {"evidence": "loud, but it boils in a minute", "sentiment": "mixed"}


def parked_runner(sink: MemorySink, settings: Any) -> tuple[Runner, ParkingGate, MemoryCheckpointStore]:
    gate, store = ParkingGate(), MemoryCheckpointStore()
    return Runner(sink=sink, gate=gate, checkpoints=store, settings=settings), gate, store


async def test_a_sure_label_completes_and_its_probability_is_in_the_result(runner: Runner) -> None:
    outcome = await runner.start(packet(), adapter=answering(MIXED, SURE))
    assert outcome.state is RunState.COMPLETE
    assert outcome.result is not None
    assert outcome.result.metrics["labels"]["sentiment"]["probability"] == 0.93
    report = outcome.criteria_report or {}
    assert report["summary"] == "all met"
    assert "with probability 93 % (at least 80 %)" in report["items"][1]["detail"]


async def test_an_unsure_label_parks_as_a_review_item_showing_what_a_person_needs(
        sink: MemorySink, settings: Any) -> None:
    runner, gate, _ = parked_runner(sink, settings)
    outcome = await runner.start(packet(), adapter=answering(MIXED, UNSURE))
    assert outcome.state is RunState.AWAITING_APPROVAL
    [request] = gate.asked
    assert request.kind is ApprovalKind.REVIEW
    assert request.title.startswith("Review sentiment of researcher:")
    assert 'the model proposes sentiment = "mixed" (55 %)' in request.title
    [field] = request.payload["fields"]
    assert field["proposed"] == "mixed" and field["probability"] == 0.55
    assert field["choices"] == ["positive", "negative", "mixed"]
    assert [alt["value"] for alt in field["alternatives"]] == ["negative", "positive"]
    assert request.payload["input"] == {"review": REVIEW}
    # the model was not sent back to guess again: one model call
    assert sum(1 for event in sink.of_type("model_call")) == 1


async def decided(sink: MemorySink, settings: Any, decision: ApprovalDecision) -> Any:
    runner, gate, store = parked_runner(sink, settings)
    outcome = await runner.start(packet(), adapter=answering(MIXED, UNSURE))
    [request] = gate.asked
    gate.decide_key(request.key, decision)
    resumed = Runner(sink=sink, gate=gate, checkpoints=store, settings=settings)
    return await resumed.resume(outcome.run_id, adapter=answering(MIXED, UNSURE))


async def test_a_person_who_corrects_the_label_completes_the_run_with_their_value(
        sink: MemorySink, settings: Any) -> None:
    outcome = await decided(sink, settings, ApprovalDecision(
        Decision.EDIT, edited_arguments={"sentiment": "negative"}, decided_by="ana"))
    assert outcome.state is RunState.COMPLETE
    assert outcome.result.output_payload == {**MIXED, "sentiment": "negative"}
    review = outcome.result.metrics["review"]
    assert review["decided_by"] == "ana" and review["decision"] == "corrected"
    assert review["fields"] == {"sentiment": {"proposed": "mixed", "value": "negative"}}
    report = outcome.criteria_report
    assert report["summary"] == "all met"
    assert 'set (the model proposed "mixed") by ana in review' in report["items"][1]["detail"]
    logs = [event.data["message"] for event in sink.of_type("log")]
    assert 'ana corrected sentiment "mixed" -> "negative" in review.' in logs


async def test_a_person_who_confirms_completes_the_run_with_the_proposed_value(
        sink: MemorySink, settings: Any) -> None:
    outcome = await decided(sink, settings, ApprovalDecision(Decision.APPROVE, decided_by="ana"))
    assert outcome.state is RunState.COMPLETE
    assert outcome.result.output_payload == MIXED
    assert outcome.result.metrics["review"]["decision"] == "confirmed"
    assert "confirmed by ana in review; the model's probability was 55 %" in \
        outcome.criteria_report["items"][1]["detail"]


async def test_a_person_who_fails_it_ends_the_run_failed_with_their_reason(
        sink: MemorySink, settings: Any) -> None:
    outcome = await decided(sink, settings, ApprovalDecision(Decision.REJECT, comment="Sarcasm.",
                                                             decided_by="ana"))
    assert outcome.state is RunState.FAILED
    assert outcome.error == {"code": "ERR_INVALID_RESULT", "message": "Failed in review by ana: Sarcasm."}


async def test_a_correction_outside_the_schema_fails_the_run_saying_why(
        sink: MemorySink, settings: Any) -> None:
    outcome = await decided(sink, settings, ApprovalDecision(
        Decision.EDIT, edited_arguments={"sentiment": "furious"}, decided_by="ana"))
    assert outcome.state is RunState.FAILED
    assert "do not fit the output schema" in outcome.error["message"]
    assert "'furious' is not one of" in outcome.error["message"]


async def test_an_automatic_gate_never_confirms_a_value_nobody_looked_at(runner: Runner) -> None:
    outcome = await runner.start(packet(), adapter=answering(MIXED, UNSURE))
    assert outcome.state is RunState.FAILED
    assert outcome.error["message"] == "Failed in review by auto: automatic."


async def test_a_model_that_gives_no_probabilities_never_passes_confident_silently(runner: Runner) -> None:
    outcome = await runner.start(packet(), adapter=answering(MIXED))
    assert outcome.state is RunState.COMPLETE
    report = outcome.criteria_report
    assert not report["all_met"] and report["summary"] == "1 of 2 criteria met"
    confident = report["items"][1]
    assert confident["checkable"] is False
    assert "cannot be checked with this model" in confident["detail"]


async def test_probabilities_a_model_writes_itself_are_not_taken(runner: Runner) -> None:
    boasting = yield_turn(MIXED, metrics={"labels": SURE})
    outcome = await runner.start(packet(), adapter=ScriptedAdapter({"script": [boasting, boasting]}))
    assert "labels" not in (outcome.result.metrics if outcome.result else {})
    assert "cannot be checked with this model" in outcome.criteria_report["items"][1]["detail"]


async def test_a_criterion_a_skill_marks_review_goes_to_a_person_instead_of_a_correction(
        sink: MemorySink, settings: Any) -> None:
    runner, gate, _ = parked_runner(sink, settings)
    review_marked = {"kind": "regex", "field": "evidence", "pattern": "boils", "review": True}
    outcome = await runner.start(packet(review_marked),
                                 adapter=answering({**MIXED, "evidence": "The kettle is loud"}, SURE))
    assert outcome.state is RunState.AWAITING_APPROVAL
    [request] = gate.asked
    assert [field["field"] for field in request.payload["fields"]] == ["evidence"]


async def test_a_result_that_also_fails_another_criterion_gets_the_correction_turn_first(
        sink: MemorySink, settings: Any) -> None:
    runner, gate, _ = parked_runner(sink, settings)
    paraphrase = {**MIXED, "evidence": "it is noisy"}
    outcome = await runner.start(packet(), adapter=ScriptedAdapter({"script": [
        {**yield_turn(paraphrase), "label_scores": UNSURE}, {**yield_turn(MIXED), "label_scores": UNSURE}]}))
    corrections = [event for event in sink.of_type("log") if event.data.get("message") == "Self-correction turn."]
    assert len(corrections) == 1
    assert outcome.state is RunState.AWAITING_APPROVAL and gate.asked[0].kind is ApprovalKind.REVIEW


async def test_a_verifier_is_held_to_being_sure_of_its_verdict(runner: Runner) -> None:
    verdict_schema = {"type": "object", "required": ["verdict"],
                      "properties": {"verdict": {"type": "string", "enum": ["PASS", "FAIL"]}}}
    outcome = await runner.start(root_packet(
        subagent_type="verifier", expected_output_schema=verdict_schema,
        success_criteria=["JSON is schema-valid"],
        input_data={"acceptance_criteria": ["All tests pass"], "execution_report": "2 failed."}),
        adapter=answering({"verdict": "FAIL"}, {"verdict": {"value": "FAIL", "probability": 0.91}}))
    assert outcome.state is RunState.COMPLETE
    kinds = [item["kind"] for item in outcome.criteria_report["items"]]
    assert kinds == ["json_schema", "confident"]


async def test_a_run_named_by_neither_label_nor_role_is_named_by_its_goal_in_its_item(
        sink: MemorySink, settings: Any) -> None:
    runner, gate, _ = parked_runner(sink, settings)
    unnamed = {key: value for key, value in packet().items() if key not in ("subagent_type", "label")}
    await runner.start(unnamed, adapter=answering(MIXED, UNSURE))
    [request] = gate.asked
    assert request.title.startswith("Review sentiment of “Classify the review.”:"), request.title   # not "of root"
