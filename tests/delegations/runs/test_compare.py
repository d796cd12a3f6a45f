"""The compare page: two attempts of a retried run side by side, their packet and result
diffs and what each used; the chain of attempts; who may open it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from delegations.models import Run
from delegations.run_pages.compare import ONLY_ONE, attempts
from delegations.runs.record import append_events
from delegations.runs.workflows import run_retry
from tests.delegations import scripts
from tests.delegations.runs.test_run_pages import make_run

pytestmark = pytest.mark.django_db

FIRST_USAGE = {"model_calls": 3, "input_tokens": 1000, "output_tokens": 200, "cost_usd": 0.0125,
               "runtime_s": 10.0}
SECOND_USAGE = {"model_calls": 4, "input_tokens": 2200, "output_tokens": 150, "cost_usd": 0.0113,
                "runtime_s": 12.5}


def tool_calls(run: Run, count: int) -> None:
    append_events([(run, "tool_call", {"id": f"call_{index}", "name": "list_files", "arguments": {}})
                   for index in range(count)])


def finish(run: Run, *, usage: dict[str, Any], answer: int | None = None, **fields: Any) -> Run:
    """End the run as a worker would leave its row: its usage, and a result when it answered."""
    result = None if answer is None else {"status": "SUCCESS", "summary": f"The answer is {answer}.",
                                          "output_payload": {"answer": answer}}
    fields.setdefault("state", "COMPLETE" if answer is not None else "FAILED")
    Run.objects.filter(pk=run.pk).update(usage=usage, result=result, **fields)
    run.refresh_from_db()
    return run


@pytest.fixture
def retried(composer: Any, queued_tasks: None) -> tuple[Run, Run]:
    """Attempt 1 failed after two tool calls; attempt 2, started by the retry, answered
    after one, with more input tokens but a little cheaper."""
    first = make_run(composer, state="WORKING", label="pricing", packet=scripts.packet(label="pricing"),
                     adapter_config=scripts.leaf())
    tool_calls(first, 2)
    first = finish(first, usage=FIRST_USAGE, error={"code": "ERR_TIMEOUT", "message": "Too slow."})
    second = run_retry(run=first, user=composer, fix_instructions="Cite the benchmark.")
    tool_calls(second, 1)
    return first, finish(second, usage=SECOND_USAGE, answer=42)


def compare(client: Any, run: Run, **query: str) -> Any:
    return client.get(f"/runs/{run.pk}/compare/", query)


def usage_row(html: str, figure: str) -> list[str]:
    """The cells of one usage row: attempt a, attempt b, the change."""
    row = re.search(rf'<tr data-figure="{figure}">(.*?)</tr>', html, re.S)
    assert row, f"no usage row {figure}"
    return re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))


def section(html: str, section_id: str) -> str:
    found = re.search(rf'<section[^>]*id="{section_id}".*?</section>', html, re.S)
    assert found, f"no section {section_id}"
    return found.group(0)


def test_a_retry_is_compared_with_its_previous_attempt_by_default(composer_client, retried):
    first, second = retried
    response = compare(composer_client, second)
    html = response.content.decode()
    assert response.status_code == 200
    assert "Attempt 1 and attempt 2 of pricing" in html
    packet = section(html, "packet-changes")
    assert '<span class="dl add">+  &quot;previous_failure&quot;: {</span>' in packet
    assert "&quot;fix_instructions&quot;: &quot;Cite the benchmark.&quot;" in packet
    assert "&quot;failure_report&quot;: &quot;Too slow.&quot;" in packet
    assert '<span class="dl file">--- attempt 1</span>' in packet
    assert f'href="/runs/{first.pk}/"' in html and f'href="/runs/{second.pk}/"' in html


def test_the_usage_table_shows_what_the_later_attempt_used_more_or_less(composer_client, retried):
    html = compare(composer_client, retried[1]).content.decode()
    assert usage_row(html, "model_calls") == ["3", "4", "+1"]
    assert usage_row(html, "input_tokens") == ["1,000 tok", "2,200 tok", "+1,200 tok"]
    assert usage_row(html, "output_tokens") == ["200 tok", "150 tok", "\N{MINUS SIGN}50 tok"]
    assert usage_row(html, "cost_usd") == ["$0.0125", "$0.0113", "\N{MINUS SIGN}$0.0012"]
    assert usage_row(html, "runtime_s") == ["10.0 s", "12.5 s", "+2.5 s"]
    assert usage_row(html, "tool_calls") == ["2", "1", "\N{MINUS SIGN}1"]


def test_the_result_diff_and_each_sides_summary_are_shown(composer_client, composer, retried):
    second = retried[1]
    third = run_retry(run=second, user=composer, fix_instructions="Check once more.")
    finish(third, usage=SECOND_USAGE, answer=41)
    html = compare(composer_client, third).content.decode()
    result = section(html, "result-changes")
    assert '<span class="dl del">-    &quot;answer&quot;: 42</span>' in result
    assert '<span class="dl add">+    &quot;answer&quot;: 41</span>' in result
    assert "The answer is 42." in html and "The answer is 41." in html
    # attempt 1 has no result to set against attempt 2's
    html = compare(composer_client, second).content.decode()
    assert "Attempt 1 has no result (failed)" in section(html, "result-changes")


def test_with_picks_another_attempt_and_the_older_one_goes_left(composer_client, composer, retried):
    first, second = retried
    third = finish(run_retry(run=second, user=composer), usage=SECOND_USAGE, answer=42)
    assert "Attempt 2 and attempt 3 of pricing" in compare(composer_client, third).content.decode()
    html = compare(composer_client, third, **{"with": first.pk}).content.decode()
    assert "Attempt 1 and attempt 3 of pricing" in html
    assert f'<option value="{first.pk}" selected>' in html and f'<option value="{third.pk}" selected>' in html
    # the picker's other side: attempt 1 against attempt 2, asked from attempt 3's page
    html = compare(composer_client, third, base=second.pk, **{"with": first.pk}).content.decode()
    assert "Attempt 1 and attempt 2 of pricing" in html
    # both results are the same answer, so there is no result diff
    assert "Both attempts handed back the same result." in compare(
        composer_client, third, **{"with": second.pk}).content.decode()


def test_the_first_attempt_is_compared_with_its_retry(composer_client, retried):
    html = compare(composer_client, retried[0]).content.decode()
    assert "Attempt 1 and attempt 2 of pricing" in html


def test_attempts_follow_the_chain_back_and_forward_in_a_few_queries(composer, retried,
                                                                      django_assert_max_num_queries):
    first, second = retried
    third = run_retry(run=second, user=composer)
    sibling = run_retry(run=first, user=composer)   # attempt 1 retried a second time
    with django_assert_max_num_queries(5):
        chain = attempts(second)
    assert [run.pk for run in chain] == [first.pk, second.pk, sibling.pk, third.pk]
    assert [run.pk for run in attempts(first)] == [run.pk for run in chain]


def test_a_run_with_one_attempt_says_so(composer_client, composer):
    run = make_run(composer, state="FAILED", label="alone")
    response = compare(composer_client, run)
    assert response.status_code == 200
    html = response.content.decode()
    assert ONLY_ONE in html and "Packet changes" not in html


def test_equal_packets_are_said_to_be_equal(composer_client, composer):
    first = make_run(composer, state="FAILED", label="same")
    second = make_run(composer, state="FAILED", label="same", attempt=2, retry_of=first)
    html = compare(composer_client, second).content.decode()
    assert "Both attempts ran the same packet." in section(html, "packet-changes")
    assert "Neither attempt has handed back a result yet." in html


def test_with_naming_an_unrelated_run_answers_400_with_the_attempts_that_can_be_compared(
        composer_client, composer, retried):
    first, second = retried
    unrelated = make_run(composer, state="FAILED", label="other")
    response = compare(composer_client, second, **{"with": unrelated.pk})
    assert response.status_code == 400
    html = response.content.decode()
    assert f"Run “{unrelated.pk}” is not an attempt of this run" in html
    assert f"attempt 1 ({first.pk[:8]}), attempt 2 ({second.pk[:8]})" in html
    assert "Packet changes" not in html
    assert compare(composer_client, second, **{"with": second.pk}).status_code == 400
    assert compare(composer_client, second, **{"with": "no-such-run"}).status_code == 400


def test_a_single_attempt_asked_to_compare_with_another_run_answers_400(composer_client, composer):
    run = make_run(composer, state="FAILED")
    response = compare(composer_client, run, **{"with": make_run(composer).pk})
    assert response.status_code == 400 and ONLY_ONE in response.content.decode()


def test_an_attempt_someone_else_started_is_not_offered(client, composer, other_composer, retried):
    first, second = retried
    Run.objects.filter(pk=second.pk).update(owner=other_composer, root=second)
    client.force_login(composer)
    response = compare(client, first, **{"with": second.pk})
    html = response.content.decode()
    assert response.status_code == 400 and ONLY_ONE in html
    assert f'<option value="{second.pk}"' not in html and "Packet changes" not in html


def test_someone_who_cannot_see_the_run_gets_404(client, other_composer, retried):
    client.force_login(other_composer)
    assert compare(client, retried[1]).status_code == 404
    assert compare(client, retried[1], **{"with": retried[0].pk}).status_code == 404


def test_the_compare_page_answers_get_only(composer_client, retried):
    assert composer_client.post(f"/runs/{retried[1].pk}/compare/").status_code == 405


def test_both_attempts_pages_link_to_their_comparison(composer_client, composer):
    first = make_run(composer, state="FAILED")
    second = Run.objects.create(packet=first.packet, adapter_name="scripted", owner=composer, attempt=2,
                                retry_of=first, state="COMPLETE")
    later = composer_client.get(f"/runs/{second.pk}/").content.decode()
    assert f'href="/runs/{second.pk}/compare/"' in later and "compare with attempt 1" in later
    earlier = composer_client.get(f"/runs/{first.pk}/").content.decode()
    assert f'href="/runs/{first.pk}/compare/?with={second.pk}"' in earlier and "retried as" in earlier
