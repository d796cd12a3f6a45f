"""The ``confident`` criterion, and a criteria report that never claims more than was
checked: every output field no criterion names is listed, and the summary reads "all met"
only when nothing is left unchecked."""

from __future__ import annotations

from typing import Any

import pytest

from delegations.protocol.criteria import (
    CriterionKind,
    criteria_summary,
    evaluate_criteria,
    parse_criterion,
)
from delegations.protocol.errors import ProtocolError
from delegations.protocol.results import ResponsePackage

SCHEMA = {"type": "object", "properties": {"evidence": {"type": "string"},
                                           "sentiment": {"enum": ["positive", "negative", "mixed"]},
                                           "stars": {"type": "integer"}}}


def result(scores: dict[str, Any] | None = None, **payload: Any) -> ResponsePackage:
    return ResponsePackage(status="SUCCESS", output_payload={"evidence": "lovely", "sentiment": "positive",
                                                             "stars": 5, **payload},
                           metrics={"labels": scores} if scores is not None else {})


@pytest.mark.parametrize(("text", "minimum"), [
    ("`sentiment` is chosen with a probability of at least 0.8", 0.8),
    ("sentiment has a probability of at least 90%", 0.9),
    ("the model is at least 75% sure of `sentiment`", 0.75),
])
def test_confident_reads_as_text_and_is_always_a_review_criterion(text: str, minimum: float) -> None:
    criterion = parse_criterion(text)
    assert criterion is not None and criterion.kind is CriterionKind.CONFIDENT
    assert criterion.params == {"path": "sentiment", "min": minimum} and criterion.review


def test_a_structured_threshold_outside_zero_to_one_is_refused_naming_the_field() -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_criterion({"kind": "confident", "path": "sentiment", "min": 80}, "success_criteria[1]")
    assert caught.value.issues[0].field == "success_criteria[1].min"
    assert "between 0 and 1" in caught.value.issues[0].message


def test_confident_is_met_at_or_above_its_threshold_and_says_with_what_probability() -> None:
    scores = {"sentiment": {"value": "positive", "probability": 0.8,
                            "alternatives": [{"value": "mixed", "probability": 0.15}]}}
    report = evaluate_criteria(result(scores), [{"kind": "confident", "path": "sentiment", "min": 0.8}], SCHEMA)
    [item] = report.items
    assert item.met and item.checkable
    assert item.detail == 'sentiment = "positive" with probability 80 % (at least 80 %); alternatives "mixed" 15 %'
    # a structured criterion is reported in its kind's words, which read back as itself
    assert item.criterion == "`sentiment` is chosen with a probability of at least 0.8"
    assert parse_criterion(item.criterion) == parse_criterion({"kind": "confident", "path": "sentiment", "min": 0.8})


def test_a_structured_criterion_that_is_not_one_is_reported_as_its_json() -> None:
    [item] = evaluate_criteria(result(), [{"kind": "telepathy", "path": "sentiment"}], SCHEMA).items
    assert item.criterion == '{"kind": "telepathy", "path": "sentiment"}'
    assert not item.met and not item.checkable and item.detail.startswith("invalid criterion:")


def test_confident_below_its_threshold_is_unmet_and_checkable() -> None:
    scores = {"sentiment": {"value": "positive", "probability": 0.51, "alternatives": []}}
    [item] = evaluate_criteria(result(scores), ["sentiment has a probability of at least 0.8"], SCHEMA).items
    assert not item.met and item.checkable and "below 80 %" in item.detail


def test_a_score_of_another_value_does_not_count_for_this_one() -> None:
    scores = {"sentiment": {"value": "mixed", "probability": 0.99}}
    [item] = evaluate_criteria(result(scores), ["sentiment has a probability of at least 0.8"], SCHEMA).items
    assert not item.met and not item.checkable and "cannot be checked with this model" in item.detail


def test_every_output_field_no_criterion_names_is_listed_and_all_met_is_not_claimed() -> None:
    report = evaluate_criteria(result(), ["JSON is schema-valid", "`evidence` is present"], SCHEMA)
    assert report.all_met
    assert report.fields_unchecked == ["sentiment", "stars"]
    assert report.summary == "2 of 2 criteria met · 2 fields unchecked"
    assert report.as_dict()["summary"] == report.summary


def test_the_summary_reads_all_met_only_when_every_field_is_checked() -> None:
    criteria = ["`evidence` is present", "`stars` is an integer",
                {"kind": "confident", "path": "sentiment", "min": 0.5}]
    scores = {"sentiment": {"value": "positive", "probability": 0.7}}
    report = evaluate_criteria(result(scores), criteria, SCHEMA)
    assert report.fields_unchecked == [] and report.summary == "all met"


def test_an_optional_field_the_result_leaves_out_is_not_listed() -> None:
    left_out = ResponsePackage(status="SUCCESS", output_payload={"evidence": "lovely", "sentiment": "positive"})
    report = evaluate_criteria(left_out, ["`evidence` is present", "`sentiment` is present"], SCHEMA)
    assert report.fields_unchecked == [] and report.summary == "all met"


def test_a_condition_on_a_field_does_not_check_it() -> None:
    report = evaluate_criteria(result(), ['When `sentiment` is "positive", `evidence` is present'], SCHEMA)
    assert "sentiment" in report.fields_unchecked


def test_a_stored_report_without_a_summary_is_summarised_the_same_way() -> None:
    stored = {"items": [{"met": True}, {"met": True}, {"met": False}], "fields_unchecked": ["sentiment"]}
    assert criteria_summary(stored) == "2 of 3 criteria met · 1 field unchecked"
    assert criteria_summary({"items": [{"met": True}]}) == "all met"
