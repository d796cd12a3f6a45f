"""A run judged on the pages it fetches: its answer is checked against what the page said
(the ``fetched_pages`` source), it fetches before it answers, and a small model answers
once its page came instead of fetching it again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from delegations.protocol.adapters.scripted import ScriptedAdapter
from delegations.protocol.criteria import evaluate_criteria, missing_inputs
from delegations.protocol.lifecycle import RunState
from delegations.protocol.packet import parse_packet
from delegations.protocol.results import ResponsePackage, ResultStatus
from delegations.protocol.runner import Runner
from delegations.protocol.runner.fetched import named_urls, page_text
from tests.services import http_on_loopback, page_handler

from .conftest import call_turn, root_packet, yield_turn

PAGE = ("<html><body><h1>Harbour Museum</h1><p>The museum is open from Tuesday to Sunday. "
        "On Sundays it opens at 11:00 and closes at 17:00.</p></body></html>")
CRITERIA = ["When `found` is true, `evidence` is quoted from `fetched_pages`",
            "When `found` is true, `answer` appears in `fetched_pages`",
            "When `found` is false, the key words of `question` are not all in `fetched_pages`"]
RIGHT = {"answer": "11:00", "evidence": "On Sundays it opens at 11:00 and closes at 17:00.", "found": True}


Page = page_handler(PAGE)


@pytest.fixture
def page_url() -> Iterator[str]:
    Page.served.clear()
    with http_on_loopback(Page) as url:
        yield f"{url}/museum"


def packet(url: str, **fields: Any) -> Any:
    return parse_packet(root_packet(
        goal="Find when the museum opens on Sundays", capabilities=["network_outbound"],
        input_data={"url": url, "question": "When does the museum open on Sundays?"},
        expected_output_schema={"answer": "string", "evidence": "string", "found": "boolean"},
        **{"success_criteria": CRITERIA, **fields}))


class SmallModel(ScriptedAdapter):
    """The scripted adapter as a small model's adapter: compact prompts."""

    compact_prompt = True


def answer(**payload: Any) -> ResponsePackage:
    return ResponsePackage(status=ResultStatus.SUCCESS, output_payload=payload)


def test_a_quote_of_the_fetched_page_is_met_and_an_invented_one_is_not() -> None:
    fetched = {"fetched_pages": PAGE}
    met = evaluate_criteria(answer(**RIGHT), CRITERIA, None, fetched)
    assert met.all_met, [item.detail for item in met.items]
    invented = evaluate_criteria(answer(answer="10:00", evidence="It opens at 10:00 on Sundays.", found=True),
                                 CRITERIA, None, fetched)
    assert [item.met for item in invented.items] == [False, False, True]
    assert "is not a quote of fetched_pages" in invented.items[0].detail


def test_without_a_fetched_page_the_detail_says_the_run_fetched_none_and_no_input_is_missing() -> None:
    report = evaluate_criteria(answer(**RIGHT), CRITERIA, None, {"question": "When?"})
    assert report.items[0].detail == ("the run fetched no page with http_get (a failed fetch or an "
                                      "error status such as 404 brings none), so evidence cannot be "
                                      "checked against one")
    assert missing_inputs(CRITERIA, {"question": "When?"}) == []   # no input could hold it


async def test_the_run_fetches_first_and_its_answer_is_judged_on_the_page(runner: Runner, page_url: str) -> None:
    adapter = ScriptedAdapter({"script": [call_turn("http_get", {"url": page_url}), yield_turn(RIGHT)]})
    outcome = await runner.start(packet(page_url), adapter=adapter)
    assert outcome.state is RunState.COMPLETE, outcome.error
    assert Page.served == ["/museum"]
    # the first call offered only http_get, and forced it; after the page the model was free
    assert [tool["name"] for tool in adapter.received_tools[0]] == ["http_get"]
    assert adapter.received_tool_choices == ["http_get", None]
    assert outcome.criteria_report is not None
    assert all(item["met"] for item in outcome.criteria_report["items"]), outcome.criteria_report


async def test_the_first_fetch_is_held_to_the_urls_the_input_names(runner: Runner, page_url: str) -> None:
    adapter = ScriptedAdapter({"script": [call_turn("http_get", {"url": page_url}), yield_turn(RIGHT)]})
    await runner.start(packet(page_url), adapter=adapter)
    [offered] = adapter.received_tools[0]
    assert offered["parameters"]["properties"]["url"] == {"type": "string", "enum": [page_url]}
    # after the fetch the model is free, and http_get as it always is
    later = next(tool for tool in adapter.received_tools[1] if tool["name"] == "http_get")
    assert "enum" not in later["parameters"]["properties"]["url"]


def test_an_html_page_is_judged_on_its_text_not_its_markup() -> None:
    assert page_text(PAGE) == ("Harbour Museum\nThe museum is open from Tuesday to Sunday. On Sundays "
                               "it opens at 11:00 and closes at 17:00.")
    assert page_text("<head><title>Hours</title><style>p{}</style><script>var x = 1;</script></head>"
                     "<p>Open&nbsp;at <b>10:00</b> &amp; later</p>") == "Hours\nOpen at 10:00 & later"
    assert page_text("<p>a</p><![foo bar>") == "<p>a</p><![foo bar>"   # markup the parser gives up on
    on_the_page = evaluate_criteria(answer(**RIGHT), CRITERIA, None, {"fetched_pages": page_text(PAGE)})
    assert on_the_page.all_met
    # "1" was in the page's <h1>, not in anything it said
    from_markup = evaluate_criteria(answer(answer="1", evidence="Harbour Museum", found=True), CRITERIA,
                                    None, {"fetched_pages": page_text(PAGE)})
    assert [item.met for item in from_markup.items] == [True, False, True]


def test_the_urls_an_input_names_are_its_values_that_are_urls() -> None:
    assert named_urls({"url": " https://example.org/a ", "question": "see https://example.org/b?",
                       "more": [{"page": "http://example.org/c"}, "https://example.org/a"],
                       "count": 3}) == ["https://example.org/a", "http://example.org/c"]
    assert named_urls({"question": "When?"}) == []


async def test_an_answer_from_memory_after_the_fetch_fails_its_criteria(runner: Runner, page_url: str) -> None:
    wrong = {"answer": "10:00", "evidence": "It opens at 10:00.", "found": True}
    adapter = ScriptedAdapter({"script": [call_turn("http_get", {"url": page_url}), yield_turn(wrong),
                                          yield_turn(wrong)]})
    outcome = await runner.start(packet(page_url), adapter=adapter)
    assert outcome.state is RunState.FAILED
    assert outcome.error is not None and "is not a quote of fetched_pages" in outcome.error["message"]


async def test_a_small_model_answers_once_its_page_came(runner: Runner, page_url: str) -> None:
    adapter = SmallModel({"script": [call_turn("http_get", {"url": page_url}), yield_turn(RIGHT)]})
    outcome = await runner.start(packet(page_url), adapter=adapter)
    assert outcome.state is RunState.COMPLETE, outcome.error
    assert adapter.received_tool_choices == ["http_get", "yield_control"]


async def test_a_failed_fetch_leaves_the_model_free_to_say_so(runner: Runner) -> None:
    gone = "http://127.0.0.1:9/museum"   # nothing listens on the discard port
    failure = {"tool_calls": [{"name": "yield_control", "arguments": {
        "status": "FAILURE", "output_payload": {}, "error_report": {
            "code": "ERR_TOOL_FAILURE", "message": "The page could not be fetched."}}}]}
    adapter = SmallModel({"script": [call_turn("http_get", {"url": gone}), failure]})
    outcome = await runner.start(packet(gone), adapter=adapter)
    assert adapter.received_tool_choices == ["http_get", None]
    assert outcome.state is RunState.FAILED
    assert outcome.result is not None and outcome.result.error_report is not None
    assert outcome.result.error_report.message == "The page could not be fetched."


NotFound = page_handler("<html><body><h1>404 Not Found</h1><p>Error code 1: no such page.</p></body></html>",
                        status=404)


async def test_an_error_page_is_not_a_fetched_page(runner: Runner) -> None:
    """A small model that garbled the URL got the server's 404 page; an answer quoting it
    ("1", "404") is not borne out by the page the person named, and the model is not made
    to answer from it."""
    from_error_page = {"answer": "1", "evidence": "404", "found": True}
    with http_on_loopback(NotFound) as url:
        adapter = SmallModel({"script": [call_turn("http_get", {"url": f"{url}/museun"}), yield_turn(from_error_page),
                                         yield_turn(from_error_page)]})
        outcome = await runner.start(packet(f"{url}/museum"), adapter=adapter)
    assert NotFound.served == ["/museun"]
    assert adapter.received_tool_choices[:2] == ["http_get", None]   # free to fetch again or say so
    assert outcome.state is RunState.FAILED
    assert outcome.error is not None and "fetched no page with http_get" in outcome.error["message"]


async def test_a_run_not_judged_on_pages_is_never_steered(runner: Runner, page_url: str) -> None:
    adapter = SmallModel({"script": [yield_turn({"answer": "x", "evidence": "", "found": False})]})
    outcome = await runner.start(packet(page_url, success_criteria=["JSON is schema-valid"]), adapter=adapter)
    assert outcome.state is RunState.COMPLETE
    assert adapter.received_tool_choices == [None]
