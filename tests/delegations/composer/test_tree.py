"""The tree editor: budgets that shrink down the tree, adding, editing, moving, removing
and putting back nodes, undoing and redoing each change, running the tree, and who may see it."""

from __future__ import annotations

import html
import json
from typing import Any

import pytest
from django.urls import reverse

from delegations.accounts.roles import COMPOSERS
from delegations.composer.services import delegation_create, delegation_delete, delegation_update
from delegations.composer.tree import child_refusal, left_after, load_tree, roll_up, unique_label
from delegations.composer.tree_history import HISTORY_LIMIT
from delegations.models import Delegation, Run
from delegations.protocol.budgets import Budget
from tests.conftest import make_user
from tests.delegations import scripts

pytestmark = [pytest.mark.django_db]

HTMX = {"HTTP_HX_REQUEST": "true"}


def add(owner: Any, name: str, parent: Delegation | None = None, **packet: Any) -> Delegation:
    depth = 0 if parent is None else _depth_of(parent)
    return delegation_create(owner=owner, name=name, parent=parent,
                             packet=scripts.packet(label=name.replace(" ", "-"), depth=depth, **packet))


def _depth_of(delegation: Delegation) -> int:
    depth = 1
    while delegation.parent_id is not None:
        delegation, depth = Delegation.objects.get(pk=delegation.parent_id), depth + 1
    return depth


def tree_url(root: Delegation, action: str = "") -> str:
    return reverse("delegations:delegation_tree", args=[root.pk]) + action


def node_url(root: Delegation, node: Delegation, action: str) -> str:
    return f"{tree_url(root)}{node.pk}/{action}/"


@pytest.fixture
def root(composer: Any) -> Delegation:
    return add(composer, "study", feature_name="caching", context={"original_request": "Pick a cache"},
               capabilities=["web_search", "file_read"],
               budget={"max_model_calls": 20, "max_tokens": 100000, "max_cost_usd": 1.0})


# -- the picture --------------------------------------------------------------------------------

def test_a_new_child_is_capped_at_what_the_parent_has_left_after_its_other_children(
        composer: Any, root: Delegation) -> None:
    add(composer, "first", root, budget={"max_model_calls": 12, "max_tokens": 30000, "max_cost_usd": 0.3})
    left = load_tree(root).left_for_a_new_child()
    assert left == {"max_model_calls": 8, "max_tokens": 70000, "max_cost_usd": 0.7}


def test_what_is_left_never_goes_below_zero_and_an_unlimited_axis_stays_unlimited() -> None:
    left = left_after(Budget(max_model_calls=5), [Budget(max_model_calls=4), Budget(max_model_calls=3)])
    assert left == {"max_model_calls": 0, "max_tokens": None, "max_cost_usd": None}


def test_children_promised_more_than_the_parent_has_are_flagged(composer: Any, root: Delegation) -> None:
    add(composer, "first", root, budget={"max_model_calls": 15})
    add(composer, "second", root, budget={"max_model_calls": 10})
    calls = load_tree(root).rollup[0]
    assert (calls.axis, calls.promised, calls.available, calls.over, calls.excess) == (
        "max_model_calls", 25, 20, True, 5)


def test_children_within_the_parent_are_not_flagged() -> None:
    [calls, *_] = roll_up(Budget(max_model_calls=20), [Budget(max_model_calls=15), Budget()])
    assert (calls.promised, calls.over, calls.open_children) == (15, False, 1)


def test_a_childs_bar_is_its_budget_narrowed_to_its_parents(composer: Any, root: Delegation) -> None:
    add(composer, "greedy", root, budget={"max_model_calls": 50, "max_tokens": 25000})
    calls, tokens, cost = load_tree(root).children[0].bars
    assert (calls.value, calls.cap, calls.over, calls.percent) == (20, 20, True, 100)
    assert (tokens.value, tokens.percent, tokens.over) == (25000, 25, False)
    assert (cost.asked, cost.value, cost.percent) == (None, 1.0, 100)


def test_no_child_may_be_added_beyond_the_roots_max_depth() -> None:
    assert child_refusal(1, 2) == ""
    refusal = child_refusal(2, 2)
    assert "depth 3" in refusal and "max_depth (2)" in refusal


def test_a_new_label_is_a_slug_made_unique_among_its_siblings() -> None:
    assert unique_label("Find the docs", {"find-the-docs", "find-the-docs-2"}) == "find-the-docs-3"


# -- the page -----------------------------------------------------------------------------------

def test_the_page_draws_a_three_level_tree(composer_client: Any, composer: Any, root: Delegation) -> None:
    child = add(composer, "child one", root, budget={"max_model_calls": 10}, allow_nested=True)
    add(composer, "grandchild", child, budget={"max_model_calls": 4})
    page = composer_client.get(tree_url(root))
    html = page.content.decode()
    assert page.status_code == 200
    assert 'role="tree"' in html and html.count('role="treeitem"') == 3
    assert 'aria-level="3"' in html and "grandchild" in html
    assert "4 of 10" in html and "10 of 20" in html   # the bars shrink down the chain
    assert "Starting the root starts one run." in html


def test_a_tree_without_children_says_how_to_start(composer_client: Any, root: Delegation) -> None:
    page = composer_client.get(tree_url(root))
    assert "No subagents yet: add one to plan what this delegation hands off" in page.content.decode()


def test_adding_a_child_prefills_from_the_parent_and_caps_its_budget(
        composer_client: Any, composer: Any, root: Delegation) -> None:
    add(composer, "first", root, budget={"max_model_calls": 12})
    form = composer_client.get(tree_url(root, f"?add={root.pk}")).content.decode()
    assert 'max="8"' in form
    response = composer_client.post(node_url(root, root, "children"), {
        "name": "Find the docs", "goal": "Find the caching docs and summarize them", "subagent_type": "researcher",
        "max_model_calls": "8", "max_tokens": "5000", "max_cost_usd": "", "capabilities": ["web_search"]})
    assert response.status_code == 302
    child = Delegation.objects.get(name="Find the docs")
    assert child.parent == root and child.position == 1
    assert child.packet["label"] == "find-the-docs" and child.packet["depth"] == 1
    assert child.packet["feature_name"] == "caching"
    assert child.packet["context"]["original_request"] == "Pick a cache"
    assert child.packet["budget"] == {"max_model_calls": 8, "max_tokens": 5000}   # cost: whatever is left
    assert child.packet["capabilities"] == ["web_search"]


def test_a_child_asking_for_more_than_is_left_is_refused(composer_client: Any, composer: Any,
                                                         root: Delegation) -> None:
    add(composer, "first", root, budget={"max_model_calls": 12})
    response = composer_client.post(node_url(root, root, "children"), {
        "name": "greedy", "goal": "Use everything", "max_model_calls": "9", "capabilities": ["shell"]})
    html = response.content.decode()
    assert response.status_code == 422 and not Delegation.objects.filter(name="greedy").exists()
    assert "study has 8 left after its other children" in html
    assert "shell is not one of the available choices" in html


def test_a_node_at_the_depth_limit_offers_no_add_button_and_refuses_a_child(
        composer_client: Any, composer: Any) -> None:
    root = add(composer, "shallow", max_depth=1)
    child = add(composer, "leaf", root, max_depth=1)
    html = composer_client.get(tree_url(root)).content.decode()
    assert html.count(">Add a child</a>") == 1   # only the root's
    assert "beyond the root&#x27;s max_depth (1)" in html
    response = composer_client.post(node_url(root, child, "children"), {"name": "deeper", "goal": "More"})
    assert response.status_code == 422 and not Delegation.objects.filter(name="deeper").exists()


def test_renaming_a_node_saves_a_new_version(composer_client: Any, composer: Any, root: Delegation) -> None:
    child = add(composer, "first", root)
    response = composer_client.post(node_url(root, child, "edit"), {
        "name": "renamed", "goal": "A sharper goal for the first child", "base_version": "1"}, **HTMX)
    child.refresh_from_db()
    assert response.status_code == 200 and "<html" not in response.content.decode()
    assert (child.name, child.version, child.packet["goal"]) == ("renamed", 2, "A sharper goal for the first child")
    assert list(child.versions.values_list("number", flat=True)) == [1, 2]


def test_a_stale_rename_is_refused_and_says_who_saved_in_between(
        composer_client: Any, composer: Any, admin_user: Any, root: Delegation) -> None:
    child = add(composer, "first", root)
    delegation_update(delegation=child, user=admin_user, base_version=1, name="theirs")
    response = composer_client.post(node_url(root, child, "edit"), {
        "name": "mine", "goal": child.packet["goal"], "base_version": "1"}, **HTMX)
    html = response.content.decode()
    child.refresh_from_db()
    assert response.status_code == 409 and child.name == "theirs"
    assert "root saved version 2" in html and 'value="mine"' in html and 'value="2"' in html


@pytest.mark.parametrize(("moved", "direction", "order"), [
    ("c", "up", ["a", "c", "b"]), ("a", "down", ["b", "a", "c"])])
def test_moving_a_node_reorders_its_siblings_and_keeps_versions(
        composer_client: Any, composer: Any, root: Delegation, moved: str, direction: str,
        order: list[str]) -> None:
    for name in "abc":
        add(composer, name, root)
    node = Delegation.objects.get(name=moved)
    response = composer_client.post(node_url(root, node, "move"), {"direction": direction})
    assert response.status_code == 302
    children = list(root.children.order_by("position"))
    assert [child.name for child in children] == order
    assert [child.position for child in children] == [0, 1, 2]
    node.refresh_from_db()
    assert node.version == 2 and node.versions.count() == 2


def test_a_node_dragged_to_a_place_goes_there_and_undo_puts_it_back(
        composer_client: Any, composer: Any, root: Delegation) -> None:
    for name in "abcd":
        add(composer, name, root)
    moved = Delegation.objects.get(name="d")
    response = composer_client.post(node_url(root, moved, "move"), {"to": "0"}, **HTMX)
    assert response.status_code == 200 and "Moved d to place 1." in response.content.decode()
    assert names(root) == ["d", "a", "b", "c"]
    undo(composer_client, root)
    assert names(root) == ["a", "b", "c", "d"]
    redo(composer_client, root)
    assert names(root) == ["d", "a", "b", "c"]


@pytest.mark.parametrize("data", [{"to": "9"}, {"to": "-1"}, {"to": "first"}, {}])
def test_a_move_to_nowhere_is_refused_and_changes_nothing(composer_client: Any, composer: Any,
                                                         root: Delegation, data: dict[str, str]) -> None:
    for name in "ab":
        add(composer, name, root)
    response = composer_client.post(node_url(root, Delegation.objects.get(name="a"), "move"), data)
    assert response.status_code in (400, 422)
    assert names(root) == ["a", "b"]


def test_the_first_sibling_cannot_move_up(composer_client: Any, composer: Any, root: Delegation) -> None:
    first = add(composer, "a", root)
    add(composer, "b", root)
    response = composer_client.post(node_url(root, first, "move"), {"direction": "up"})
    assert response.status_code == 400 and "already first among its siblings" in response.content.decode()
    first.refresh_from_db()
    assert (first.position, first.version) == (0, 1)


def test_removing_asks_first_then_undo_puts_the_subtree_back(
        composer_client: Any, composer: Any, root: Delegation) -> None:
    add(composer, "a", root)
    child = add(composer, "b", root, allow_nested=True)
    add(composer, "grandchild", child, budget={"max_model_calls": 2})
    add(composer, "c", root)
    confirm = composer_client.get(tree_url(root, f"?remove={child.pk}")).content.decode()
    assert "Remove b and the 1 subagent under it?" in confirm
    assert composer_client.post(node_url(root, child, "remove")).status_code == 302
    assert not Delegation.objects.filter(name__in=["b", "grandchild"]).exists()
    assert [kid.position for kid in root.children.order_by("position")] == [0, 1]
    assert "Removed b." in composer_client.get(tree_url(root)).content.decode()
    assert composer_client.post(tree_url(root, "undo/")).status_code == 302
    restored = Delegation.objects.get(name="b")
    assert [kid.name for kid in root.children.order_by("position")] == ["a", "b", "c"]
    assert restored.packet["allow_nested"] is True
    assert restored.children.get().packet["budget"] == {"max_model_calls": 2}
    assert "Removed b." not in composer_client.get(tree_url(root)).content.decode()


# -- undo and redo ------------------------------------------------------------------------------

def undo(client: Any, root: Delegation) -> Any:
    return client.post(tree_url(root, "undo/"), **HTMX)


def redo(client: Any, root: Delegation) -> Any:
    return client.post(tree_url(root, "redo/"), **HTMX)


def rename(client: Any, root: Delegation, node: Delegation, name: str) -> None:
    node.refresh_from_db()
    response = client.post(node_url(root, node, "edit"), {
        "name": name, "goal": node.packet["goal"], "base_version": str(node.version)})
    assert response.status_code == 302


def names(root: Delegation) -> list[str]:
    return [kid.name for kid in root.children.order_by("position")]


def test_an_edit_is_undone_and_redone_each_as_a_new_version(
        composer_client: Any, composer: Any, root: Delegation) -> None:
    child = add(composer, "first", root)
    goal = child.packet["goal"]
    composer_client.post(node_url(root, child, "edit"), {
        "name": "renamed", "goal": "A sharper goal for the first child", "base_version": "1"})
    response = undo(composer_client, root)
    child.refresh_from_db()
    assert response.status_code == 200 and "Undid editing renamed." in response.content.decode()
    assert (child.name, child.packet["goal"], child.version) == ("first", goal, 3)
    assert redo(composer_client, root).status_code == 200
    child.refresh_from_db()
    assert (child.name, child.packet["goal"], child.version) == ("renamed", "A sharper goal for the first child", 4)
    assert list(child.versions.order_by("number").values_list("name", flat=True)) == [
        "first", "renamed", "first", "renamed"]


def test_an_added_child_is_deleted_by_undo_and_made_again_by_redo(
        composer_client: Any, composer: Any, root: Delegation) -> None:
    add(composer, "a", root)
    composer_client.post(node_url(root, root, "children"), {"name": "checker", "goal": "Check the pick"})
    packet = Delegation.objects.get(name="checker").packet
    html = undo(composer_client, root).content.decode()
    assert names(root) == ["a"] and "Redo adding checker" in html
    assert redo(composer_client, root).status_code == 200
    assert names(root) == ["a", "checker"] and Delegation.objects.get(name="checker").packet == packet


def test_redoing_an_addition_and_then_an_edit_of_it_reaches_the_child_made_again(
        composer_client: Any, composer: Any, root: Delegation) -> None:
    composer_client.post(node_url(root, root, "children"), {"name": "checker", "goal": "Check the pick"})
    rename(composer_client, root, Delegation.objects.get(name="checker"), "final checker")
    undo(composer_client, root)
    undo(composer_client, root)
    assert names(root) == []
    redo(composer_client, root)
    assert redo(composer_client, root).status_code == 200
    assert names(root) == ["final checker"]


def test_a_move_is_undone_by_moving_back_and_redone(composer_client: Any, composer: Any,
                                                   root: Delegation) -> None:
    for name in "abc":
        add(composer, name, root)
    moved = Delegation.objects.get(name="c")
    composer_client.post(node_url(root, moved, "move"), {"direction": "up"})
    assert "Undo moving c up" in composer_client.get(tree_url(root)).content.decode()
    undo(composer_client, root)
    assert names(root) == ["a", "b", "c"]
    assert [kid.position for kid in root.children.order_by("position")] == [0, 1, 2]
    moved.refresh_from_db()
    assert moved.version == 3 and moved.versions.count() == 3
    redo(composer_client, root)
    assert names(root) == ["a", "c", "b"]


def test_a_removal_is_redone_and_undone_again_with_its_subtree(
        composer_client: Any, composer: Any, root: Delegation) -> None:
    add(composer, "a", root)
    child = add(composer, "b", root, allow_nested=True)
    add(composer, "grandchild", child, budget={"max_model_calls": 2})
    composer_client.post(node_url(root, child, "remove"))
    undo(composer_client, root)
    html = redo(composer_client, root).content.decode()
    assert names(root) == ["a"] and not Delegation.objects.filter(name="grandchild").exists()
    assert "Removed b." in html   # the notice offers to put it back again
    undo(composer_client, root)
    assert names(root) == ["a", "b"]
    assert Delegation.objects.get(name="b").children.get().name == "grandchild"


def test_a_new_change_clears_what_could_be_redone(composer_client: Any, composer: Any,
                                                  root: Delegation) -> None:
    first = add(composer, "a", root)
    second = add(composer, "b", root)
    composer_client.post(node_url(root, second, "move"), {"direction": "up"})
    undo(composer_client, root)
    rename(composer_client, root, first, "renamed")
    html = composer_client.get(tree_url(root)).content.decode()
    assert 'title="Nothing to redo: no change has been undone" disabled' in html
    response = redo(composer_client, root)
    assert response.status_code == 404 and "There is nothing to redo in this tree." in response.content.decode()
    assert names(root) == ["renamed", "b"]


def test_the_page_own_moves_do_not_make_an_earlier_edit_stale(
        composer_client: Any, composer: Any, root: Delegation) -> None:
    first = add(composer, "a", root)
    second = add(composer, "b", root)
    rename(composer_client, root, first, "renamed")
    composer_client.post(node_url(root, second, "move"), {"direction": "up"})   # saves a again, moved down
    undo(composer_client, root)
    assert undo(composer_client, root).status_code == 200
    assert names(root) == ["a", "b"]


def test_undoing_a_change_someone_else_saved_over_is_refused_and_dropped(
        composer_client: Any, composer: Any, admin_user: Any, root: Delegation) -> None:
    first = add(composer, "a", root)
    add(composer, "b", root)
    third = add(composer, "c", root)
    composer_client.post(node_url(root, third, "move"), {"direction": "up"})
    rename(composer_client, root, first, "mine")
    first.refresh_from_db()
    delegation_update(delegation=first, user=admin_user, base_version=first.version, name="theirs")
    response = undo(composer_client, root)
    html = response.content.decode()
    assert response.status_code == 409 and "Could not undo renaming a to mine: theirs was saved elsewhere" in html
    assert "That step is dropped from the history." in html and "Undo moving c up" in html
    first.refresh_from_db()
    assert first.name == "theirs"
    assert undo(composer_client, root).status_code == 200   # the step before it still undoes
    assert names(root) == ["theirs", "b", "c"]


def test_undoing_a_change_to_a_node_deleted_meanwhile_is_refused_and_dropped(
        composer_client: Any, composer: Any, root: Delegation) -> None:
    child = add(composer, "a", root)
    rename(composer_client, root, child, "mine")
    delegation_delete(delegation=child, user=composer)
    response = undo(composer_client, root)
    assert response.status_code == 409
    assert "the delegation it changed is no longer in this tree" in response.content.decode()
    assert undo(composer_client, root).status_code == 404


def test_each_tree_has_its_own_history(composer_client: Any, composer: Any, root: Delegation) -> None:
    other = add(composer, "other study")
    kid = add(composer, "kid", other)
    rename(composer_client, other, kid, "renamed kid")
    assert undo(composer_client, root).status_code == 404
    assert undo(composer_client, other).status_code == 200
    kid.refresh_from_db()
    assert kid.name == "kid"


def test_the_history_keeps_only_the_latest_changes(composer_client: Any, composer: Any,
                                                   root: Delegation) -> None:
    child = add(composer, "a", root)
    for number in range(HISTORY_LIMIT + 1):
        rename(composer_client, root, child, f"name {number}")
    for _ in range(HISTORY_LIMIT):
        assert undo(composer_client, root).status_code == 200
    assert undo(composer_client, root).status_code == 404
    child.refresh_from_db()
    assert child.name == "name 0"   # the oldest rename fell out of the history


def test_the_top_of_the_tree_cannot_be_removed_from_it(composer_client: Any, root: Delegation) -> None:
    response = composer_client.post(node_url(root, root, "remove"))
    assert response.status_code == 400 and Delegation.objects.filter(pk=root.pk).exists()


def test_the_problems_list_links_each_finding_to_where_it_is_fixed(
        composer_client: Any, composer: Any, root: Delegation) -> None:
    greedy = add(composer, "greedy", root, budget={"max_model_calls": 50})
    html = composer_client.get(tree_url(root)).content.decode()
    assert "max_model_calls asks for 50 model calls but the parent allows at most 20" in html
    assert f'href="/delegations/{greedy.pk}/#id_budget__max_model_calls"' in html


@pytest.mark.django_db(transaction=True)
def test_running_the_tree_starts_one_run_and_lands_on_its_page(
        client: Any, django_user_model: Any, immediate_tasks: None) -> None:
    owner = make_user(django_user_model, "erin", COMPOSERS, password=None)
    client.force_login(owner)
    root = add(owner, "coordinator", budget={"max_model_calls": 20, "max_tokens": 100000})
    add(owner, "kid", root, budget={"max_model_calls": 5})
    response = client.post(tree_url(root, "run/"), {
        "adapter": "scripted", "adapter_config": json.dumps(scripts.with_child(label="kid"))})
    run = Run.objects.get(delegation=root, parent__isnull=True)
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/"
    assert run.children.get().packet["label"] == "kid"


def test_another_users_tree_is_not_found(client: Any, django_user_model: Any, root: Delegation) -> None:
    other = make_user(django_user_model, "dave", COMPOSERS, password=None)
    client.force_login(other)
    assert client.get(tree_url(root)).status_code == 404
    assert client.post(node_url(root, root, "edit"), {"name": "mine", "base_version": "1"}).status_code == 404
    root.refresh_from_db()
    assert root.name == "study"


def test_a_node_outside_the_tree_is_not_found(composer_client: Any, composer: Any, root: Delegation) -> None:
    elsewhere = add(composer, "elsewhere")
    response = composer_client.post(node_url(root, elsewhere, "edit"), {"name": "moved", "base_version": "1"})
    assert response.status_code == 404


def test_someone_without_the_composer_role_is_refused(outsider_client: Any, root: Delegation) -> None:
    assert outsider_client.get(tree_url(root)).status_code == 403


# -- the tree as JSON ------------------------------------------------------------------------

def _tree_json(client: Any, root: Delegation) -> dict[str, Any]:
    text = client.get(tree_url(root)).content.decode()
    start = text.index('id="tree-json-text"')
    body = text[text.index(">", start) + 1:text.index("</textarea>", start)]
    return json.loads(html.unescape(body))


def test_the_tree_page_shows_the_whole_tree_as_one_packet(composer_client: Any, composer: Any,
                                                          root: Delegation) -> None:
    first = add(composer, "first", root, goal="Read option a")
    add(composer, "deep", first, goal="Read the appendix")
    packet = _tree_json(composer_client, root)
    assert [child["label"] for child in packet["planned_children"]] == ["first"]
    assert packet["planned_children"][0]["planned_children"][0]["goal"] == "Read the appendix"


def test_applying_edited_json_updates_matching_nodes_and_adds_new_ones(composer_client: Any, composer: Any,
                                                                       root: Delegation) -> None:
    first = add(composer, "first", root, goal="Read option a", budget={"max_model_calls": 4})
    packet = _tree_json(composer_client, root)
    packet["goal"] = "Pick a cache for the session store"
    packet["planned_children"][0]["goal"] = "Read option a closely"
    packet["planned_children"].append({**packet["planned_children"][0], "label": "second",
                                       "goal": "Read option b"})
    response = composer_client.post(tree_url(root, "json/"), {"packet_json": json.dumps(packet),
                                                              "base_version": root.version})
    assert response.status_code == 302
    root.refresh_from_db()
    first.refresh_from_db()
    assert root.packet_dict()["goal"] == "Pick a cache for the session store" and root.version == 2
    assert "planned_children" not in root.packet_dict()   # the children are nodes, not packet text
    assert first.packet_dict()["goal"] == "Read option a closely" and first.version == 2
    second = root.children.get(name="second")
    assert second.packet_dict()["goal"] == "Read option b" and second.position > first.position


def test_json_that_does_not_read_changes_nothing_and_says_why(composer_client: Any, root: Delegation) -> None:
    response = composer_client.post(tree_url(root, "json/"), {"packet_json": '{"goal": 42}',
                                                              "base_version": root.version}, **HTMX)
    assert response.status_code == 422
    text = response.content.decode()
    assert "Nothing changed: Handoff could not read that as a packet" in text
    # said beside the JSON, which stays open with what was typed
    assert '<details class="panel tree-json" id="tree-json" open>' in text and "data-json-error" in text
    assert '>{&quot;goal&quot;: 42}</textarea>' in text
    root.refresh_from_db()
    assert root.version == 1


def test_applying_json_on_a_stale_version_is_refused(composer_client: Any, composer: Any,
                                                     root: Delegation) -> None:
    packet = _tree_json(composer_client, root)
    delegation_update(delegation=root, user=composer, base_version=1, name="renamed meanwhile")
    packet["goal"] = "Something else"
    response = composer_client.post(tree_url(root, "json/"), {"packet_json": json.dumps(packet),
                                                              "base_version": 1}, **HTMX)
    assert response.status_code == 409
    assert "Nothing changed" in response.content.decode()
    root.refresh_from_db()
    assert root.packet_dict()["goal"] != "Something else"


def test_a_tree_pasted_into_the_composer_is_saved_as_nodes(composer_client: Any, composer: Any) -> None:
    from tests.delegations.composer.test_pages import form_data

    tree = scripts.packet(label="top", goal="Plan the migration", budget={"max_model_calls": 10},
                          planned_children=[scripts.packet(label="reader", goal="Read the schema", depth=1,
                                                           budget={"max_model_calls": 3})])
    filled = composer_client.post("/delegations/new/", {"action": "import", "packet_json": json.dumps(tree)})
    response = composer_client.post("/delegations/new/", form_data(filled, action="save", name="Migration"))
    assert response.status_code == 302, response.content.decode()[:2000]
    saved = Delegation.objects.get(name="Migration")
    assert "planned_children" not in saved.packet_dict()
    assert [child.packet_dict()["goal"] for child in saved.children.all()] == ["Read the schema"]


# -- running the tree as drawn ------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_a_tree_rooted_in_a_skill_runs_every_planned_child_it_delegates_to(
        client: Any, django_user_model: Any, immediate_tasks: None) -> None:
    owner = make_user(django_user_model, "erin", COMPOSERS, password=None)
    client.force_login(owner)
    scripts.add_caching_skill()
    # a skill's run delegates only when nesting is allowed, and the reader is a subagent
    # without allow_nested: both plan children, so both delegate to them
    root = add(owner, "coordinator", skill="caching", budget={"max_model_calls": 20, "max_tokens": 100000})
    reader = add(owner, "reader", root, budget={"max_model_calls": 8})
    add(owner, "checker", reader, budget={"max_model_calls": 2})
    assert not load_tree(root).run_refusal()
    config = {"script": [scripts.delegate_turn("reader"), scripts.yield_turn()], "children": {
        "reader": {"script": [scripts.delegate_turn("checker"), scripts.yield_turn()],
                   "children": {"checker": scripts.leaf()}}}}
    client.post(tree_url(root, "run/"), {"adapter": "scripted", "adapter_config": json.dumps(config)})
    run = Run.objects.get(delegation=root, parent__isnull=True)
    child = run.children.get()
    grandchild = child.children.get()
    assert (run.state, child.state, grandchild.state) == ("COMPLETE", "COMPLETE", "COMPLETE")
    assert (child.label, grandchild.label) == ("reader", "checker")
    assert not run.descendants.filter(events__type="error").exists()
    assert not run.events.filter(type="error").exists()


def test_a_child_may_take_the_same_budget_in_the_add_form_and_in_lint(
        composer_client: Any, composer: Any, root: Delegation) -> None:
    add(composer, "first", root, budget={"max_model_calls": 8})
    assert load_tree(root).left_for_a_new_child()["max_model_calls"] == 12
    form = composer_client.get(tree_url(root, f"?add={root.pk}")).content.decode()
    assert "At most 12: what study has left after its other children." in form
    add(composer, "second", root, budget={"max_model_calls": 20})
    page = html.unescape(composer_client.get(tree_url(root)).content.decode())
    assert "max_model_calls asks for 20 model calls but the parent allows at most 12" in page


def test_run_is_disabled_with_the_reason_while_the_tree_has_errors(composer_client: Any, composer: Any) -> None:
    root = add(composer, "coordinator", budget={"max_model_calls": 20})
    add(composer, "greedy", root, budget={"max_model_calls": 50})
    page = html.unescape(composer_client.get(tree_url(root)).content.decode())
    assert 'type="submit" disabled aria-describedby="run-blocked">Run</button>' in page
    assert ("Fix the tree's errors first: greedy, budget.max_model_calls: max_model_calls asks for 50 model "
            "calls but the parent allows at most 20") in page
    response = composer_client.post(tree_url(root, "run/"), {"adapter": "scripted", "adapter_config": "{}"},
                                    follow=True)
    assert "Not started. Fix the tree's errors first" in html.unescape(response.content.decode())
    assert not Run.objects.filter(delegation=root).exists()


def test_removing_the_last_node_in_error_enables_run_in_place(composer_client: Any, composer: Any) -> None:
    root = add(composer, "coordinator", budget={"max_model_calls": 20})
    greedy = add(composer, "greedy", root, budget={"max_model_calls": 50})
    assert 'disabled aria-describedby="run-blocked"' in composer_client.get(tree_url(root)).content.decode()
    panel = composer_client.post(node_url(root, greedy, "remove"), **HTMX).content.decode()
    assert 'id="run-panel" aria-labelledby="run-heading" hx-swap-oob="true"' in panel
    assert 'disabled aria-describedby="run-blocked"' not in panel
