"""A run of a remote agent's skill on the run pages: marked "remote · <agent>" in the
tree, and on its own page the agent and the id of its task there once the runner logs it."""

from __future__ import annotations

from typing import Any

import pytest

from delegations.models import Run
from delegations.runs.record import append_events
from tests.delegations.runs.test_run_pages import detail, make_run, section, walk
from tests.delegations.runs.test_run_tree import spawn

pytestmark = pytest.mark.django_db


def remote_child(owner: Any) -> tuple[Run, Run, Run]:
    """A root with a local child and a remote skill's child, as the runner records them."""
    root = make_run(owner, state="PENDING", label="root")
    walk(root, "ACCEPTED", "WORKING")
    local = spawn(root, "local-part")
    remote = spawn(root, "remote/answer")
    Run.objects.filter(pk=remote.pk).update(skill="remote/answer")
    remote.refresh_from_db()
    return root, local, remote


def test_the_tree_marks_the_child_a_remote_agent_runs(composer_client: Any, composer: Any) -> None:
    root, _, remote = remote_child(composer)
    tree = section(detail(composer_client, root), "run-tree")
    marked = [chunk.split('"', 1)[0] for chunk in tree.split('data-remote-agent="')[1:]]
    assert marked == ["remote"]
    node = tree.split(f'data-tree-run="{remote.pk}"', 1)[1].split('data-tree-run="', 1)[0]
    assert "remote · remote" in node


def test_a_remote_childs_page_shows_its_agent_and_the_remote_task_once_sent(
        composer_client: Any, composer: Any) -> None:
    _, _, remote = remote_child(composer)
    before = section(detail(composer_client, remote), "run-facts")
    assert "Remote agent" in before and "not sent yet" in before and "no longer in the registry" not in before
    append_events([(remote, "log", {"level": "info", "remote_agent": "remote", "remote_task_id": "task-7f3a",
                                    "message": "Sent to the remote A2A agent 'remote' as its task task-7f3a."})])
    html = detail(composer_client, remote)
    assert "task-7f3a</dd>" in section(html, "run-facts")
    assert "remote · remote" in section(html, "run-head")
