"""Criteria that shape decoding: what the success criteria say each output field may be,
for an adapter that decodes under a grammar, and the labels it scores with their prompts."""

from __future__ import annotations

from delegations.protocol.criteria.shaping import output_shapes

PRICE = {"type": "object", "properties": {"price": {"type": "number", "exclusiveMinimum": 0},
                                          "currency": {"type": "string", "pattern": "^[A-Z]{3}$"}}}
CONTEXT = {"type": "object", "properties": {"evidence": {"type": "string"}, "answer": {"type": "string"},
                                            "found": {"type": "boolean"}}}
SENTIMENT = {"type": "object", "properties": {"evidence": {"type": "string"},
                                              "sentiment": {"enum": ["positive", "negative", "mixed"]}}}
GROUNDED_PRICE = ["`price` appears in `quote_text`", "`currency` appears in `quote_text`"]


def test_a_number_that_must_appear_in_the_quote_is_one_of_its_numbers_in_every_reading() -> None:
    shapes = output_shapes(GROUNDED_PRICE, PRICE, {"quote_text": "Brent settled at 71,40 € on day 0."})
    assert shapes.numbers == {"price": [71.4, 7140]}   # 0 breaks exclusiveMinimum
    assert shapes.choices == {"currency": ["EUR"]}     # the sign, as the check reads it


def test_a_code_that_must_appear_is_one_of_the_words_or_currency_signs_fitting_its_pattern() -> None:
    shapes = output_shapes(GROUNDED_PRICE, PRICE, {"quote_text": "TSLA at $175.22 at 14:30 UTC."})
    assert shapes.choices == {"currency": ["UTC", "USD"]}
    assert shapes.labels == {"currency": ["UTC", "USD"]}


def test_a_quote_is_shaped_as_its_source_and_may_be_empty_under_a_condition() -> None:
    context = "The library opened in 2011. It has three floors."
    criteria = ["When `found` is true, `evidence` is quoted from `context`", "`answer` is quoted from `context`"]
    shapes = output_shapes(criteria, CONTEXT, {"context": context})
    assert shapes.quotes["evidence"].text == context and shapes.quotes["evidence"].may_be_empty
    assert not shapes.quotes["answer"].may_be_empty
    assert shapes.labels == {"found": [True, False]}


def test_a_path_written_inside_the_output_payload_shapes_its_field_and_a_nested_one_nothing() -> None:
    review = {"review": "Quiet, but the lid cracked."}
    shapes = output_shapes(["`output_payload.evidence` is quoted from `review`"], SENTIMENT, review)
    assert shapes.quotes["evidence"].text == "Quiet, but the lid cracked."
    assert not output_shapes(["`evidence.first` is quoted from `review`"], SENTIMENT, review).quotes


WINDMILL = ("Hollum is a village on the island of Ameland. Its first windmill was built in 1757 "
            "by the carpenter Jan van Wessel. It has 1,240 visitors a year.")


def test_a_string_that_must_appear_is_one_of_the_sources_numbers_names_and_sentences() -> None:
    shapes = output_shapes(["`answer` appears in `context`"], CONTEXT, {"context": WINDMILL, "question": "Who?"})
    assert shapes.spans == {"answer": [
        "1757", "1,240", "Hollum", "Ameland", "Jan van Wessel",   # no lone "Its" or "It"
        "Hollum is a village on the island of Ameland.",
        "Its first windmill was built in 1757 by the carpenter Jan van Wessel.",
        "It has 1,240 visitors a year."]}
    assert shapes.labels["answer"] == shapes.spans["answer"]
    # scored as the model has it: a span's content-free prior favours whole sentences
    assert set(shapes.label_prompts["answer"]) == {"prompt"}
    assert set(shapes.label_prompts["found"]) == {"prompt", "content_free"}


def test_under_a_condition_a_span_may_also_be_what_the_examples_say_on_the_other_branch() -> None:
    examples = [{"input": {"context": "It opened in 1937."}, "output": {"answer": "The passage does not say."}},
                {"input": {"context": "It opened in 1937."}, "output": {"answer": "1937"}}]
    shapes = output_shapes(["When `found` is true, `answer` appears in `context`"], CONTEXT,
                           {"context": "Built in 1902 by Ingrid Holm."}, examples)
    assert shapes.spans["answer"] == ["1902", "Built", "Ingrid Holm", "Built in 1902 by Ingrid Holm.",
                                      "The passage does not say."]   # not 1937: that one was found


def test_an_input_that_fails_a_words_absent_criterion_rules_its_condition_out() -> None:
    criteria = ["When `found` is false, the key words of `question` are not all in `context`"]
    holds_them = {"question": "Who built the windmill?", "context": WINDMILL}
    assert output_shapes(criteria, CONTEXT, holds_them).choices == {"found": [True]}
    assert "found" not in output_shapes(criteria, CONTEXT, holds_them).labels   # nothing left to score
    lacks_one = {"question": "Who painted the lighthouse?", "context": WINDMILL}
    assert output_shapes(criteria, CONTEXT, lacks_one).labels["found"] == [True, False]


def test_a_condition_left_certain_drops_the_other_branchs_values_from_a_span() -> None:
    examples = [{"input": {"context": "It opened in 1937."}, "output": {"answer": "The passage does not say."}}]
    criteria = ["When `found` is true, `answer` appears in `context`",
                "When `found` is false, the key words of `question` are not all in `context`"]
    found_for_sure = output_shapes(criteria, CONTEXT, {"question": "Who built the windmill?", "context": WINDMILL},
                                   examples)
    assert "The passage does not say." not in found_for_sure.spans["answer"]
    maybe = output_shapes(criteria, CONTEXT, {"question": "Who painted it?", "context": WINDMILL}, examples)
    assert maybe.spans["answer"][-1] == "The passage does not say."


def test_a_source_the_input_lacks_or_leaves_empty_is_named() -> None:
    assert output_shapes(GROUNDED_PRICE, PRICE, {"query": "gold"}).empty == [
        ("price", "quote_text"), ("currency", "quote_text")]
    assert output_shapes(["`evidence` is quoted from `review`"], SENTIMENT, {"review": ""}).empty == [
        ("evidence", "review")]


def test_nothing_is_shaped_without_an_object_schema_or_for_pages_not_yet_fetched() -> None:
    assert not output_shapes(GROUNDED_PRICE, None, {"quote_text": "$5"})
    assert output_shapes(["`evidence` is quoted from `fetched_pages`"], SENTIMENT, {}).empty == []


def test_a_label_is_scored_on_a_few_shot_prompt_of_the_skills_examples_and_its_content_free_twin() -> None:
    examples = [{"input": {"review": "Broke in a day."}, "output": {"evidence": "Broke", "sentiment": "negative"}}]
    shapes = output_shapes([], SENTIMENT, {"review": "Lovely\nand quick."}, examples)
    assert shapes.label_prompts["sentiment"] == {
        "prompt": "review: Broke in a day.\nsentiment: negative\n\nreview: Lovely and quick.\nsentiment:",
        "content_free": "review: Broke in a day.\nsentiment: negative\n\nreview: N/A\nsentiment:"}
