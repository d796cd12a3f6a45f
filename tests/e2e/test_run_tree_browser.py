"""The tree as the run page's navigation, in a real browser against a real server with its
embedded worker: a scripted coordinator delegates to two subagents; a person filters the
timeline to one of them, then cancels the other's subtree from the keyboard and watches
it stop while its sibling and the coordinator finish."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.run_pages import open_scripted_run, tree_node

pytestmark = pytest.mark.browser


def _delegate(*labels: str) -> dict[str, Any]:
    return {"text": f"Delegating to {', '.join(labels)}.", "tool_calls": [
        {"name": "delegate_task", "arguments": {
            "label": label, "subagent_type": "researcher", "goal": f"Find part {label}",
            "instruction_set": "Find it and answer with JSON.", "input_data": {"part": label},
            "expected_output_schema": {"answer": "integer"}, "timeout_s": 90}}
        for label in labels]}


def _answer(delay_ms: int = 0) -> dict[str, Any]:
    return {"text": "Here is my answer.", "delay_ms": delay_ms, "tool_calls": [
        {"name": "yield_control", "arguments": {"status": "SUCCESS", "output_payload": {"answer": 42}}}]}


PACKET = {
    "goal": "Find both parts and answer", "label": "coordinator", "subagent_type": "researcher",
    "instruction_set": "Delegate the parts; answer with JSON.", "input_data": {"parts": ["a", "b"]},
    "allowed_inputs": ["parts"], "expected_output_schema": {"answer": "integer"},
    "success_criteria": ["JSON is schema-valid"], "timeout_s": 120,
    "budget": {"max_model_calls": 20, "max_tokens": 100000}, "allow_nested": True,
}
CONFIG = {
    "script": [_delegate("doomed", "steady"), _answer()],
    "children": {
        # doomed waits on a grandchild that would take a minute: it is cancelled long before
        "doomed": {"script": [_delegate("grandkid"), _answer()],
                   "children": {"grandkid": {"script": [_answer(60000)]}}},
        # steady answers after a while: time for the person to cancel its sibling first
        "steady": {"script": [_answer(10000)]},
    },
}


def _key(page: Any, key: str) -> None:
    """A key pressed on the page, as a person does after clicking somewhere else."""
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.keyboard.press(key)


def _state(page: Any, label: str) -> str:
    return str(tree_node(page, label).get_attribute("data-state"))


def test_a_person_filters_the_timeline_to_a_node_and_cancels_one_subtree(live_url, page, composer):
    root_id = open_scripted_run(page, live_url, composer, PACKET, CONFIG)
    page.evaluate("window.__sameDocument = true")
    for label in ("doomed", "steady", "grandkid"):
        tree_node(page, label).wait_for()
    steady_id = str(tree_node(page, "steady").get_attribute("data-tree-run"))
    doomed_id = str(tree_node(page, "doomed").get_attribute("data-tree-run"))
    page.wait_for_selector(f"#run-timeline > li[data-run='{steady_id}']", state="attached")

    # selecting a node filters the timeline to it, without leaving the page
    tree_node(page, "steady").locator("> .tree-row [data-select-run]").click()
    assert page.locator("#filter-node").is_visible()
    assert page.locator("#filter-node-name").inner_text() == "steady"
    assert f"node={steady_id}" in page.url
    shown = page.eval_on_selector_all("#run-timeline > li:not([hidden])", "rows => rows.map(r => r.dataset.run)")
    assert shown and set(shown) == {steady_id}
    assert page.locator(f"#run-timeline > li[data-run='{root_id}'][hidden]").count() > 0
    # a type filter: no state rows while "State" is off
    page.locator("#timeline-filters input[name=types][value=state]").uncheck()
    assert page.locator("#run-timeline > li[data-group=state]:not([hidden])").count() == 0
    page.locator("#timeline-filters input[name=types][value=state]").check()
    # Esc shows every run again; ? lists the keys
    assert not page.locator("#filter-apply").is_visible()   # filters apply as they change
    _key(page, "Escape")
    assert page.locator(f"#run-timeline > li[data-run='{root_id}']:not([hidden])").count() > 0
    assert not page.locator("#filter-node").is_visible()
    _key(page, "?")
    assert page.locator("#keys-help").is_visible()

    # ] walks the tree to doomed; c opens its confirm step; confirming cancels the subtree
    for _ in range(4):   # the tree in order: coordinator, doomed, grandkid, steady
        if page.locator("#filter-node-id").input_value() == doomed_id:
            break
        _key(page, "]")
    assert page.locator("#filter-node-id").input_value() == doomed_id
    _key(page, "c")
    confirm = tree_node(page, "doomed").locator("> .node-box [data-confirm-cancel]")
    assert confirm.is_visible()
    assert _state(page, "steady") == "WORKING"
    confirm.click()
    page.wait_for_url(f"{live_url}/runs/{root_id}/")
    page.wait_for_selector("#live-status[data-status=live]")
    page.wait_for_function(
        "() => [...document.querySelectorAll('#run-tree li.tree-node')].filter("
        "  li => ['doomed', 'grandkid'].includes(li.querySelector(':scope > .tree-row > a')?.textContent)"
        "        && li.dataset.state === 'CANCELLED').length === 2", timeout=10000)
    assert _state(page, "steady") == "WORKING"        # its sibling goes on
    assert _state(page, "coordinator") == "WORKING"   # and so does the parent
    page.wait_for_selector("#run-head [data-state=COMPLETE]", timeout=30000)
    assert _state(page, "steady") == "COMPLETE"
    told = page.locator(f"#run-timeline > li[data-run='{root_id}'][data-type=tool_result]",
                        has_text="doomed was cancelled")
    assert told.count() == 1


    # the timeline follows its newest event; reading back up pauses that and offers a way back
    timeline = page.locator("#timeline-scroll")
    assert timeline.evaluate("el => el.scrollHeight > el.clientHeight + 100")
    assert timeline.evaluate("el => el.scrollHeight - el.scrollTop - el.clientHeight < 24")
    assert page.locator("#follow-toggle").get_attribute("aria-pressed") == "true"
    timeline.evaluate("el => { el.scrollTop = 0; }")
    page.locator("#jump-latest").wait_for()
    assert page.locator("#follow-toggle").get_attribute("aria-pressed") == "false"
    page.locator("#jump-latest").click()
    assert timeline.evaluate("el => el.scrollHeight - el.scrollTop - el.clientHeight < 24")
    assert not page.locator("#jump-latest").is_visible()
    _key(page, "f")
    assert page.locator("#follow-toggle").get_attribute("aria-pressed") == "false"
    # j and k walk the events shown, newest last
    _key(page, "k")
    _key(page, "k")
    walked = "() => [...document.querySelectorAll('#run-timeline > li:not([hidden])')].findIndex(li => li.classList.contains('kbd-current'))"
    shown_count = page.locator("#run-timeline > li:not([hidden])").count()
    assert page.evaluate(walked) == shown_count - 2
    _key(page, "j")
    assert page.evaluate(walked) == shown_count - 1
    # e jumps to the next error: the cancelled subtree's failed delegate_task result
    errors = page.locator("#run-timeline > li[data-error='1']:not([hidden])")
    assert errors.count() >= 1
    _key(page, "e")
    current = page.locator("#run-timeline > li.kbd-current")
    assert current.get_attribute("data-error") == "1"
    assert page.locator("#follow-toggle").get_attribute("aria-pressed") == "false"
    # a: nothing waits for a person here, and the page says so
    _key(page, "a")
    assert page.locator("#keys-note").inner_text() == "Nothing waits for a person."
