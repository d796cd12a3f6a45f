"""What an inbox item says to the person deciding it: what approving grants, who asks from
where in the delegation chain, the budget left, what the run was doing, the arguments,
the time left; and that an unknown payload still reads."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from delegations.inbox.context import approval_context, approval_contexts, arguments_diff
from delegations.models import Approval, Run
from delegations.runs.record import append_events
from tests.delegations.runs.test_run_pages import make_run

pytestmark = pytest.mark.django_db


def child_of(parent: Run, label: str, **fields: Any) -> Run:
    return Run.objects.create(parent=parent, root_id=parent.root_run_id, depth=parent.depth + 1,
                              owner=parent.owner, label=label, packet={}, input_hash="0" * 64,
                              adapter_name="scripted", state=fields.pop("state", "AWAITING_APPROVAL"),
                              **fields)


def ask(run: Run, kind: str = "capability", **fields: Any) -> Approval:
    fields.setdefault("title", f"{kind} for {run.label}")
    return Approval.objects.create(run=run, key=f"{run.pk}:{kind}:{Approval.objects.count()}", kind=kind,
                                   **fields)


def http_get(run: Run, url: str = "https://example.com/prices.json", **fields: Any) -> Approval:
    return ask(run, payload={"tool": "http_get", "capability": "network_outbound", "arguments": {"url": url},
                             "call_id": "c1", "description": "Make outbound HTTP GET requests to the internet."},
               risk="medium", **fields)


def test_a_network_call_says_which_url_approving_lets_the_subagent_fetch(composer):
    root = make_run(composer, state="AWAITING_APPROVAL", label="pricing")
    fetcher = child_of(root, "fetcher", subagent_type="researcher")
    context = approval_context(http_get(fetcher))
    assert context["grants"][0] == "Lets subagent “fetcher” make one outbound HTTP request to https://example.com/prices.json."
    assert "next http_get call asks again" in context["grants"][1]
    assert "ERR_CONSTRAINT_VIOLATION" in context["rejecting"]
    assert context["argument_rows"] == [{"name": "url", "value": "https://example.com/prices.json", "block": False}]
    assert '"url": "https://example.com/prices.json"' in context["arguments_json"]
    assert context["capability"] == "network_outbound" and context["tool"] == "http_get"


def test_a_file_deletion_names_the_file_and_says_it_cannot_be_undone(composer):
    run = make_run(composer, state="AWAITING_APPROVAL", label="cleanup")
    approval = ask(run, payload={"tool": "delete_file", "capability": "file_delete",
                                 "arguments": {"path": "notes/old.md"}}, risk="high")
    assert approval_context(approval)["grants"][0] == (
        "Lets run “cleanup” delete the file notes/old.md from the run's workspace (it can't be undone).")


def test_a_capability_request_says_what_the_capability_adds_and_why_it_was_asked(composer):
    run = make_run(composer, state="AWAITING_APPROVAL", label="scout")
    approval = ask(run, "capability_request", payload={"capability": "network_outbound",
                                                        "reason": "The docs live online"})
    context = approval_context(approval)
    assert context["grants"][0] == "Adds network_outbound to run “scout”'s capabilities for the rest of its run: it is offered http_get."
    assert "each call still waits here" in context["grants"][1]
    assert context["reason"] == "The docs live online"


def test_the_lineage_runs_from_the_root_to_the_asking_subagent_with_depths(composer):
    root = make_run(composer, state="AWAITING_APPROVAL", label="coordinator", subagent_type="planner")
    middle = child_of(root, "researcher-1", subagent_type="researcher")
    leaf = child_of(middle, "fetcher", subagent_type="executor", skill="web-fetch@1.0.0")
    context = approval_context(http_get(leaf))
    assert [(node["name"], node["role"], node["depth"], node["is_asker"]) for node in context["lineage"]] == [
        ("coordinator", "planner", 0, False), ("researcher-1", "researcher", 1, False), ("fetcher", "executor", 2, True)]
    assert context["asker"]["skill"] == "web-fetch@1.0.0"
    assert context["root_name"] == "coordinator" and context["root_budget"] is not None


def test_the_budget_shows_what_is_used_and_left_on_every_axis(composer):
    run = make_run(composer, state="AWAITING_APPROVAL", label="pricing",
                   budget={"max_model_calls": 10, "max_tokens": 1000, "max_cost_usd": 0.5},
                   usage={"model_calls": 4, "input_tokens": 600, "output_tokens": 200, "cost_usd": 0.125})
    rows = {row["label"]: row for row in approval_context(http_get(run))["budget"]}
    assert (rows["Model calls"]["used"], rows["Model calls"]["limit"], rows["Model calls"]["left"]) == ("4", "10", "6")
    assert (rows["Tokens"]["used"], rows["Tokens"]["left"], rows["Tokens"]["percent"]) == ("800", "200", 80)
    assert rows["Cost"]["left"] == "$0.3750"
    assert rows["Time"]["limit"] == "no limit" and rows["Time"]["percent"] is None


def test_it_tells_what_the_run_did_before_it_parked(composer):
    run = make_run(composer, state="AWAITING_APPROVAL", label="pricing")
    append_events([(run, "state", {"state": "WORKING", "previous": "ACCEPTED"}),
                   (run, "text", {"delta": "Here is my answer."}), (run, "model_call", {"output_tokens": 4}),
                   (run, "text", {"delta": "Fetching the "}), (run, "text", {"delta": "price list."}),
                   (run, "tool_call", {"id": "c0", "name": "read_file", "arguments": {"path": "a.txt"}}),
                   (run, "tool_result", {"id": "c0", "name": "read_file", "ok": True, "result": {"size": 3}}),
                   (run, "tool_call", {"id": "c1", "name": "http_get", "arguments": {"url": "https://example.com"}})])
    run.refresh_from_db()
    context = approval_context(http_get(run))
    assert [(line["title"], line["body"]) for line in context["recent"]] == [
        ("The model said", "Here is my answer."),   # another turn's words are another line
        ("The model said", "Fetching the price list."), ("Called read_file", '{"path": "a.txt"}'),
        ("read_file succeeded", '{"size": 3}'), ("Called http_get", '{"url": "https://example.com"}')]
    assert context["tool_calls"] == 2
    assert context["goal"] == "Compare three caching options"


def test_a_budget_item_offers_a_raise_no_higher_than_the_parent_has_left(composer):
    root = make_run(composer, state="AWAITING_APPROVAL", label="coordinator",
                    budget={"max_tokens": 10_000}, usage={"input_tokens": 4_000, "output_tokens": 1_000})
    child = child_of(root, "writer", budget={"max_tokens": 2_000})
    approval = ask(child, "budget", payload={"axis": "max_tokens", "limit": 2000, "used": 1700, "threshold": 0.8})
    context = approval_context(approval)
    assert context["budget_ask"]["ceiling"] == 5000 and context["budget_ask"]["suggested"] == 3000
    assert "it has used 1,700 of 2,000" in context["grants"][0]
    assert "can't be above what its parent has left (5,000 more)" in context["grants"][2]
    assert "ERR_RESOURCE_EXHAUSTED" in context["rejecting"]


def test_a_clarification_shows_its_questions(composer):
    run = make_run(composer, state="AWAITING_APPROVAL", label="writer")
    approval = ask(run, "clarification", payload={"questions": ["Which currency?", "Which year?"], "summary": "Blocked"})
    context = approval_context(approval)
    assert context["questions"] == ["Which currency?", "Which year?"]
    assert "joins run “writer”'s conversation" in context["grants"][0]


def test_the_time_left_counts_to_the_deadline(composer):
    run = make_run(composer, state="AWAITING_APPROVAL")
    soon = http_get(run, expires_at=timezone.now() + timedelta(minutes=30, seconds=5))
    later = http_get(run, expires_at=timezone.now() + timedelta(hours=23, minutes=59, seconds=30))
    none = http_get(run)
    assert approval_context(soon)["time_left"]["text"] == "30 min left" and approval_context(soon)["time_left"]["urgent"]
    assert approval_context(later)["time_left"]["text"] == "23 h 59 min left"
    assert approval_context(none)["time_left"] is None


def test_an_unknown_kind_or_a_malformed_payload_falls_back_to_its_json(composer):
    run = make_run(composer, state="AWAITING_APPROVAL")
    odd = ask(run, "capability", payload=["not", "an", "object"])
    context = approval_context(odd)
    assert not context["readable"] or context["argument_rows"] == []
    assert '"not"' in context["raw_json"]
    weird = Approval.objects.create(run=run, key="weird", kind="telepathy", title="?", payload={"x": 1})
    assert approval_context(weird)["readable"] is False and '"x": 1' in approval_context(weird)["raw_json"]


def test_a_page_of_contexts_costs_the_same_queries_for_ten_items_as_for_two(composer):
    def page_queries(count: int) -> int:
        approvals = []
        for number in range(count):
            root = make_run(composer, state="AWAITING_APPROVAL", label=f"root-{number}")
            approvals.append(http_get(child_of(child_of(root, f"mid-{number}"), f"leaf-{number}")))
        rows = list(Approval.objects.filter(pk__in=[a.pk for a in approvals]).select_related("run"))
        with CaptureQueriesContext(connection) as queries:
            approval_contexts(rows)
        return len(queries)

    assert page_queries(2) == page_queries(10)


def test_the_diff_of_edited_arguments_shows_what_changed():
    lines = arguments_diff({"url": "https://a.example"}, {"url": "https://b.example"})
    assert {"kind": "del", "text": '-  "url": "https://a.example"'} in lines
    assert {"kind": "add", "text": '+  "url": "https://b.example"'} in lines
    assert arguments_diff({"url": "x"}, {"url": "x"}) == []
