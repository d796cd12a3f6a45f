"""Criteria that check where an answer came from: a value found in the input, a quote of
it, one of its values, and "not found" only when the passage lacks the question's words.
Each says no to a copied worked example or an invented value."""

from __future__ import annotations

from typing import Any

import pytest

from delegations.protocol.criteria import evaluate_criteria, missing_inputs, parse_criterion
from delegations.protocol.errors import ProtocolError
from delegations.protocol.results import ResponsePackage, ResultStatus


def answer(**payload: Any) -> ResponsePackage:
    return ResponsePackage(status=ResultStatus.SUCCESS, output_payload=payload)


def verdict(result: ResponsePackage, criterion: str | dict[str, Any],
            input_data: dict[str, Any]) -> tuple[bool, str]:
    [item] = evaluate_criteria(result, [criterion], None, input_data).items
    assert item.checkable, item.detail
    return item.met, item.detail


PRICE = "`price` appears in `quote_text`"
CURRENCY = "`currency` appears in `quote_text`"


@pytest.mark.parametrize("quote", [
    "Sony WH-1000XM5 headphones: $279.99 today.", "Kopfhörer für 279,99 $", "USD 279.99",
    "279.99 USD (list price)", "now only US$279.99!",
])
def test_a_price_is_found_in_the_quote_in_any_spelling_of_the_number(quote: str) -> None:
    assert verdict(answer(price=279.99, currency="USD"), PRICE, {"quote_text": quote})[0]
    assert verdict(answer(price=279.99, currency="USD"), CURRENCY, {"quote_text": quote})[0]


def test_thousands_separators_and_decimal_commas_read_as_the_number_they_mean() -> None:
    assert verdict(answer(price=2915), PRICE, {"quote_text": "shares ended at ¥2,915 in Tokyo"})[0]
    assert verdict(answer(price=1234.56), PRICE, {"quote_text": "total 1.234,56 €"})[0]
    assert verdict(answer(price="172.5"), PRICE, {"quote_text": "closed at 172,50 €"})[0]


def test_the_worked_examples_price_fails_against_another_quote() -> None:
    met, detail = verdict(answer(price=189.84, currency="USD"), PRICE,
                          {"quote_text": "The headphones cost $279.99."})
    assert not met
    assert detail == 'output_payload.price = 189.84, but "189.84" is not in quote_text'


def test_a_currency_the_quote_does_not_name_fails() -> None:
    met, _ = verdict(answer(currency="JPY"), CURRENCY, {"quote_text": "The headphones cost $279.99."})
    assert not met
    assert verdict(answer(currency="EUR"), CURRENCY, {"quote_text": "71,40 € a barrel"})[0]


def test_without_its_source_a_grounding_criterion_is_not_met_and_names_what_is_missing() -> None:
    met, detail = verdict(answer(price=2915, currency="JPY"), PRICE, {"query": "Sony share price"})
    assert not met
    assert detail == "the input has no quote_text, so price cannot be checked against it"
    assert missing_inputs([PRICE, CURRENCY, "JSON is schema-valid"], {"query": "x"}) == ["quote_text"]
    assert missing_inputs([PRICE], {"quote_text": "$1"}) == []


def test_a_quote_matches_with_case_whitespace_and_quote_marks_normalised() -> None:
    review = {"review": "The camera takes beautiful photos,\n but the app crashes every time."}
    assert verdict(answer(evidence="Beautiful photos, but the  app crashes"),
                   "`evidence` is quoted from `review`", review)[0]
    assert verdict(answer(evidence="“beautiful photos ... app crashes.”"),
                   "`evidence` is quoted from `review`", review)[0]


def test_evidence_copied_from_a_worked_example_is_not_a_quote_of_the_review() -> None:
    met, detail = verdict(answer(evidence="stopped charging after a week"),
                          "`evidence` is quoted from `review`",
                          {"review": "The blender arrived cracked and the refund took a month."})
    assert not met
    assert detail == 'output_payload.evidence = "stopped charging after a week" is not a quote of review'


def test_an_empty_quote_quotes_nothing() -> None:
    met, detail = verdict(answer(evidence=""), "`evidence` is quoted from `review`", {"review": "Fine."})
    assert not met and "nothing is quoted" in detail


def test_a_value_is_one_of_an_inputs_values() -> None:
    order = {"order": {"currency": "EUR"}, "files": ["a.py", "b.py"]}
    assert verdict(answer(currency="eur"), "`currency` is one of the values of `order.currency`", order)[0]
    assert not verdict(answer(currency="USD"), "`currency` is one of `order.currency`", order)[0]
    assert verdict(answer(changed=["b.py"]), "`changed` is one of `files`", order)[0]
    assert not verdict(answer(changed=["c.py"]), "`changed` is one of `files`", order)[0]
    assert not verdict(answer(changed="a.py"), "`changed` is one of `files`", {})[0]


CONTEXT_CRITERIA = [
    "When `found` is true, `evidence` is quoted from `context`",
    "When `found` is true, `answer` appears in `context`",
    "When `found` is false, the key words of `question` are not all in `context`",
]
LIBRARY = {"question": "When was the city library founded?",
           "context": "The city library was founded in 2011. It has three floors."}


def test_not_found_fails_when_the_passage_holds_every_key_word_of_the_question() -> None:
    copied = answer(evidence="", answer="The passage does not say.", found=False)
    report = evaluate_criteria(copied, CONTEXT_CRITERIA, None, LIBRARY)
    assert [item.met for item in report.items] == [True, True, False]
    assert report.items[2].detail == ("context holds every key word of question (city, library, founded): "
                                      "the answer may well be there")
    assert not report.all_met


def test_not_found_is_believed_when_a_key_word_is_absent() -> None:
    report = evaluate_criteria(answer(evidence="", answer="The passage does not say.", found=False),
                               CONTEXT_CRITERIA, None,
                               {"question": "Who painted the bridge?", "context": "The bridge opened in 1937."})
    assert report.all_met
    assert report.items[2].detail == "context lacks painted of question"


def test_a_found_answer_is_checked_against_the_passage_and_the_others_are_skipped() -> None:
    right = answer(evidence="The city library was founded in 2011.", answer="2011", found=True)
    report = evaluate_criteria(right, CONTEXT_CRITERIA, None, LIBRARY)
    assert report.all_met
    assert report.items[2].detail == "does not apply: found is true, not false"
    assert report.items[2].applies is False and report.items[0].applies
    # "3 of 3 criteria met" counted the one whose condition did not hold
    assert report.summary.endswith("· 1 does not apply") and not report.summary.startswith("3 of 3")
    invented = answer(evidence="It opened in 1937.", answer="1937", found=True)
    assert [item.met for item in evaluate_criteria(invented, CONTEXT_CRITERIA, None, LIBRARY).items] == [
        False, False, True]


def test_the_structured_form_reads_like_the_text_and_names_its_parts() -> None:
    structured = {"kind": "appears_in", "path": "price", "source": "quote_text"}
    assert parse_criterion(structured) == parse_criterion(PRICE)
    when = parse_criterion({"kind": "words_absent", "words_of": "question", "source": "context",
                            "when": {"path": "found", "value": False}})
    assert when.text == "When `found` is false, the key words of `question` are not all in `context`"
    assert parse_criterion(when.text).params == when.params


@pytest.mark.parametrize(("spec", "field"), [
    ({"kind": "appears_in", "path": "price"}, "c.source"),
    ({"kind": "quoted_from", "source": "review"}, "c.path"),
    ({"kind": "words_absent", "source": "context"}, "c.words_of"),
    ({"kind": "one_of_input", "path": "x", "source": "y", "when": "found"}, "c.when"),
])
def test_a_malformed_grounding_criterion_says_which_part_is_wrong(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ProtocolError) as raised:
        parse_criterion(spec, "c")
    assert raised.value.issues[0].field == field
