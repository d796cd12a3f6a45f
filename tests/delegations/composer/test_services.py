"""Saving delegations: versions, stale saves, the tree, deleting and running."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from delegations.composer.services import (
    DelegationError,
    StaleSave,
    delegation_create,
    delegation_delete,
    delegation_start_run,
    delegation_update,
    version_diff,
)
from delegations.models import Delegation, Run
from tests.delegations import scripts

pytestmark = [pytest.mark.django_db(transaction=True)]


def save(owner: Any, name: str = "caching study", **extra: Any) -> Delegation:
    return delegation_create(owner=owner, name=name, packet=extra.pop("packet", scripts.packet()), **extra)


def test_a_new_delegation_starts_at_version_1_and_keeps_it(composer: Any) -> None:
    delegation = save(composer, name="  caching study  ")
    assert delegation.name == "caching study" and delegation.version == 1
    [first] = delegation.versions.all()
    assert (first.number, first.saved_by, first.packet) == (1, composer, scripts.packet())


@pytest.mark.parametrize(("name", "packet", "status"), [
    ("", scripts.packet(), 400),
    ("x" * 201, scripts.packet(), 400),
    ("caching", ["not", "an", "object"], 422),
    ("caching", {"goal": 5, "max_iterations": "many"}, 422),
])
def test_a_nameless_or_unparseable_delegation_is_refused(composer: Any, name: str, packet: Any,
                                                          status: int) -> None:
    with pytest.raises(DelegationError) as refused:
        delegation_create(owner=composer, name=name, packet=packet)
    assert refused.value.status == status
    assert not Delegation.objects.exists()


@pytest.mark.parametrize("position", [-1, 2**31])
def test_a_position_out_of_range_is_refused(composer: Any, position: int) -> None:
    with pytest.raises(DelegationError) as refused:
        save(composer, position=position)
    assert refused.value.status == 400 and refused.value.details == {"field": "position"}


def test_a_draft_with_lint_errors_is_saved(composer: Any) -> None:
    delegation = save(composer, packet={"goal": "Find something"})
    assert Delegation.objects.get(pk=delegation.pk).packet == {"goal": "Find something"}


def test_a_user_without_the_composer_role_cannot_save(outsider: Any) -> None:
    with pytest.raises(DelegationError) as refused:
        save(outsider)
    assert refused.value.status == 403


def test_an_update_bumps_the_version_and_keeps_it(composer: Any) -> None:
    delegation = save(composer)
    updated = delegation_update(delegation=delegation, user=composer, base_version=1,
                                packet=scripts.packet(goal="Pick a cache"), template=True)
    assert updated.version == 2 and updated.template and updated.updated_by == composer
    assert [(v.number, v.packet["goal"]) for v in updated.versions.all()] == [
        (1, scripts.packet()["goal"]), (2, "Pick a cache")]


def test_a_stale_save_is_refused_with_who_saved_since_and_what_changed(
        composer: Any, admin_user: Any) -> None:
    delegation = save(composer)
    mine = Delegation.objects.get(pk=delegation.pk)   # the page I opened at version 1
    delegation_update(delegation=delegation, user=admin_user, base_version=1,
                      packet=scripts.packet(goal="Their goal"))
    with pytest.raises(StaleSave) as stale:
        delegation_update(delegation=mine, user=composer, base_version=mine.version,
                          packet=scripts.packet(goal="My goal"))
    assert stale.value.status == 409 and stale.value.current_version == 2
    assert stale.value.saved_by == "root" and stale.value.saved_at is not None
    assert '-  "goal": "Compare' in stale.value.diff and '+  "goal": "Their goal"' in stale.value.diff
    assert Delegation.objects.get(pk=delegation.pk).packet["goal"] == "Their goal"
    assert delegation.versions.count() == 2


def test_of_two_saves_from_the_same_base_exactly_one_wins(composer: Any) -> None:
    delegation = save(composer)
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def edit(goal: str) -> None:
        copy = Delegation.objects.get(pk=delegation.pk)
        barrier.wait()
        try:
            delegation_update(delegation=copy, user=composer, base_version=1, packet=scripts.packet(goal=goal))
            outcomes.append("saved")
        except StaleSave:
            outcomes.append("stale")
        finally:
            connection.close()

    threads = [threading.Thread(target=edit, args=(goal,)) for goal in ("first", "second")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["saved", "stale"]
    assert Delegation.objects.get(pk=delegation.pk).version == 2
    assert delegation.versions.count() == 2


def test_a_child_goes_after_its_last_sibling(composer: Any) -> None:
    root = save(composer)
    first, second = save(composer, "a", parent=root), save(composer, "b", parent=root)
    assert (first.position, second.position) == (0, 1)
    assert save(composer, "c", parent=root, position=7).position == 7


def test_a_delegation_cannot_move_under_itself_or_its_descendants(composer: Any) -> None:
    root = save(composer)
    child = save(composer, "child", parent=root)
    grandchild = save(composer, "grandchild", parent=child)
    for parent in (root, child, grandchild):
        with pytest.raises(DelegationError) as refused:
            delegation_update(delegation=root, user=composer, base_version=root.version, parent=parent)
        assert refused.value.status == 400
    root.refresh_from_db()
    assert root.parent is None and root.version == 1


def test_a_delegation_moves_to_another_parent_and_back_to_the_top(composer: Any) -> None:
    one, two = save(composer, "one"), save(composer, "two")
    moved = delegation_update(delegation=two, user=composer, base_version=1, parent=one)
    assert moved.parent == one and moved.version == 2
    assert delegation_update(delegation=moved, user=composer, base_version=2, parent=None).parent is None


def test_a_parent_must_belong_to_the_same_owner(composer: Any, admin_user: Any) -> None:
    theirs = save(admin_user)
    with pytest.raises(DelegationError) as refused:
        save(composer, parent=theirs)
    assert refused.value.status == 400
    assert not Delegation.objects.filter(owner=composer).exists()


def test_another_owners_delegation_is_not_found(composer: Any, other_composer: Any) -> None:
    theirs = save(other_composer)
    with pytest.raises(DelegationError) as refused:
        delegation_update(delegation=theirs, user=composer, base_version=1, name="mine now")
    assert refused.value.status == 404
    with pytest.raises(DelegationError):
        delegation_delete(delegation=theirs, user=composer)
    assert Delegation.objects.get(pk=theirs.pk).name == "caching study"


def test_a_superuser_edits_anyones_delegation(composer: Any, admin_user: Any) -> None:
    delegation = save(composer)
    updated = delegation_update(delegation=delegation, user=admin_user, base_version=1, name="renamed")
    assert updated.name == "renamed" and updated.owner == composer and updated.updated_by == admin_user


def test_deleting_removes_the_subtree_but_not_other_trees(composer: Any) -> None:
    root, other = save(composer), save(composer, "other")
    child = save(composer, "child", parent=root)
    save(composer, "grandchild", parent=child)
    delegation_delete(delegation=root, user=composer)
    assert list(Delegation.objects.values_list("pk", flat=True)) == [other.pk]


def test_any_two_versions_can_be_diffed(composer: Any) -> None:
    delegation = save(composer)
    delegation = delegation_update(delegation=delegation, user=composer, base_version=1,
                                   packet=scripts.packet(timeout_s=90))
    delegation = delegation_update(delegation=delegation, user=composer, base_version=2, name="renamed")
    diff = version_diff(delegation, 1, 3)
    assert diff.startswith("--- version 1\n+++ version 3\n")
    assert '-  "timeout_s": 60\n' in diff and '+  "timeout_s": 90\n' in diff
    assert version_diff(delegation, 2, 3) == ""
    with pytest.raises(DelegationError) as unknown:
        version_diff(delegation, 1, 4)
    assert unknown.value.status == 404


def test_running_a_delegation_links_the_run_to_it(composer: Any, immediate_tasks: None) -> None:
    delegation = save(composer)
    run = delegation_start_run(delegation=delegation, user=composer, adapter="scripted", config=scripts.leaf())
    run = Run.objects.get(pk=run.pk)
    assert run.delegation == delegation and run.owner == composer
    assert run.state == "COMPLETE" and run.result["output_payload"] == scripts.ANSWER


def test_a_draft_with_lint_errors_runs_as_a_rejected_run(composer: Any, immediate_tasks: None) -> None:
    delegation = save(composer, packet=scripts.packet(depth=9, max_depth=3))
    run = delegation_start_run(delegation=delegation, user=composer, adapter="scripted", config=scripts.leaf())
    assert run.state == "REJECTED" and run.delegation == delegation


@pytest.mark.django_db(transaction=True)
def test_a_delegation_tree_runs_as_one_root_run_whose_model_starts_the_children_by_label(
        composer: Any, immediate_tasks: None) -> None:
    from delegations.composer.services import (
        composed_packet,
        delegation_create,
        delegation_start_run,
    )
    from delegations.models import Run
    from tests.delegations import scripts

    root = delegation_create(owner=composer, name="Price check", packet=scripts.packet())
    child = {"subagent_type": "researcher", "goal": "Read the price", "instruction_set": "Read it.",
             "input_data": {}, "success_criteria": ["JSON is schema-valid"]}
    delegation_create(owner=composer, name="pricer", packet=child, parent=root)
    delegation_create(owner=composer, name="checker", packet={**child, "goal": "Check it"}, parent=root)
    planned = composed_packet(root)["planned_children"]
    assert [item["label"] for item in planned] == ["pricer", "checker"]

    config = {"script": [
        {"tool_calls": [{"name": "delegate_task", "arguments": {"label": "pricer", "input_data": {}}}]},
        scripts.yield_turn()], "children": {"pricer": scripts.leaf()}}
    run = delegation_start_run(delegation=root, user=composer, adapter="scripted", config=config)
    assert run.state == "COMPLETE", run.error
    [spawned] = Run.objects.filter(parent=run)
    assert spawned.label == "pricer" and spawned.packet["goal"] == "Read the price"


# -- a child stays within its parent ------------------------------------------------------------

def test_a_child_asking_for_a_capability_its_parent_lacks_is_refused_with_the_reason(composer: Any) -> None:
    parent = save(composer, packet=scripts.packet(capabilities=["web_search"]))
    with pytest.raises(DelegationError) as refused:
        save(composer, "child", parent=parent, packet=scripts.packet(capabilities=["web_search", "file_write"]))
    assert refused.value.status == 422 and refused.value.details["field"] == "capabilities"
    assert "file_write is beyond what caching study has (web_search)" in refused.value.message
    assert not parent.children.exists()


def test_a_child_within_its_parent_is_saved_and_an_edit_beyond_it_is_refused(composer: Any) -> None:
    parent = save(composer, packet=scripts.packet(capabilities=["web_search", "file_read"]))
    child = save(composer, "child", parent=parent, packet=scripts.packet(capabilities=["file_read"]))
    with pytest.raises(DelegationError, match="financial_tx is beyond"):
        delegation_update(delegation=child, user=composer, base_version=child.version,
                          packet=scripts.packet(capabilities=["financial_tx"]))
    child.refresh_from_db()
    assert child.version == 1
