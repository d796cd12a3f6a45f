"""Runs ended outside a worker (a parked tree cancelled) report what they used as the event
log counts it."""

from __future__ import annotations

from typing import Any

import pytest

from delegations.models import Run, RunEvent
from delegations.runs.workflows import run_cancel, run_create
from tests.delegations import scripts

pytestmark = [pytest.mark.django_db(transaction=True)]

USAGE = {"input_tokens": 100, "output_tokens": 10}


def test_a_cancelled_parked_tree_reports_every_model_call_of_its_subtree(
        immediate_tasks: None, composer: Any) -> None:
    child = scripts.needs_approval(usage=USAGE)
    child["script"].insert(0, {"text": "Looking first.", "usage": USAGE, "tool_calls": [
        {"name": "list_files", "arguments": {"path": "."}}]})
    config = scripts.with_child(child)
    config["script"][0]["usage"] = USAGE
    config["script"][0]["tool_calls"][0]["arguments"]["capabilities"] = ["file_delete", "fs_read"]
    run = run_create(packet=scripts.packet(capabilities=["file_delete", "fs_read"]),
                     adapter="scripted", config=config, owner=composer)
    assert run.state == "AWAITING_APPROVAL"
    run_cancel(run=run, reason="Not needed any more.")
    result = RunEvent.objects.get(run=run, type="result").data["usage"]
    # the root's own call and the child's two, however the rows were charged on the way
    assert (result["model_calls"], result["input_tokens"], result["output_tokens"]) == (3, 300, 30)
    assert Run.objects.get(pk=run.pk).usage["model_calls"] == 3
