"""The inbox page without a browser: pending items with their context, filters, pages,
the decisions each kind allows as plain forms, refusals with their reason, editing a tool
call's arguments with a diff and a confirm step, batch decisions, the live item fragment,
the history with its audit, and the run page's decision forms."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.utils import timezone
from django.utils.html import escape

from delegations.models import Approval, Run
from tests.delegations.inbox.test_context import ask, child_of, http_get
from tests.delegations.runs.test_run_pages import make_run

pytestmark = pytest.mark.django_db


def page(client: Any, url: str = "/inbox/", **headers: Any) -> str:
    response = client.get(url, **headers)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def item_html(html: str, approval: Approval) -> str:
    """The markup of one item: from its <li> to the next item (or the end of its group)."""
    for chunk in html.split('<li class="approval inbox-item')[1:]:
        if chunk.split(">", 1)[0].count(f'id="approval-{approval.pk}"'):
            return chunk.split('<div class="inbox-group"', 1)[0]
    raise AssertionError(f"no item #{approval.pk}")


def post(client: Any, approval: Approval, **data: Any) -> Any:
    return client.post(f"/inbox/{approval.pk}/decision/", data, follow=True)


@pytest.fixture
def composers_run(composer: Any) -> Run:
    """A run started by someone else than the approver, parked for a person."""
    return make_run(composer, state="AWAITING_APPROVAL", label="pricing")


def test_an_item_says_what_approving_grants_who_asks_and_the_budget_left(approver_client, composers_run):
    fetcher = child_of(composers_run, "fetcher", subagent_type="researcher",
                       budget={"max_tokens": 1000}, usage={"input_tokens": 300, "output_tokens": 100})
    approval = http_get(fetcher)
    html = item_html(page(approver_client), approval)
    assert "Lets subagent “fetcher” make one outbound HTTP request to https://example.com/prices.json." in html
    assert re.search(r'<a href="/runs/\w+/">pricing</a>.*<a href="/runs/\w+/">fetcher</a> <span class="role">researcher</span> <span class="depth">depth 1</span>', html, re.S)
    assert re.search(r"<th scope=\"row\">Tokens</th><td>400 <span class=\"muted\">of 1,000</span>.*?</td><td>600</td>", html, re.S)
    assert '<th scope="row" class="mono">url</th><td><span class="mono">https://example.com/prices.json</span>' in html
    assert "Raw JSON" in html and "&quot;call_id&quot;: &quot;c1&quot;" in html


def test_a_capability_item_offers_approve_always_allow_edit_and_reject(approver_client, composers_run):
    approval = http_get(composers_run)
    html = item_html(page(approver_client), approval)
    assert 'data-decision="approve"' in html and 'name="always_allow"' in html
    assert "Always allow http_get for this run" in html
    assert 'name="edited_arguments"' in html and 'data-decision="reject"' in html
    assert 'name="answer"' not in html and "disabled" not in html


@pytest.mark.parametrize(("kind", "present", "absent"), [
    ("clarification", ['name="answer"', 'data-decision="reject"'], ['data-decision="approve"', "edited_arguments"]),
    ("capability_request", ['data-decision="approve"', 'data-decision="reject"'], ["edited_arguments", "always_allow"]),
    ("budget", ['name="budget_limit"', ">Continue<", ">Stop the run<"], ["edited_arguments", 'name="answer"']),
    ("invalid_result", [">Accept as partial<", 'value="retry"', ">Fail<"], ["edited_arguments", 'name="answer"']),
])
def test_each_kind_offers_the_decisions_it_allows(approver_client, composers_run, kind, present, absent):
    payload = {"axis": "max_tokens", "limit": 1000, "used": 850} if kind == "budget" else {}
    approval = ask(composers_run, kind, payload=payload)
    html = item_html(page(approver_client), approval)
    for text in present:
        assert text in html, text
    for text in absent:
        assert text not in html, text


def test_the_owner_of_the_run_sees_the_forms_disabled_with_the_reason(admin_user, client):
    run = make_run(admin_user, state="AWAITING_APPROVAL", label="mine")
    approval = http_get(run)
    client.force_login(admin_user)
    html = item_html(page(client), approval)
    assert '<fieldset class="decide" disabled>' in html
    assert "You started this run; someone else must decide its inbox items" in html
    assert 'class="batch-pick"' not in html
    response = post(client, approval, decision="approve")
    assert "You started this run" in response.content.decode()
    approval.refresh_from_db()
    assert approval.is_pending


def test_an_approver_approves_and_is_told_the_run_resumes(approver_client, approver, composers_run, queued_tasks):
    approval = http_get(composers_run)
    response = post(approver_client, approval, decision="approve")
    assert response.redirect_chain == [("/inbox/", 302)]
    assert f"#{approval.pk} approved; its run resumes." in response.content.decode()
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.decided_by == approver


def test_always_allow_is_recorded_with_the_approval(approver_client, composers_run, queued_tasks):
    approval = http_get(composers_run)
    response = post(approver_client, approval, decision="approve", always_allow="on")
    assert "approved and always allowed for this run" in response.content.decode()
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.always_allow


def test_a_rejection_needs_a_reason(approver_client, composers_run):
    approval = http_get(composers_run)
    response = post(approver_client, approval, decision="reject", comment=" ")
    assert "comment" in response.content.decode().lower()
    approval.refresh_from_db()
    assert approval.is_pending


def test_a_budget_item_continues_with_the_raised_limit(approver_client, composers_run, queued_tasks):
    approval = ask(composers_run, "budget", payload={"axis": "max_tokens", "limit": 1000, "used": 850})
    post(approver_client, approval, decision="approve", budget_limit="1500")
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.budget_limit == {"max_tokens": 1500}


def test_editing_arguments_first_shows_the_diff_then_approves_on_confirm(approver_client, composers_run, queued_tasks):
    approval = http_get(composers_run)
    edited = '{"url": "https://example.org/prices.json"}'
    first = approver_client.post(f"/inbox/{approval.pk}/decision/", {"decision": "edit", "edited_arguments": edited})
    assert first.status_code == 200
    html = first.content.decode()
    assert '<span class="dl del">-  &quot;url&quot;: &quot;https://example.com/prices.json&quot;</span>' in html
    assert '<span class="dl add">+  &quot;url&quot;: &quot;https://example.org/prices.json&quot;</span>' in html
    assert "Approve with these arguments" in html and 'name="confirm"' in html
    approval.refresh_from_db()
    assert approval.is_pending, "the first step decides nothing"
    confirmed = post(approver_client, approval, decision="edit", edited_arguments=edited, confirm="on")
    assert f"#{approval.pk} approved with edits" in confirmed.content.decode()
    approval.refresh_from_db()
    assert approval.status == "edited" and approval.edited_arguments == {"url": "https://example.org/prices.json"}


def test_edited_arguments_that_break_the_tools_schema_are_listed_and_not_confirmable(approver_client, composers_run):
    approval = http_get(composers_run)
    response = approver_client.post(f"/inbox/{approval.pk}/decision/",
                                    {"decision": "edit", "edited_arguments": '{"link": 3}'})
    html = response.content.decode()
    assert "Not valid for http_get" in html and "url" in html and "link" in html
    assert "Approve with these arguments" not in html


@pytest.mark.parametrize(("typed", "said"), [
    ("{url: nope", "The arguments are not valid JSON"),
    ('["https://example.org/"]', "The arguments must be a JSON object"),
    ("", "Type the edited arguments (a JSON object) first."),
])
@pytest.mark.parametrize("htmx", [False, True], ids=["page", "htmx"])
def test_edited_arguments_that_are_no_json_object_say_so_where_the_check_shows(
        approver_client, composers_run, typed, said, htmx):
    approval = http_get(composers_run)
    response = approver_client.post(f"/inbox/{approval.pk}/decision/", {"decision": "edit", "edited_arguments": typed},
                                    headers={"HX-Request": "true"} if htmx else {})
    html = response.content.decode()
    assert response.status_code == 200 and said in html and "Not a JSON object of arguments" in html
    assert "Approve with these arguments" not in html
    if htmx:   # only the preview, not the item again inside its own preview
        assert "<html" not in html and 'class="approval' not in html and "data-decision" not in html
    else:      # the page to check again keeps what was typed
        assert f">{escape(typed)}</textarea>" in html
    approval.refresh_from_db()
    assert approval.is_pending


def test_with_htmx_the_edit_check_returns_only_the_preview(approver_client, composers_run):
    approval = http_get(composers_run)
    response = approver_client.post(f"/inbox/{approval.pk}/decision/",
                                    {"decision": "edit", "edited_arguments": '{"url": "https://example.org/"}'},
                                    headers={"HX-Request": "true"})
    html = response.content.decode()
    assert "<html" not in html and "data-edit-diff" in html and 'hx-post="/inbox/' in html


def test_with_htmx_a_decision_swaps_the_item_for_its_decided_state(approver_client, composers_run, queued_tasks):
    approval = http_get(composers_run)
    response = approver_client.post(f"/inbox/{approval.pk}/decision/", {"decision": "approve"},
                                    headers={"HX-Request": "true"})
    html = response.content.decode()
    assert html.lstrip().startswith("<li") and 'data-pending="0"' in html
    assert f"#{approval.pk} approved; its run resumes." in html and "by <strong>alice</strong>" in html


def test_a_second_decision_is_refused_naming_who_decided_and_when(approver_client, composers_run, other_composer):
    approval = http_get(composers_run, status="approved", decision="approve", decided_by=other_composer,
                        decided_at=timezone.now())
    response = post(approver_client, approval, decision="reject", comment="changed my mind")
    assert "Already approved by dave" in response.content.decode()


def test_pending_items_are_grouped_under_their_root_run_with_a_batch_bar(approver_client, composers_run):
    first, second = http_get(composers_run), http_get(child_of(composers_run, "fetcher"))
    html = page(approver_client)
    group = html.split(f'<div class="inbox-group" data-root-run="{composers_run.pk}">', 1)[1].split('id="inbox-empty"')[0]
    assert f'id="approval-{first.pk}"' in group and f'id="approval-{second.pk}"' in group
    assert group.count(f'form="batch-{composers_run.pk}"') == 2
    assert f'<form class="batch-bar" id="batch-{composers_run.pk}"' in group


def test_a_batch_approves_the_ticked_items_of_one_run_together(approver_client, composers_run, queued_tasks):
    first, second = http_get(composers_run), http_get(child_of(composers_run, "fetcher"))
    response = approver_client.post("/inbox/batch/", {"ids": [first.pk, second.pk], "decision": "approve"}, follow=True)
    assert f"#{first.pk}, #{second.pk} approved together" in response.content.decode()
    assert set(Approval.objects.values_list("status", flat=True)) == {"approved"}


def test_a_batch_that_mixes_runs_decides_nothing(approver_client, composers_run, composer):
    first = http_get(composers_run)
    other = http_get(make_run(composer, state="AWAITING_APPROVAL", label="other"))
    response = approver_client.post("/inbox/batch/", {"ids": [first.pk, other.pk], "decision": "approve"}, follow=True)
    assert "Nothing decided" in response.content.decode()
    assert set(Approval.objects.values_list("status", flat=True)) == {"pending"}


def test_a_batch_without_ticked_items_says_what_to_do(approver_client):
    response = approver_client.post("/inbox/batch/", {"decision": "approve"}, follow=True)
    assert "Tick the items to decide together first." in response.content.decode()


@pytest.mark.parametrize(("query", "shown"), [
    ("kind=clarification", {"question"}), ("risk=medium", {"fetch"}), ("q=question", {"question"}),
    ("mine=on", {"fetch"}),
])
def test_filters_narrow_the_pending_list(approver_client, approver, composer, query, shown):
    http_get(make_run(approver, state="AWAITING_APPROVAL", label="own"), title="fetch")
    ask(make_run(composer, state="AWAITING_APPROVAL", label="theirs"), "clarification", title="question", risk="low")
    html = page(approver_client, f"/inbox/?{query}")
    titles = set(re.findall(r'<strong class="item-title">(.*?)</strong>', html))
    assert titles == shown


def test_the_run_filter_keeps_the_items_of_one_runs_tree(approver_client, composers_run, composer):
    inside = http_get(child_of(composers_run, "fetcher"), title="inside")
    http_get(make_run(composer, state="AWAITING_APPROVAL"), title="outside")
    html = page(approver_client, f"/inbox/?run={composers_run.pk}")
    assert re.findall(r'<strong class="item-title">(.*?)</strong>', html) == [inside.title]


def test_a_filter_that_matches_nothing_says_how_to_clear_it(approver_client, composers_run):
    http_get(composers_run)
    html = page(approver_client, "/inbox/?kind=budget")
    assert "No pending item matches these filters" in html and "Clear the filters" in html


def test_a_thousand_pending_items_come_in_pages_oldest_first(approver_client, composers_run):
    Approval.objects.bulk_create([Approval(run=composers_run, key=f"k{n}", kind="capability", title=f"item {n:04}",
                                           payload={"tool": "http_get", "arguments": {"url": f"https://e.com/{n}"}},
                                           requested_at=timezone.now() - timezone.timedelta(seconds=2000 - n))
                                  for n in range(1000)])
    html = page(approver_client)
    assert html.count('class="approval inbox-item') == 20
    assert "item 0000" in html and "item 0020" not in html
    assert "Page 1 of 50" in html and 'id="pending-total" data-count="1000"' in html
    last = page(approver_client, "/inbox/?order=newest&page=50")
    assert "item 0000" in last and "item 0999" not in last


def test_the_live_fragment_renders_a_matching_item_and_nothing_for_others(approver_client, composers_run):
    approval = http_get(composers_run)
    response = approver_client.get(f"/inbox/{approval.pk}/item/")
    html = response.content.decode()
    assert response.status_code == 200 and html.lstrip().startswith('<div class="inbox-group"')
    assert f'id="approval-{approval.pk}"' in html and "hx-post" in html
    assert approver_client.get(f"/inbox/{approval.pk}/item/?kind=budget").status_code == 204
    approval.status = "cancelled"
    approval.save()
    assert approver_client.get(f"/inbox/{approval.pk}/item/").status_code == 204


def test_the_live_fragment_hides_other_peoples_items_from_a_non_approver(outsider_client, composers_run):
    approval = http_get(composers_run)
    assert outsider_client.get(f"/inbox/{approval.pk}/item/").status_code == 204


def test_with_htmx_the_filtered_list_comes_without_the_page(approver_client, composers_run):
    http_get(composers_run)
    html = page(approver_client, "/inbox/?kind=capability", headers={"HX-Request": "true"})
    assert html.lstrip().startswith('<section class="panel approvals') and "<html" not in html


def test_the_history_shows_the_audit_and_searches_it(approver_client, composers_run, other_composer):
    edited = http_get(composers_run, title="edited fetch", status="edited", decision="edit", decided_by=other_composer,
                      decided_at=timezone.now(), edited_arguments={"url": "https://example.org/prices.json"})
    ask(composers_run, title="refused spend", status="rejected", decision="reject", decided_by=other_composer,
        decided_at=timezone.now(), comment="Too expensive")
    ask(composers_run, title="too late", status="expired")
    html = page(approver_client, "/inbox/history/")
    assert "edited fetch" in html and "by <strong>dave</strong>" in html
    assert '<span class="dl add">+  &quot;url&quot;: &quot;https://example.org/prices.json&quot;</span>' in html
    assert "“Too expensive”" in html and "Nobody decided before the deadline" in html
    found = page(approver_client, "/inbox/history/?q=expensive")
    assert "refused spend" in found and "edited fetch" not in found
    assert "Nothing decided matches “zzz”" in page(approver_client, "/inbox/history/?q=zzz")
    assert edited.pk


def test_the_inbox_page_loads_its_live_script_and_keys_help(approver_client):
    html = page(approver_client)
    assert "js/inbox.js" in html and "css/inbox.css" in html
    assert '<dialog id="inbox-keys"' in html and "Select for a batch decision" in html
    assert 'id="notify-me"' in html


@pytest.fixture
def staff_approver_client(approver_client: Any, approver: Any) -> Any:
    """Run pages show a run to its owners and staff: an approver on staff."""
    approver.is_staff = True
    approver.save()
    return approver_client


def test_the_run_page_offers_the_same_decisions_and_shows_the_audit(staff_approver_client, composers_run,
                                                                      other_composer, queued_tasks):
    approver_client = staff_approver_client
    pending = http_get(composers_run)
    ask(composers_run, title="done before", status="rejected", decision="reject", decided_by=other_composer,
        decided_at=timezone.now(), comment="Not that site")
    html = page(approver_client, f"/runs/{composers_run.pk}/")
    assert f'action="/runs/{composers_run.pk}/approvals/{pending.pk}/decision/"' in html
    assert "Always allow http_get for this run" in html and 'name="edited_arguments"' in html
    assert "Lets run “pricing” make one outbound HTTP request" in html
    assert "by <strong>dave</strong>" in html and "“Not that site”" in html
    response = approver_client.post(f"/runs/{composers_run.pk}/approvals/{pending.pk}/decision/",
                                    {"decision": "approve"}, follow=True)
    assert response.redirect_chain == [(f"/runs/{composers_run.pk}/", 302)]
    assert f"#{pending.pk} approved; the run resumes." in response.content.decode()


def test_the_run_page_shows_its_owner_why_they_cannot_decide(admin_user, client):
    run = make_run(admin_user, state="AWAITING_APPROVAL", label="mine")
    http_get(run)
    client.force_login(admin_user)
    html = page(client, f"/runs/{run.pk}/")
    assert '<fieldset class="decide" disabled>' in html and "You started this run" in html


def test_the_run_page_edit_goes_through_the_confirm_page(staff_approver_client, composers_run):
    approver_client = staff_approver_client
    approval = http_get(composers_run)
    response = approver_client.post(f"/runs/{composers_run.pk}/approvals/{approval.pk}/decision/",
                                    {"decision": "edit", "edited_arguments": '{"url": "https://example.org/"}'})
    html = response.content.decode()
    assert "Edit the arguments, then approve" in html and "data-edit-diff" in html
    assert f'action="/runs/{composers_run.pk}/approvals/{approval.pk}/decision/"' in html
    assert f'href="/runs/{composers_run.pk}/"' in html
