"""The run page at scale and afterwards: the live refresh patches only the tree nodes that
changed, big subtrees start folded (unless something in them waits or failed), the
waterfall puts each run's span on one axis, and a finished run's replay holds the tree's
stored events in stored order."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from delegations.models import Approval, Run, RunEvent
from delegations.run_pages.snapshot import STREAM_RUNS, snapshot
from delegations.run_pages.tree_view import (
    TREE_COLLAPSE_ABOVE,
    changed_since,
    tree_changes,
    waterfall,
)
from tests.delegations.runs.test_run_pages import make_run, walk
from tests.delegations.runs.test_run_tree import (
    four_runs,
    nodes_by_label,
    record,
    spawn,
    tool_call,
)

pytestmark = pytest.mark.django_db


def newest_event_id() -> int:
    return int(RunEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0)


# -- the live refresh patches the tree node by node ---------------------------------------------

def test_a_new_event_changes_its_run_and_its_ancestors_only(composer):
    runs = four_runs(composer)
    since = newest_event_id()
    record(runs["a1"], tool_call("read_file"))
    members = list(runs["root"].tree())
    assert changed_since(members, since) == {runs["a1"].pk, runs["a"].pk, runs["root"].pk}
    assert changed_since(members, newest_event_id()) == set()


def test_the_patch_lists_changed_nodes_parents_first_with_their_place(composer):
    runs = four_runs(composer)
    since = newest_event_id()
    c = spawn(runs["root"], "c")
    tree = snapshot(runs["root"])["tree"]
    patch = tree_changes(tree, changed_since(list(runs["root"].tree()), since))
    assert [(change["node"]["run"].label, change["parent"], change["index"]) for change in patch] == [
        ("root", "", 0), ("c", runs["root"].pk, 2)]
    assert c.pk == patch[1]["node"]["run"].pk


def test_the_live_fragment_carries_only_the_changed_nodes_and_inserts_new_ones(composer_client, composer):
    runs = four_runs(composer)
    since = newest_event_id()
    spawn(runs["a"], "a2")
    html = composer_client.get(f"/runs/{runs['root'].pk}/live/?since={since}").content.decode()
    patch = html.split("data-live-tree", 1)[1]
    nodes = re.findall(r'<li class="tree-node[^"]*" data-tree-run="(\w+)" data-parent="(\w*)" data-index="(\d+)"', patch)
    a2 = Run.objects.get(label="a2")
    assert nodes == [(runs["root"].pk, "", "0"), (runs["a"].pk, runs["root"].pk, "0"), (a2.pk, runs["a"].pk, "1")]
    assert 'id="tree-count">3 subagents' not in patch and 'id="tree-count">4 subagents' in patch
    assert f'data-tree-run="{runs["b"].pk}"' not in patch


# -- folding -----------------------------------------------------------------------------------

def wide_tree(owner: Any, *, fail_one: bool = False) -> dict[str, Run]:
    """root -> big (with TREE_COLLAPSE_ABOVE + 1 children) and small (with one)."""
    root = make_run(owner, state="PENDING", label="root")
    walk(root, "ACCEPTED", "WORKING")
    big, small = spawn(root, "big"), spawn(root, "small")
    kids = [spawn(big, f"kid-{index}") for index in range(TREE_COLLAPSE_ABOVE + 1)]
    spawn(small, "only")
    if fail_one:
        walk(kids[3], "FAILED")
    return {"root": root, "big": big, "small": small, "kid": kids[0]}


def test_a_big_subtree_starts_folded_and_a_small_one_open(composer):
    runs = wide_tree(composer)
    nodes = nodes_by_label(snapshot(runs["root"])["tree"])
    assert nodes["big"]["collapsed"] and not nodes["small"]["collapsed"] and not nodes["root"]["collapsed"]


def test_a_big_subtree_with_a_failure_or_a_waiting_approval_in_it_starts_open(composer):
    runs = wide_tree(composer, fail_one=True)
    assert not nodes_by_label(snapshot(runs["root"])["tree"])["big"]["collapsed"]
    runs = wide_tree(composer)
    Approval.objects.create(run=runs["kid"], key="call_x", kind="capability", title="Write a file",
                            payload={}, risk="low")
    assert not nodes_by_label(snapshot(runs["root"])["tree"])["big"]["collapsed"]


def test_the_page_of_a_big_subtree_shows_it_open(composer_client, composer):
    runs = wide_tree(composer)
    html = composer_client.get(f"/runs/{runs['big'].pk}/").content.decode()
    own = re.search(rf'data-tree-run="{runs["big"].pk}"[^>]*>', html)
    assert own and "data-collapsed" not in own.group(0)
    root_page = composer_client.get(f"/runs/{runs['root'].pk}/").content.decode()
    folded = re.search(rf'data-tree-run="{runs["big"].pk}"[^>]*>', root_page)
    assert folded and 'data-collapsed="1"' in folded.group(0)
    assert 'aria-expanded="false"' in root_page


# -- the waterfall ----------------------------------------------------------------------------

def test_the_waterfall_places_each_runs_span_on_one_axis_in_tree_order(composer):
    runs = four_runs(composer)
    start = timezone.now() - timedelta(seconds=100)
    spans = {"root": (0, 100), "a": (10, 60), "a1": (20, 30), "b": (50, 100)}
    for label, (began, ended) in spans.items():
        Run.objects.filter(pk=runs[label].pk).update(started_at=start + timedelta(seconds=began),
                                                     finished_at=start + timedelta(seconds=ended))
    tree = snapshot(Run.objects.get(pk=runs["root"].pk))["tree"]
    rows = waterfall(tree)["rows"]
    assert [(row["run"].label, row["depth"], row["left"], row["width"]) for row in rows] == [
        ("root", 0, 0.0, 100.0), ("a", 1, 10.0, 50.0), ("a1", 2, 20.0, 10.0), ("b", 1, 50.0, 50.0)]


# -- replay -----------------------------------------------------------------------------------

def test_the_replay_holds_every_event_of_the_tree_in_stored_order(composer_client, composer):
    runs = four_runs(composer)
    record(runs["a1"], ("text", {"delta": "Part one."}))
    walk(runs["a1"], "COMPLETE")
    response = composer_client.get(f"/runs/{runs['root'].pk}/replay/")
    assert response.status_code == 200
    body = json.loads(response.content)
    ids = [run["id"] for run in body["runs"]]
    assert ids[0] == runs["root"].pk and set(ids) == {run.pk for run in runs.values()}
    parents = {run["id"]: run["parent"] for run in body["runs"]}
    assert parents[runs["a1"].pk] == runs["a"].pk and parents[runs["root"].pk] is None
    stored = list(RunEvent.objects.filter(run_id__in=ids).order_by("id").values_list("id", "run_id", "type"))
    assert [(event[0], ids[event[1]], event[2]) for event in body["events"]] == stored
    extras = {(ids[event[1]], event[2]): event[4] for event in body["events"]}
    assert extras[(runs["a1"].pk, "model_call")] == [35, 0.002]
    assert extras[(runs["a1"].pk, "text")] == "Part one."
    assert extras[(runs["a1"].pk, "state")] == "COMPLETE"   # its last state event
    assert body["states"]["AWAITING_APPROVAL"] == {"label": "awaiting approval", "tone": "warn"}


def test_the_replay_is_only_for_those_who_may_see_the_run(client, composer, outsider):
    runs = four_runs(composer)
    client.force_login(outsider)
    assert client.get(f"/runs/{runs['root'].pk}/replay/").status_code == 404


def test_a_moment_of_the_replay_fetches_the_rows_up_to_it(composer_client, composer):
    runs = four_runs(composer)
    events = list(RunEvent.objects.filter(run__root=runs["root"]).exclude(type="text").order_by("id"))
    middle = events[len(events) // 2]
    html = composer_client.get(f"/runs/{runs['root'].pk}/live/?since=0&until={middle.pk}").content.decode()
    shown = [int(value) for value in re.findall(r'data-event="(\d+)"', html)]
    assert shown == [event.pk for event in events if event.pk <= middle.pk]
    assert "run-head" not in html   # the rows only
    later = composer_client.get(f"/runs/{runs['root'].pk}/live/?since={middle.pk}&until=bad").content.decode()
    assert re.findall(r'data-event="(\d+)"', later) == []


def test_the_replay_is_offered_by_the_script_once_the_run_has_ended(composer_client, composer):
    # the bar and its script are on every run page, hidden: the script shows "Replay" when
    # the header's state is a final one (at load, or when the live view shows the end)
    runs = four_runs(composer)
    running = composer_client.get(f"/runs/{runs['root'].pk}/").content.decode()
    assert 'id="replay-bar"' in running and "run_replay.js" in running
    assert re.search(r'id="replay-start" hidden', running)
    assert f'data-replay-url="/runs/{runs["root"].pk}/replay/"' in running
    assert 'data-state="WORKING"' in running.split('id="run-head"', 1)[1].split("</h1>", 1)[0]


def test_the_output_area_shows_the_run_and_the_subagents_that_wrote_last(composer_client, composer):
    root = make_run(composer, state="PENDING", label="root")
    walk(root, "ACCEPTED", "WORKING")
    record(root, ("text", {"delta": "Splitting the work."}))
    kids = [spawn(root, f"kid-{index}") for index in range(STREAM_RUNS + 2)]
    for kid in kids:
        record(kid, ("text", {"delta": f"Here is {kid.label}."}))
    html = composer_client.get(f"/runs/{root.pk}/").content.decode()
    shown = re.findall(r'data-stream-run="(\w+)"', html)
    latest = [kid.pk for kid in kids[-(STREAM_RUNS - 1):]]
    assert shown == [root.pk, *latest]   # the run first, then its latest talkers in tree order
    assert "And 3 more subagents wrote output" in html
