"""The evaluation harness (``make eval``): its cases are sound, it scores what it says it
scores (on the scripted adapter, so it is fast), and one real case on the default local
model."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from delegations.protocol.adapters.scripted import ScriptedAdapter
from delegations.protocol.criteria import parse_criterion
from delegations.protocol.lint import Severity, lint_packet
from delegations.protocol.packet import parse_packet
from delegations.protocol.runner.acceptance import merge_skill
from tests.evals.harness import (
    PATHS,
    VISIBLE,
    WRONG_ALL_MET,
    BuiltinSkills,
    EvalCase,
    case_table,
    composer_packet,
    evaluate,
    load_cases,
    run_case,
    summary_table,
)

# a right answer for every case, as a person would give it
RIGHT: dict[str, dict[str, Any]] = {
    "price-usd": {"price": 175.22, "currency": "USD", "timestamp": "2023-11-01T14:30:00Z"},
    "price-eur": {"price": 71.4, "currency": "EUR"},
    "price-gbp": {"price": 38.61, "currency": "GBP"},
    "price-headphones": {"price": 279.99, "currency": "USD"},
    "price-no-quote": {},   # no price at all: it says the quote is missing (MISSING below)
    "review-negative": {"sentiment": "negative", "evidence": "arrived cracked"},
    "review-positive": {"sentiment": "positive", "evidence": "worked perfectly ever since"},
    "review-mixed": {"sentiment": "mixed", "evidence": "beautiful photos, but the app crashes"},
    "review-battery": {"sentiment": "negative", "evidence": "battery died after two days"},
    "context-year": {"answer": "1889", "evidence": "It was completed in 1889 for the World's Fair.",
                     "found": True},
    "context-absent": {"answer": "The context does not say.", "evidence": "", "found": False},
    "context-library": {"answer": "2011", "evidence": "The city library was founded in 2011.", "found": True},
    "pick-files": {"files_to_modify": ["accounts/views.py"]},
    "plan-3-steps": {"steps": ["Write a migration adding the column", "Set it on login",
                               "Show it in the admin"]},
    "critic-unsafe-plan": {"verdict": "REVISE",
                           "objection": "Step 1 deletes the files before they are copied."},
    "verifier-failed-tests": {"verdict": "FAIL", "reason": "2 tests failed."},
    "review-not-hoped": {"sentiment": "negative", "evidence": "the zipper split the first time"},
    "review-low-expectations": {"sentiment": "positive", "evidence": "the blender crushes ice in seconds"},
    "review-hotel-mixed": {"sentiment": "mixed", "evidence": "spotless and the staff were kind, although breakfast was cold"},
    "review-never-quiet": {"sentiment": "positive", "evidence": "Never owned a vacuum this quiet"},
    "context-name-windmill": {"answer": "Jan Wessels", "found": True,
                              "evidence": "Its first windmill was built in 1757 by the carpenter Jan Wessels."},
    "context-name-society": {"answer": "Marit Dahl", "found": True,
                             "evidence": "It was founded in 1923 by the schoolteacher Marit Dahl"},
    "context-long-quote": {"answer": "1,240", "found": True,
                           "evidence": "Today the gallery holds 1,240 paintings, most of them landscapes."},
    "price-in-a-note": {"price": 2031.5, "currency": "USD"},
    "verifier-all-passed": {"verdict": "PASS", "reason": "Both criteria are met."},
}


# the first worked example's answer of each skill: what a model that copies gives
COPIED: dict[str, dict[str, Any]] = {
    "price-research": {"price": 189.84, "currency": "USD"},
    "review-sentiment": {"evidence": "stopped charging after a week", "sentiment": "negative"},
    "context-answer": {"evidence": "", "answer": "The passage does not say.", "found": False},
}
MISSING = {"status": "FAILURE", "output_payload": {},
           "error_report": {"code": "ERR_INSUFFICIENT_CONTEXT", "message": "No quote_text to read the price from."}}


def answering(payload: dict[str, Any]) -> ScriptedAdapter:
    """A model that gives ``payload``, and gives it again in the self-correction turn."""
    turn = {"tool_calls": [{"name": "yield_control", "arguments": {"status": "SUCCESS", "output_payload": payload}}]}
    return ScriptedAdapter({"script": [turn, turn]})


def sure(payload: dict[str, Any]) -> ScriptedAdapter:
    """A model that gives ``payload`` and is sure of each of its values (as the local model
    scores its labels): review-sentiment's and a verifier's confident criteria are met."""
    scores = {name: {"value": value, "probability": 0.95, "alternatives": []}
              for name, value in payload.items() if isinstance(value, str | bool)}
    turn = {"tool_calls": [{"name": "yield_control", "arguments": {"status": "SUCCESS", "output_payload": payload}}],
            "label_scores": scores}
    return ScriptedAdapter({"script": [turn, turn]})


def right(case: EvalCase) -> ScriptedAdapter:
    if case.expect_error is not None:
        return ScriptedAdapter({"script": [{"tool_calls": [{"name": "yield_control", "arguments": MISSING}]}]})
    return sure(RIGHT[case.id])


def test_there_are_at_least_twelve_cases_each_a_sound_delegation_with_checkable_expectations():
    cases = load_cases()
    assert len(cases) >= 12
    assert len({case.id for case in cases}) == len(cases)
    skills = BuiltinSkills()
    for case in cases:
        packet = parse_packet(case.packet)
        if packet.skill:
            skill = asyncio.run(skills(packet.skill))
            assert skill is not None, f"{case.id}: no built-in skill {packet.skill}"
            assert skill.input_issues(packet.input_data) == [], case.id
            packet = merge_skill(packet, skill)
        errors = [f for f in lint_packet(packet) if f.severity == Severity.ERROR]
        assert errors == [], f"{case.id}: {errors}"
        assert case.expect, f"{case.id} checks nothing"
        assert all(parse_criterion(item, case.id) is not None for item in case.expect)
    assert set(RIGHT) == {case.id for case in cases}


@pytest.mark.parametrize("path", PATHS)
async def test_right_answers_pass_every_case_on_both_paths_and_the_tables_say_so(path: str) -> None:
    cases = load_cases()
    report = await evaluate("scripted", lambda number: right(cases[number]), cases, path=path)
    assert [result.case.id for result in report.results if not result.passed] == []
    assert report.passed == len(cases) and report.path == path
    original, fresh = report.total(fresh=False), report.total(fresh=True)
    assert fresh >= 8 and original == 16
    assert f"| {path} | **{original}/{original}** | **{fresh}/{fresh}** | 0 | 0 (0 for review) |" \
        in summary_table([report])
    assert "✗" not in case_table([report]) and "·" not in case_table([report])


async def test_a_wrong_label_with_a_right_quote_is_never_shown_as_all_met(tmp_path: Path) -> None:
    [case] = load_cases(only=["review-battery"])
    wrong = {"sentiment": "mixed", "evidence": "battery died after two days"}
    # a model that gives no probabilities: its label cannot be checked, and it says so
    unscored = await run_case(case, answering(wrong), BuiltinSkills(), tmp_path, "composer")
    assert unscored.verdict == VISIBLE and unscored.state == "COMPLETE"
    # one that is unsure: the run waits for a person, and the eval counts it sent for review
    unsure = ScriptedAdapter({"script": [{**answering(wrong).config["script"][0],
                                          "label_scores": {"sentiment": {"value": "mixed", "probability": 0.4}}}]})
    reviewed = await run_case(case, unsure, BuiltinSkills(), tmp_path, "composer")
    assert reviewed.reviewed and reviewed.verdict == VISIBLE and "the proposed value is wrong" in reviewed.why


@pytest.mark.parametrize("path", PATHS)
async def test_a_copied_worked_example_counts_wrong_on_every_skill_case(path: str) -> None:
    cases = [case for case in load_cases() if case.packet.get("skill") and case.expect_error is None]
    skill_of = [str(case.packet["skill"]) for case in cases]
    report = await evaluate("scripted", lambda number: answering(COPIED[skill_of[number]]), cases, path=path)
    # context-absent's right answer is the copied one: "not found" is right there
    assert [result.case.id for result in report.results if result.passed] == ["context-absent"]
    # and none of the copies is shown as all met: the skills' criteria refuse them, or a
    # label no criterion checks keeps the report from reading "all met"
    assert [result.case.id for result in report.results if result.verdict == WRONG_ALL_MET] == []


@pytest.mark.parametrize("path", PATHS)
async def test_an_invented_price_for_a_missing_quote_is_never_a_success(path: str, tmp_path: Path) -> None:
    [case] = load_cases(only=["price-no-quote"])
    result = await run_case(case, answering({"price": 2915, "currency": "JPY"}), BuiltinSkills(), tmp_path, path)
    # the skill's criteria refuse the guess, and the run ends saying which input is missing
    assert result.state == "FAILED" and result.passed and result.why == ""


def test_the_composer_path_is_the_packet_the_start_button_makes_with_nothing_added() -> None:
    skills = BuiltinSkills()
    [case] = load_cases(only=["price-headphones"])
    packet = composer_packet(case, skills)
    assert packet["skill"] == "price-research@1.3.0" and packet["input_data"] == case.packet["input_data"]
    assert packet["goal"] == case.packet["goal"]
    assert not {"anti_laziness_checklist", "allowed_inputs", "success_criteria"} & set(packet)


async def test_a_wrong_answer_is_schema_valid_but_fails_the_skills_own_criteria(tmp_path: Path) -> None:
    [case] = load_cases(only=["price-gbp"])
    result = await run_case(case, answering({"price": 38.61, "currency": "USD"}), BuiltinSkills(),
                            tmp_path)
    assert result.state == "FAILED"
    assert result.schema_valid and not result.passed
    assert '"USD" is not in quote_text' in result.why


async def test_the_expectations_are_not_shown_to_the_model(tmp_path: Path) -> None:
    [case] = load_cases(only=["price-gbp"])
    seen: list[str] = []

    class Reading(ScriptedAdapter):
        async def complete(self, messages: Any, tools: Any, **options: Any) -> Any:
            seen.extend(str(message.get("content")) for message in messages)
            return await super().complete(messages, tools, **options)

    adapter = Reading({"script": answering(RIGHT["price-gbp"]).config["script"]})
    result = await run_case(case, adapter, BuiltinSkills(), tmp_path)
    assert result.passed
    assert seen and not any("equals" in text for text in seen)


async def test_a_model_that_never_answers_is_neither_passed_nor_schema_valid(tmp_path: Path) -> None:
    [case] = load_cases(only=["review-mixed"])
    silent = ScriptedAdapter({"script": [{"text": "Let me think about it."}] * 12})
    result = await run_case(case, silent, BuiltinSkills(), tmp_path)
    assert result.state == "FAILED"
    assert not result.passed and not result.schema_valid
    assert result.why.startswith("FAILED")


def test_an_unknown_case_id_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="no eval case named nope; the cases are price-usd"):
        load_cases(only=["nope"])


def test_eval_case_is_a_value() -> None:
    case = EvalCase("x", "X", {"goal": "g"}, [{"kind": "field", "path": "a"}])
    assert case == EvalCase("x", "X", {"goal": "g"}, [{"kind": "field", "path": "a"}])


@pytest.mark.local_model
@pytest.mark.parametrize("path", PATHS)
async def test_one_reference_delegation_on_the_default_local_model(tmp_path: Path, path: str) -> None:
    from delegations.protocol.adapters.local import LocalAdapter
    from delegations.protocol.adapters.local_models import DEFAULT_LOCAL_MODEL
    from tests.protocol.conftest import local_model_or_skip

    local_model_or_skip(DEFAULT_LOCAL_MODEL)
    [case] = load_cases(only=["review-positive"])
    result = await run_case(case, LocalAdapter({"seed": 1}), BuiltinSkills(), tmp_path, path)
    assert result.passed, result.why
    assert result.payload["sentiment"] == "positive"
