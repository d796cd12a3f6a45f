"""One rule for a goal: an empty one is lint's GOAL_MISSING error, so every way in refuses
to run it (the run form, POST /api/runs, manage.py run_delegation, the composer) instead
of a model answering "The task has been completed." to nothing."""

from __future__ import annotations

import json
import re
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from delegations.models import Run
from tests.delegations import scripts

pytestmark = [pytest.mark.django_db(transaction=True)]

EMPTY: dict[str, Any] = {"goal": "", "input_data": {}}


def test_post_api_runs_with_an_empty_goal_is_a_rejected_run_saying_so(
        client: Client, composer_api: dict[str, str], immediate_tasks: None) -> None:
    response = client.post("/api/runs", {"packet": EMPTY, "adapter": {"name": "scripted", "config": scripts.leaf()}},
                           content_type="application/json", headers=composer_api)
    assert response.status_code == 201
    run = response.json()
    assert run["state"] == "REJECTED" and run["error"]["code"] == "ERR_INVALID_PACKET"
    assert [f["code"] for f in run["findings"] if f["severity"] == "error"] == ["GOAL_MISSING"]
    assert "goal" in run["error"]["message"]


def test_the_run_form_with_an_empty_goal_starts_nothing_that_works(composer_client: Client, composer: Any,
                                                                   immediate_tasks: None) -> None:
    composer_client.post("/runs/new/", {"packet": json.dumps(EMPTY), "adapter": "scripted",
                                        "adapter_config": json.dumps(scripts.leaf())})
    run = Run.objects.get(owner=composer)
    assert run.state == "REJECTED"
    assert run.error["code"] == "ERR_INVALID_PACKET" and "goal" in run.error["message"]


def test_run_delegation_with_an_empty_goal_exits_1_and_says_why(tmp_path: Path) -> None:
    packet = tmp_path / "packet.json"
    packet.write_text(json.dumps(EMPTY))
    out = StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("run_delegation", str(packet), "--adapter", "scripted",
                     "--adapter-config", json.dumps(scripts.leaf()), stdout=out, stderr=StringIO())
    assert exited.value.code == 1
    assert "REJECTED" in out.getvalue() and "goal" in out.getvalue()


def test_the_composer_lists_an_empty_goal_as_an_error_and_does_not_run_it(composer_client: Client) -> None:
    response = composer_client.post("/delegations/new/", {
        "action": "run", "goal": "", "adapter": "scripted", "adapter_config": json.dumps(scripts.leaf()),
        "criterion-TOTAL_FORMS": "0", "criterion-INITIAL_FORMS": "0"})
    assert response.status_code == 422
    errors = re.findall(r'<li class="finding error">\s*<a [^>]*>(.*?)</a>',
                        response.content.decode(), re.S)
    # said once, by the form: lint's GOAL_MISSING about the same field is not repeated
    assert errors.count("goal") == 1, errors
    assert not Run.objects.exists()
