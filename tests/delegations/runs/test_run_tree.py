"""The run page's tree as navigation: roll-ups of each subtree, badges for what waits or
failed below a node, per-subtree cancel and messages, and the timeline filtered to a node."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from delegations.models import Approval, Run, RunCheckpoint, RunEvent, RunMessage
from delegations.models.runs import new_run_id
from delegations.run_pages.snapshot import snapshot
from delegations.run_pages.timeline_filter import TimelineFilter
from delegations.runs.execution import execute
from delegations.runs.record import append_events
from delegations.runs.workflows import run_create
from tests.delegations import scripts
from tests.delegations.runs.test_run_pages import detail, make_run, section, walk

pytestmark = pytest.mark.django_db


def model_call(tokens_in: int, tokens_out: int, cost: float) -> tuple[str, dict[str, Any]]:
    return "model_call", {"iteration": 1, "model": "scripted", "input_tokens": tokens_in,
                          "output_tokens": tokens_out, "cost_usd": cost, "tool_calls": 0}


def tool_call(name: str = "list_files") -> tuple[str, dict[str, Any]]:
    return "tool_call", {"id": f"call_{new_run_id()[:6]}", "name": name, "arguments": {}}


def spawn(parent: Run, label: str, **budget: Any) -> Run:
    """A child of ``parent`` as a worker's sink records it: a child event creates the row."""
    child_id = new_run_id()
    append_events([(parent, "child", {
        "child_run_id": child_id, "call_id": f"call_{label}", "label": label, "depth": parent.depth + 1,
        "packet": scripts.packet(goal=f"Find part {label}"), "session_key": f"agent:main:subagent:{child_id}",
        "budget": budget or {"max_tokens": 100}, "capabilities": []})])
    child = Run.objects.get(pk=child_id)
    walk(child, "ACCEPTED", "WORKING")
    return child


def record(run: Run, *events: tuple[str, dict[str, Any]]) -> None:
    append_events([(run, kind, data) for kind, data in events])


def four_runs(owner: Any) -> dict[str, Run]:
    """root -> (a -> a1), b: each with model and tool calls of its own."""
    root = make_run(owner, state="PENDING", label="root",
                    budget={"max_tokens": 1000, "max_cost_usd": 0.05, "max_model_calls": 10})
    walk(root, "ACCEPTED", "WORKING")
    record(root, model_call(100, 20, 0.01), tool_call("delegate_task"))
    a = spawn(root, "a", max_tokens=100)
    record(a, model_call(50, 10, 0.005), tool_call(), tool_call())
    a1 = spawn(a, "a1", max_tokens=40)
    record(a1, model_call(30, 5, 0.002), tool_call())
    b = spawn(root, "b", max_tokens=50)
    record(b, model_call(10, 1, 0.0))
    runs = {"root": root, "a": a, "a1": a1, "b": b}
    for run in runs.values():
        run.refresh_from_db()
    return runs


def nodes_by_label(tree: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = {tree["run"].label: tree}
    for child in tree["children"]:
        found.update(nodes_by_label(child))
    return found


# -- roll-ups -------------------------------------------------------------------------------------

def test_each_nodes_roll_up_is_its_own_usage_plus_its_subtrees(composer):
    runs = four_runs(composer)
    nodes = nodes_by_label(snapshot(runs["root"])["tree"])
    assert (nodes["a1"]["own"].tokens, nodes["a"]["own"].tokens, nodes["b"]["own"].tokens) == (35, 60, 11)
    assert nodes["a1"]["subtree"].tokens == 35
    assert nodes["a"]["subtree"].tokens == 60 + 35
    assert nodes["root"]["subtree"].tokens == 120 + 60 + 35 + 11
    assert nodes["a"]["subtree"].tool_calls == 3 and nodes["root"]["subtree"].tool_calls == 4
    assert nodes["root"]["subtree"].cost_usd == pytest.approx(0.017)
    assert nodes["root"]["subtree"].runtime_s == pytest.approx(
        sum(node["own"].runtime_s for node in nodes.values()))
    for node in nodes.values():
        below = node["own"].tokens + sum(child["subtree"].tokens for child in node["children"])
        assert node["subtree"].tokens == below
    assert (nodes["root"]["child_count"], nodes["root"]["size"], nodes["a"]["child_count"]) == (2, 4, 1)


def test_the_tree_shows_own_and_subtree_figures_and_budget_bars(composer_client, composer):
    runs = four_runs(composer)
    tree = section(detail(composer_client, runs["root"]), "run-tree")
    assert "120 / 226 tok" in tree and "$0.0100 / $0.0170" in tree
    assert "2 children (3 below)" in tree and "4 tool calls" in tree
    # a1 used 35 of its 40 tokens: past the soft threshold (80%), the bar warns
    assert 'aria-label="Tokens: 35 / 40"' in tree
    assert re.search(r'class="meter warn"[^>]*aria-valuenow="87.5"', tree)
    assert 'aria-label="Tokens: 226 / 1,000"' in tree and 'aria-label="Cost: $0.0170 / $0.0500"' in tree


def test_a_node_flags_approvals_waiting_and_runs_failed_below_it(composer_client, composer):
    runs = four_runs(composer)
    Approval.objects.create(run=runs["a1"], key=f"{runs['a1'].pk}:capability:x", kind="capability",
                            title="Delete stale.txt")
    record(runs["b"], ("error", {"code": "ERR_TOOL_FAILURE", "message": "No model."}),
           ("result", {"state": "FAILED", "result": None, "usage": {},
                       "error": {"code": "ERR_TOOL_FAILURE", "message": "No model."}}))
    nodes = nodes_by_label(snapshot(runs["root"])["tree"])
    assert [nodes[label]["pending"] for label in ("root", "a", "a1", "b")] == [1, 1, 1, 0]
    assert [nodes[label]["failed_below"] for label in ("root", "a", "a1", "b")] == [1, 0, 0, 0]
    tree = section(detail(composer_client, runs["root"]), "run-tree")
    assert tree.count("1 waiting") == 3 and tree.count("1 failed below") == 1


def test_the_page_costs_the_same_queries_for_a_bigger_tree(composer_client, composer):
    small = make_run(composer, label="small")
    walk(small, "ACCEPTED", "WORKING")
    spawn(small, "only")
    big = make_run(composer, label="big")
    walk(big, "ACCEPTED", "WORKING")
    for number in range(6):
        child = spawn(big, f"c{number}")
        record(child, model_call(5, 5, 0.0), tool_call())
        spawn(child, f"g{number}")

    def queries(run: Run) -> int:
        with CaptureQueriesContext(connection) as captured:
            html = detail(composer_client, run)
        assert html.count("data-tree-run=") == Run.objects.filter(root_id=run.pk).count()
        return len(captured.captured_queries)

    assert queries(big) == queries(small)   # 13 runs or 2: no query per run


@pytest.mark.django_db(transaction=True)
def test_an_executed_trees_roll_up_equals_what_the_runner_charged(immediate_tasks, composer):
    child = {"script": [scripts.yield_turn(usage={"input_tokens": 40, "output_tokens": 2})]}
    config = scripts.with_child(child)
    config["script"][0]["usage"] = {"input_tokens": 100, "output_tokens": 10}
    run = run_create(packet=scripts.packet(), adapter="scripted", config=config, owner=composer)
    assert run.state == "COMPLETE"
    tree = snapshot(run)["tree"]
    kid = tree["children"][0]
    assert kid["own"].tokens == 42 and kid["own"].model_calls == 1
    assert tree["subtree"].tokens == run.usage["total_tokens"] == tree["own"].tokens + 42
    assert tree["subtree"].model_calls == run.usage["model_calls"] == 3


# -- per-subtree controls ------------------------------------------------------------------------

def test_every_running_node_offers_a_confirmed_subtree_cancel_and_a_message(composer_client, composer):
    runs = four_runs(composer)
    record(runs["b"], ("result", {"state": "COMPLETE", "result": {"status": "SUCCESS"}, "usage": {}}))
    html = detail(composer_client, runs["root"])
    tree = section(html, "run-tree")
    with_controls = {run_id for run_id, chunk in re.findall(
        r'data-tree-run="(\w+)"(.*?)(?=data-tree-run=|$)', tree, flags=re.S) if 'data-node-action="cancel"' in chunk}
    assert with_controls == {runs[label].pk for label in ("root", "a", "a1")}   # b ended
    assert f'data-tree-run="{runs["a"].pk}" data-below="1"' in tree
    # one confirm box and one message box for the whole page, filled in for the node opened
    assert html.count('<template id="node-cancel-box">') == 1 and html.count('<template id="node-message-box">') == 1
    assert 'data-action="/runs/RUN_ID/cancel/"' in html and 'data-action="/runs/RUN_ID/messages/"' in html
    assert "Its parent is told and goes on, and so do its siblings." in html


def test_someone_who_may_not_act_gets_no_node_controls(client, approver, composer):
    runs = four_runs(composer)
    Approval.objects.create(run=runs["root"], key=f"{runs['root'].pk}:capability:x", kind="capability",
                            title="Delete stale.txt")
    client.force_login(approver)
    html = detail(client, runs["root"])
    assert "data-node-action" not in section(html, "run-tree")
    assert "/cancel/" not in html and "node-cancel-box" not in html


def test_a_message_to_a_node_from_the_root_page_returns_to_the_root_page(composer_client, composer):
    runs = four_runs(composer)
    response = composer_client.post(f"/runs/{runs['a1'].pk}/messages/",
                                    {"text": "Check the cache size.", "next": f"/runs/{runs['root'].pk}/"})
    assert response.status_code == 302 and response["Location"] == f"/runs/{runs['root'].pk}/"
    assert RunMessage.objects.get().run_id == runs["a1"].pk
    elsewhere = composer_client.post(f"/runs/{runs['a1'].pk}/messages/",
                                     {"text": "Again.", "next": "https://evil.example/"})
    assert elsewhere["Location"] == f"/runs/{runs['a1'].pk}/"


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the tree")
        time.sleep(0.05)


def state_of(run_id: str) -> str:
    return Run.objects.values_list("state", flat=True).get(pk=run_id)


def two_branches() -> dict[str, Any]:
    """The root delegates to "doomed" (which delegates to a slow "grandkid") and to
    "steady" (which answers after 3 s), then answers itself once both are back."""
    slow = {"script": [scripts.yield_turn(delay_ms=20000)]}
    doomed = {"script": [scripts.delegate_turn("grandkid"), scripts.yield_turn()],
              "children": {"grandkid": slow}}
    steady = {"script": [scripts.yield_turn(delay_ms=3000)]}
    return {"script": [scripts.delegate_turn("doomed", "steady"), scripts.yield_turn()],
            "children": {"doomed": doomed, "steady": steady}}


@pytest.mark.django_db(transaction=True)
def test_cancelling_one_subtree_cascades_while_its_sibling_and_parent_go_on(
        queued_tasks: None, composer: Any, client: Any) -> None:
    client.force_login(composer)
    root = run_create(packet=scripts.packet(allow_nested=True), adapter="scripted",
                      config=two_branches(), owner=composer)
    assert execute(root.pk, wait=False) == "started"
    wait_for(lambda: Run.objects.filter(label="grandkid", state="WORKING").exists())
    doomed, steady, grandkid = (Run.objects.get(label=label) for label in ("doomed", "steady", "grandkid"))

    response = client.post(f"/runs/{doomed.pk}/cancel/", {"next": f"/runs/{root.pk}/"})
    assert response.status_code == 302 and response["Location"] == f"/runs/{root.pk}/"
    wait_for(lambda: state_of(doomed.pk) == "CANCELLED", timeout=5)
    assert state_of(grandkid.pk) == "CANCELLED"
    assert state_of(steady.pk) == "WORKING" and state_of(root.pk) == "WORKING"

    wait_for(lambda: state_of(root.pk) == "COMPLETE")
    assert state_of(steady.pk) == "COMPLETE"
    told = RunEvent.objects.get(run=root, type="tool_result", data__id=doomed_call(root, "doomed"))
    assert told.data["ok"] is False and told.data["error"]["code"] == "CANCELLED"
    assert told.data["result"]["state"] == "CANCELLED"
    # what the root's model read for that call in its next turn
    messages = RunCheckpoint.data_of(root.pk)["messages"]
    answer = next(m for m in messages if m.get("role") == "tool" and m.get("tool_call_id") == told.data["id"])
    assert "doomed was cancelled" in answer["content"] and "CANCELLED" in answer["content"]
    wait_for(lambda: Run.objects.get(pk=root.pk).lease_owner == "")


def doomed_call(root: Run, label: str) -> str:
    child = RunEvent.objects.get(run=root, type="child", data__label=label)
    return str(child.data["call_id"])


# -- the timeline across the tree ----------------------------------------------------------------

def test_the_timeline_holds_every_run_of_the_tree_in_stored_order_with_what_the_script_filters_on(
        composer_client, composer):
    runs = four_runs(composer)
    timeline = section(detail(composer_client, runs["root"]), "run-timeline")
    rows = re.findall(r'data-event="(\d+)" data-run="(\w+)" data-seq="\d+" data-type="(\w+)" data-group="(\w+)"',
                      timeline)
    assert {run_id for _, run_id, _, _ in rows} == {run.pk for run in runs.values()}
    ids = [int(event_id) for event_id, _, _, _ in rows]
    assert ids == sorted(ids)
    groups = {kind: group for _, _, kind, group in rows}
    assert groups == {"state": "state", "model_call": "model", "tool_call": "tools", "child": "tools"}
    assert '<span class="event-run badge neutral"' in timeline and ">a1</span>" in timeline


def test_a_reloaded_page_filters_the_timeline_to_a_node_its_subtree_and_types(composer_client, composer):
    runs = four_runs(composer)
    root_page = f"/runs/{runs['root'].pk}/"

    def shown(query: str) -> set[tuple[str, str]]:
        html = composer_client.get(f"{root_page}?{query}").content.decode()
        return set(re.findall(r'data-run="(\w+)" data-seq="\d+" data-type="(\w+)"', section(html, "run-timeline")))

    only_a = shown(f"node={runs['a'].pk}")
    assert {run_id for run_id, _ in only_a} == {runs["a"].pk}
    subtree = shown(f"node={runs['a'].pk}&subtree=1")
    assert {run_id for run_id, _ in subtree} == {runs["a"].pk, runs["a1"].pk}
    models = shown(f"node={runs['a'].pk}&subtree=1&types=model")
    assert models == {(runs["a"].pk, "model_call"), (runs["a1"].pk, "model_call")}
    assert {kind for _, kind in shown("types=tools,state")} == {"tool_call", "child", "state"}
    page = composer_client.get(f"{root_page}?node={runs['a'].pk}&types=model").content.decode()
    assert 'data-filtered="1"' in page and 'value="model" checked' in page
    assert 'value="tools" checked' not in page and f'value="{runs["a"].pk}"' in page


def test_errors_only_shows_failed_tool_calls_and_errors(composer):
    runs = four_runs(composer)
    record(runs["b"], ("tool_result", {"id": "call_x", "name": "read_file", "ok": False,
                                       "error": {"code": "ERR_TOOL_FAILURE", "message": "No such file."}}),
           ("error", {"code": "ERR_TOOL_FAILURE", "message": "No such file.", "call_id": "call_x"}),
           ("log", {"level": "info", "message": "Moving on."}))
    items = snapshot(runs["root"], shown=TimelineFilter(errors_only=True))["timeline"]
    assert [(item.type, item.run_id) for item in items] == [("tool_result", runs["b"].pk), ("error", runs["b"].pk)]


def test_the_live_fragment_sends_only_rows_stored_after_the_last_one_the_page_has(composer_client, composer):
    runs = four_runs(composer)
    last = RunEvent.objects.filter(run_id__in=[run.pk for run in runs.values()]).order_by("-id").first()
    assert last is not None
    record(runs["a1"], tool_call("read_file"))
    html = composer_client.get(f"/runs/{runs['root'].pk}/live/?since={last.pk}").content.decode()
    rows = re.findall(r'data-event="(\d+)" data-run="(\w+)"', html.split("data-live-append", 1)[1])
    assert len(rows) == 1 and rows[0][1] == runs["a1"].pk and int(rows[0][0]) > last.pk
    newest = RunEvent.objects.order_by("-id").values_list("id", flat=True).first()
    assert f'data-live-append="run-timeline" data-after="{newest}"' in html
