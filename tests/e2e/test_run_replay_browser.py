"""A 40-run tree on the run page, in a real browser against a real server and its embedded
worker: the tree is patched in place while it runs (its nodes are not re-rendered), big
subtrees start folded and unfold, a node selected filters the timeline, and the finished
run replays at 10x to the end, and opens at a moment from a link (?at=N)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.e2e.run_pages import open_scripted_run, tree_node

pytestmark = pytest.mark.browser

AREAS = ("billing", "search", "auth")
KIDS = 12   # under each area: more than TREE_COLLAPSE_ABOVE, so each area starts folded


def _delegate(labels: list[str], tokens: int) -> dict[str, Any]:
    return {"text": f"Delegating to {', '.join(labels)}.", "usage": {"input_tokens": 200, "output_tokens": 20},
            "tool_calls": [{"name": "delegate_task", "arguments": {
                "label": label, "subagent_type": "reviewer", "goal": f"Check part {label}",
                "instruction_set": "Check it and answer with JSON.", "input_data": {"part": label},
                "expected_output_schema": {"answer": "integer"}, "timeout_s": 90,
                "budget": {"max_tokens": tokens}}} for label in labels]}


def _answer(number: int, delay_ms: int = 0) -> dict[str, Any]:
    return {"text": f"The answer is {number}.", "delay_ms": delay_ms, "usage": {"input_tokens": 50, "output_tokens": 5},
            "tool_calls": [{"name": "yield_control", "arguments": {"status": "SUCCESS", "output_payload": {"answer": number}}}]}


PACKET = {
    "goal": "Review three product areas", "label": "review", "subagent_type": "researcher",
    "instruction_set": "Delegate each area; answer with JSON.", "input_data": {"areas": list(AREAS)},
    "allowed_inputs": ["areas"], "expected_output_schema": {"answer": "integer"},
    "success_criteria": ["JSON is schema-valid"], "timeout_s": 300,
    "budget": {"max_model_calls": 200, "max_tokens": 200000}, "allow_nested": True,
}
CONFIG = {
    "script": [_delegate(list(AREAS), 20000), _answer(7)],
    "children": {area: {"script": [_delegate([f"{area}-{kid}" for kid in range(1, KIDS + 1)], 1000), _answer(index)],
                        "children": {f"{area}-{kid}": {"script": [_answer(kid, 40 * kid)]} for kid in range(1, KIDS + 1)}}
                 for index, area in enumerate(AREAS)},
}


def _shown(locator: Any) -> bool:
    return bool(locator.evaluate("el => el.offsetParent !== null"))


def test_a_forty_run_tree_folds_filters_and_replays_at_10x(live_url, page, composer):
    root_id = open_scripted_run(page, live_url, composer, PACKET, CONFIG)
    tree_node(page, "review").wait_for()
    # remember the root's node: patched in place, it is the same element at the end
    page.evaluate(f"window.__root = document.querySelector('[data-tree-run=\"{root_id}\"]')")
    page.wait_for_function(f"document.querySelector('[data-tree-run=\"{root_id}\"]').dataset.state === 'COMPLETE'",
                           timeout=60000)
    assert page.locator("#run-tree [data-tree-run]").count() == 1 + len(AREAS) * (KIDS + 1)
    assert page.evaluate(f"window.__root === document.querySelector('[data-tree-run=\"{root_id}\"]')")
    assert page.evaluate("window.__root.isConnected")
    page.wait_for_selector("#replay-start:not([hidden])")   # offered as soon as the run ends

    # reloaded: each area starts folded; its toggle unfolds and folds it
    page.goto(f"{live_url}/runs/{root_id}/")
    area = tree_node(page, "billing")
    toggle = area.locator("> .tree-row > .tree-toggle")
    assert toggle.get_attribute("aria-expanded") == "false"
    assert not _shown(tree_node(page, "billing-3"))
    toggle.click()
    assert toggle.get_attribute("aria-expanded") == "true" and _shown(tree_node(page, "billing-3"))
    toggle.click()
    assert not _shown(tree_node(page, "billing-3"))
    page.locator("[data-tree-all=open]").click()
    assert _shown(tree_node(page, "search-12"))

    # a node selected: the timeline shows its events only
    kid = tree_node(page, "auth-5")
    kid_id = str(kid.get_attribute("data-tree-run"))
    kid.locator("> .tree-row [data-select-run]").click()
    rows = page.locator("#run-timeline > li:not([hidden])")
    assert rows.count() > 0
    assert set(rows.evaluate_all("rows => rows.map(row => row.dataset.run)")) == {kid_id}
    page.keyboard.press("Escape")

    # the replay, at 10x, to the end
    total = len(httpx.get(f"{live_url}/runs/{root_id}/replay/", cookies=_cookies(page), timeout=10).json()["events"])
    page.click("#replay-start")
    page.wait_for_selector("#replay-bar:not([hidden])")
    page.select_option("[data-replay=speed]", "10")
    page.wait_for_function("document.getElementById('run-page').classList.contains('replay-ended')", timeout=60000)
    assert page.locator("[data-replay=where]").inner_text().startswith(f"event {total} of {total}")
    assert f"at={total}" in page.url
    states = page.locator("#run-tree .tree-state").all_inner_texts()
    assert len(states) == 1 + len(AREAS) * (KIDS + 1) and set(states) == {"complete"}
    assert page.locator("#run-timeline > li:not(.replay-future)").count() > 0
    assert page.locator("#run-outcome").is_visible()   # the outcome is back at the end

    # a link to a moment: only what had started by then shows, and the outcome waits
    page.goto(f"{live_url}/runs/{root_id}/?at=3")
    page.wait_for_selector("#replay-bar:not([hidden])")
    assert re.match(rf"event 3 of {total}\b", page.locator("[data-replay=where]").inner_text())
    started = page.locator("#run-tree [data-tree-run]:not(.replay-future)")
    assert started.count() == 1 and started.get_attribute("data-tree-run") == root_id
    assert not page.locator("#run-outcome").is_visible()
    page.click("[data-replay=step]")
    assert page.locator("[data-replay=where]").inner_text().startswith("event 4 of")
    assert "at=4" in page.url


def _cookies(page: Any) -> dict[str, str]:
    return {cookie["name"]: cookie["value"] for cookie in page.context.cookies()}
