"""Labels scored, not just sampled: where a label's value is written, which values a piece
of text commits to, the calibrated choice, and scores read from an OpenAI-compatible
server's logprobs."""

from __future__ import annotations

import math

import pytest

from delegations.protocol.adapters.label_choice import (
    JsonPath,
    LabelChooser,
    choose,
    committed,
    literal,
)
from delegations.protocol.adapters.logprob_labels import labels_from_logprobs

SENTIMENTS = ["positive", "negative", "mixed"]
ANSWER = '{"name": "yield_control", "arguments": {"status": "SUCCESS", "output_payload": {"evidence": "a, b", "sentiment": "mixed"}}}'


def test_the_path_names_a_label_from_its_key_until_its_value_is_written() -> None:
    path = JsonPath()
    seen = []
    for char in ANSWER:
        path.feed(char)
        seen.append(path.key_path)
    assert ("arguments", "output_payload", "sentiment") in seen
    assert ("arguments", "output_payload", "evidence") in seen
    assert seen[-1] is None
    # a comma inside a quoted value does not end it
    start = ANSWER.index('"a, b"')
    assert seen[start + 3] == ("arguments", "output_payload", "evidence")


@pytest.mark.parametrize(("written", "values"), [
    ("", SENTIMENTS), (":", SENTIMENTS), (': "', SENTIMENTS), (': "neg', ["negative"]),
    (': "mixed"}', ["mixed"]), (': "happy', []), (": true", []),
])
def test_text_after_a_labels_key_commits_to_the_values_it_can_still_become(written: str, values: list[str]) -> None:
    assert committed(written, SENTIMENTS) == values


def test_calibration_divides_by_the_content_free_prior() -> None:
    raw = {literal("positive"): 0.5, literal("negative"): 0.3, literal("mixed"): 0.2}
    prior = {literal("positive"): 0.7, literal("negative"): 0.2, literal("mixed"): 0.1}
    assert choose(SENTIMENTS, raw, None, 1.0).value == "positive"
    calibrated = choose(SENTIMENTS, raw, prior, 1.0)
    assert calibrated.value == "mixed"
    assert calibrated.probability == pytest.approx((0.2 / 0.1) / (0.5 / 0.7 + 0.3 / 0.2 + 0.2 / 0.1))
    assert choose(SENTIMENTS, raw, prior, 0.0).value == "positive"   # weight 0: no calibration
    shown = calibrated.as_dict(SENTIMENTS)
    assert shown["calibrated"] and shown["raw_probability"] == 0.2
    assert [entry["value"] for entry in shown["scores"]] == ["mixed", "negative", "positive"]
    assert [alt["value"] for alt in shown["alternatives"]] == ["negative", "positive"]


def test_the_chooser_keeps_a_values_tokens_to_the_chosen_one() -> None:
    chosen = choose(SENTIMENTS, {literal(v): p for v, p in zip(SENTIMENTS, (0.2, 0.7, 0.1), strict=True)}, None, 0)
    chooser = LabelChooser({"sentiment": chosen})
    chooser.path.feed(ANSWER[:ANSWER.index('"sentiment"') + len('"sentiment"')])
    assert chooser.current() == "sentiment"
    assert chooser.rest("sentiment") == ': "negative"'
    assert chooser.keeps("sentiment", ': "neg') and not chooser.keeps("sentiment", ': "mix')
    chooser.path.feed(': "ne')
    assert chooser.rest("sentiment") == 'gative"'


def test_logprobs_score_a_label_at_the_token_that_decides_it() -> None:
    tokens = [(piece, math.log(0.9), []) for piece in ['{"output_payload": {"sentiment', '": "']]
    tokens += [("neg", math.log(0.6), [("mix", math.log(0.3)), ("pos", math.log(0.1))]),
               ('ative"}}', 0.0, [])]
    scores = labels_from_logprobs(tokens, {"sentiment": SENTIMENTS})
    assert scores["sentiment"]["value"] == "negative"
    assert scores["sentiment"]["probability"] == pytest.approx(0.6)
    assert scores["sentiment"]["calibrated"] is False


def test_no_logprobs_for_a_label_scores_nothing() -> None:
    assert labels_from_logprobs([('{"other": 1}', 0.0, [])], {"sentiment": SENTIMENTS}) == {}
