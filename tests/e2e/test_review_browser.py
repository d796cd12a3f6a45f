"""A value the model is unsure of, end to end in a real browser on a real `manage.py serve`:
a review-sentiment run parks as a review item (the input, the proposed value, its
probability and the alternatives in the inbox), an approver corrects it there, the run
completes with the approver's value, and the item, the run's result and its criteria
report say who decided what.

Twice: with a scripted model that scores its label (deterministic), and on the default
local model, held to a probability it cannot reach (at least 0.99) so that it always asks.
With ``HANDOFF_SHOTS=<folder>`` the local model's item is saved there as review_item.png
(the README's picture)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.management import call_command

from tests.conftest import bearer, login

pytestmark = pytest.mark.browser

REVIEW = "The blender is quiet and easy to clean, but the lid cracked after a month."
UNSURE = {"sentiment": {"value": "positive", "probability": 0.52, "calibrated": True,
                        "alternatives": [{"value": "mixed", "probability": 0.41},
                                         {"value": "negative", "probability": 0.07}]}}


def start(live_url: str, owner: Any, adapter: dict[str, Any]) -> str:
    packet = {"skill": "review-sentiment", "label": "blender review", "goal": "Classify the review.",
              "input_data": {"review": REVIEW},
              "success_criteria": [{"kind": "confident", "path": "sentiment", "min": 0.99}], "timeout_s": 240}
    answer = httpx.post(f"{live_url}/api/runs", headers=bearer(owner), timeout=30,
                        json={"packet": packet, "adapter": adapter})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def run_of(live_url: str, owner: Any, run_id: str, *states: str, seconds: float) -> dict[str, Any]:
    headers = bearer(owner)
    deadline = time.monotonic() + seconds
    while True:
        run = httpx.get(f"{live_url}/api/runs/{run_id}", headers=headers, timeout=30).json()
        if run["state"] in states or time.monotonic() > deadline:
            assert run["state"] in states, (run["state"], run.get("error"))
            return dict(run)
        time.sleep(0.3)


def scripted() -> dict[str, Any]:
    turn = {"tool_calls": [{"name": "yield_control", "arguments": {"status": "SUCCESS", "output_payload": {
        "evidence": "quiet and easy to clean, but the lid cracked", "sentiment": "positive"}}}],
        "label_scores": UNSURE}
    return {"name": "scripted", "config": {"script": [turn, turn]}}


@pytest.mark.parametrize("model", ["scripted", pytest.param("local", marks=pytest.mark.local_model)])
def test_an_unsure_label_is_corrected_in_the_inbox_and_the_run_completes_with_it_audited(
        live_url: str, page: Any, composer: Any, approver: Any, model: str) -> None:
    call_command("load_builtin_skills", verbosity=0)
    if model == "local":
        from delegations.protocol.adapters.local_models import DEFAULT_LOCAL_MODEL
        from tests.protocol.conftest import local_model_or_skip

        local_model_or_skip(DEFAULT_LOCAL_MODEL)
    run_id = start(live_url, composer, scripted() if model == "scripted" else {"name": "local", "config": {}})
    run_of(live_url, composer, run_id, "AWAITING_APPROVAL", seconds=240)

    login(page, live_url, approver.username)
    page.goto(f"{live_url}/inbox/")
    item = page.locator(f'.inbox-item[data-run-id="{run_id}"][data-kind="review"]')
    item.wait_for()
    text = item.inner_text()
    assert "Value to review" in text and "Review sentiment of" in text and REVIEW in text
    proposed = item.locator("[data-proposed]").first.inner_text()
    assert proposed in ("positive", "negative", "mixed")
    assert item.locator("[data-probability]").first.inner_text().endswith("%")
    assert "Alternatives:" in text and f"Confirm {proposed}" in text
    if model == "scripted":
        assert "52 %" in text and "mixed 41 %" in text.replace("\n", " ")
    shots = os.environ.get("HANDOFF_SHOTS")
    if shots and model == "local":
        item.scroll_into_view_if_needed()
        item.screenshot(path=str(Path(shots) / "review_item.png"))

    corrected = "mixed" if proposed != "mixed" else "negative"
    form = item.locator("form[data-decision=correct]")
    form.locator("select").select_option(label=corrected)
    form.locator("button").click()
    decided = page.locator(f'.inbox-item[data-run-id="{run_id}"][data-pending="0"]')
    decided.wait_for()
    assert f"Corrected sentiment to {corrected}" in " ".join(decided.inner_text().split())

    run = run_of(live_url, composer, run_id, "COMPLETE", "FAILED", seconds=60)
    assert run["state"] == "COMPLETE", run.get("error")
    assert run["result"]["output_payload"]["sentiment"] == corrected
    assert run["result"]["metrics"]["review"] == {
        "decided_by": approver.username, "decision": "corrected",
        "fields": {"sentiment": {"proposed": proposed, "value": corrected}}}

    page.goto(f"{live_url}/runs/{run_id}/")
    criteria = page.locator("#criteria").inner_text()
    assert f"set (the model proposed \"{proposed}\") by {approver.username} in review" in criteria
    assert page.locator("[data-criteria-summary]").inner_text() == "all met"
    assert corrected in page.locator("pre[aria-label='Output payload']").inner_text()
