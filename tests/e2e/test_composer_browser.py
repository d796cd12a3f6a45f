"""Composing in a real browser against a real server: the lint panel follows what a person
types, the tree editor caps a new child's budget and reorders from the keyboard, and a
composed tree runs on the scripted adapter and lands on the live run view."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.conftest import login

pytestmark = pytest.mark.browser

ROOT_PACKET: dict[str, Any] = {
    "goal": "Compare three caching options and recommend one", "subagent_type": "researcher",
    "instruction_set": "Delegate the reading, then recommend.", "input_data": {"options": ["a", "b", "c"]},
    "success_criteria": ["JSON is schema-valid"], "expected_output_schema": {"choice": "string"},
    "timeout_s": 120, "budget": {"max_model_calls": 12, "max_tokens": 20000},
}
FIRST_CHILD: dict[str, Any] = {
    "label": "reader", "subagent_type": "researcher", "goal": "Read option a",
    "instruction_set": "Read it.", "input_data": {}, "success_criteria": ["JSON is schema-valid"],
    "budget": {"max_model_calls": 4, "max_tokens": 5000}, "timeout_s": 60,
}


def lint_panel(page: Any) -> Any:
    return page.locator("#lint-panel")


def test_a_vague_criterion_is_flagged_as_it_is_typed_and_cleared_when_it_becomes_checkable(
        live_url: str, page: Any, composer: Any) -> None:
    login(page, live_url, composer.username)
    page.goto(f"{live_url}/delegations/new/?role=researcher")
    page.fill("#id_goal", "Summarise the three caching options for the team")
    criteria = page.locator("#id_success_criteria_text")
    criteria.fill("")
    criteria.press_sequentially("Do a good job", delay=20)
    lint_panel(page).filter(has_text="VAGUE_CRITERIA").wait_for()
    criteria.fill("")
    criteria.press_sequentially("Word count > 50", delay=20)
    page.wait_for_function(
        "() => !document.querySelector('#lint-panel').innerText.includes('VAGUE_CRITERIA')")
    assert "success_criteria" not in lint_panel(page).inner_text().split("Warnings")[0]


def test_a_tree_is_built_reordered_from_the_keyboard_and_run(live_url: str, page: Any,
                                                            composer: Any) -> None:
    from delegations.composer.services import delegation_create

    root = delegation_create(owner=composer, name="Caching study", packet=ROOT_PACKET)
    delegation_create(owner=composer, name="reader", packet=FIRST_CHILD, parent=root)
    login(page, live_url, composer.username)
    page.goto(f"{live_url}/delegations/{root.pk}/tree/")

    # a new child is offered at most what the root has left after its first child
    page.locator(f"#node-{root.pk} [data-action=add]").first.click()
    calls = page.locator(f"#add-{root.pk}-max_model_calls")
    calls.wait_for()
    assert calls.get_attribute("max") == "8"
    page.fill(f"#add-{root.pk}-name", "checker")
    page.fill(f"#add-{root.pk}-goal", "Check the recommendation")
    calls.fill("30")
    assert calls.evaluate("field => field.validity.rangeOverflow")   # the form will not send it
    assert "At most 8: what Caching study has left" in page.locator(f"#add-{root.pk}").inner_text()
    calls.fill("3")
    page.click("button:has-text('Add the child')")
    page.locator(".tree-node .node-name:has-text('checker')").wait_for()

    names = page.locator(f"#node-{root.pk} > ul > .tree-node > .node-card .node-name")
    assert names.all_inner_texts() == ["reader", "checker"]
    page.locator(".tree-node:has(> .node-card .node-name:has-text('checker'))").focus()
    page.keyboard.press("Alt+ArrowUp")
    page.wait_for_function(
        f"() => [...document.querySelectorAll('#node-{root.pk} > ul > .tree-node > .node-card .node-name')]"
        ".map(n => n.innerText)[0] === 'checker'")

    script = {"script": [
        {"tool_calls": [{"name": "delegate_task", "arguments": {"label": "reader", "input_data": {}}}]},
        {"tool_calls": [{"name": "yield_control", "arguments": {
            "status": "SUCCESS", "output_payload": {"choice": "b"}}}]}],
        "children": {"reader": {"script": [{"tool_calls": [{"name": "yield_control", "arguments": {
            "status": "SUCCESS", "output_payload": {"read": True}}}]}]}}}
    page.select_option("#id_adapter", "scripted")
    page.locator("summary:has-text('Model settings')").click()
    page.fill("#id_adapter_config", json.dumps(script))
    page.click("button:has-text('Run')")
    page.wait_for_url(re.compile(r".*/runs/[0-9a-f]{32}/$"))
    page.wait_for_selector("#run-head [data-state=COMPLETE]")
    tree = page.locator("#run-tree").inner_text()
    assert "reader" in tree and "planned" in tree
    assert "planned, not started" in tree   # the checker was planned but never delegated to


def test_an_unsaved_draft_is_guarded_and_offered_back_after_the_page_is_left(
        live_url: str, page: Any, composer: Any) -> None:
    login(page, live_url, composer.username)
    page.goto(f"{live_url}/delegations/new/?role=planner")
    page.locator("#id_goal").press_sequentially("Plan the migration of the billing tables", delay=10)
    page.wait_for_timeout(800)   # the draft is written a moment after the last keystroke
    asked: list[str] = []

    def leave(dialog: Any) -> None:
        asked.append(dialog.type)
        dialog.accept()

    page.on("dialog", leave)
    page.reload()
    assert asked == ["beforeunload"]
    offer = page.locator("#draft-offer")
    offer.wait_for()
    assert page.locator("#id_goal").input_value() == ""
    offer.locator("[data-draft-restore]").click()
    assert page.locator("#id_goal").input_value() == "Plan the migration of the billing tables"
    assert offer.is_hidden()


def test_a_tree_edit_left_unsaved_comes_back_as_a_draft(live_url: str, page: Any,
                                                       composer: Any) -> None:
    from delegations.composer.services import delegation_create

    root = delegation_create(owner=composer, name="Caching study", packet=ROOT_PACKET)
    child = delegation_create(owner=composer, name="reader", packet=FIRST_CHILD, parent=root)
    login(page, live_url, composer.username)
    page.goto(f"{live_url}/delegations/{root.pk}/tree/")
    page.locator(f"#node-{child.pk} [data-action=edit]").click()
    name = page.locator(f"#edit-{child.pk}-name")
    name.fill("")
    name.press_sequentially("reader of option a", delay=10)
    page.wait_for_timeout(800)   # the draft is written a moment after the last keystroke
    page.on("dialog", lambda dialog: dialog.accept())
    page.reload()
    name.wait_for()
    assert name.input_value() == "reader of option a"
    assert "Your unsaved draft" in page.locator(f"#node-{child.pk} .draft-note").inner_text()
    page.locator(f"#node-{child.pk} form[data-guard] button[type=submit]").click()
    page.locator(f"#node-{child.pk} .node-name:has-text('reader of option a')").wait_for()
    page.reload()
    assert page.locator(".draft-note").count() == 0   # saved: the draft is gone


def test_the_json_view_and_the_form_follow_each_other(live_url: str, page: Any, composer: Any) -> None:
    login(page, live_url, composer.username)
    page.goto(f"{live_url}/delegations/new/?role=researcher")
    editor = page.locator("#id_packet_json")

    # the form leads: what is typed reaches the JSON view with the next check
    page.fill("#id_goal", "Summarise the three caching options for the team")
    page.wait_for_function(
        "() => document.querySelector('#id_packet_json').value.includes('Summarise the three caching options')")

    # the JSON leads: an edit there re-draws the form, role sections included
    packet = json.loads(editor.input_value())
    packet.update(goal="Review the caching module for thread safety", subagent_type="planner",
                  planner_params={"constraints": ["no new dependencies"]})
    editor.fill(json.dumps(packet, indent=2))
    page.wait_for_function(
        "() => document.querySelector('#id_goal').value === 'Review the caching module for thread safety'")
    assert page.locator("#id_subagent_type").input_value() == "planner"
    constraints = page.locator("#id_planner_params__constraints")
    assert constraints.is_visible() and "no new dependencies" in constraints.input_value()
    assert "The form follows the JSON." in page.locator("[data-json-status]").inner_text()

    # JSON that does not read keeps the form and says why
    editor.fill('{"goal": 42}')
    page.locator("#json-problems").filter(has_text="could not read this").wait_for()
    assert page.locator("#id_goal").input_value() == "Review the caching module for thread safety"

    # and the re-drawn form still drives the check and the JSON view
    page.fill("#id_goal", "Review the cache for races")
    page.wait_for_function("() => document.querySelector('#id_packet_json').value.includes('Review the cache for races')")


def test_an_uploaded_packet_fills_the_form_in_place_and_one_that_does_not_read_keeps_it(
        live_url: str, page: Any, composer: Any, tmp_path: Any) -> None:
    # an upload posted the page: the JSON form's hidden name was the one the page loaded
    # with, so a name typed since came back empty beside "The form keeps what it held"
    login(page, live_url, composer.username)
    page.goto(f"{live_url}/delegations/new/?role=researcher")
    page.fill("#id_name", "Keep me")
    page.fill("#id_goal", "A goal typed before the upload")
    not_json = tmp_path / "picture.json"
    not_json.write_bytes(b"\x89PNG\r\n\x1a\n not a packet")
    page.set_input_files("#id_packet_file", str(not_json))
    page.locator("#json-form button[type=submit]").click()
    page.locator("#json-problems").filter(has_text="The file is not UTF-8 text").wait_for()
    assert page.locator("#id_name").input_value() == "Keep me"
    assert page.locator("#id_goal").input_value() == "A goal typed before the upload"

    packet = tmp_path / "packet.json"
    packet.write_text(json.dumps({**ROOT_PACKET, "goal": "The goal the file brings"}))
    page.set_input_files("#id_packet_file", str(packet))
    page.locator("#json-form button[type=submit]").click()
    page.wait_for_function("() => document.querySelector('#id_goal').value === 'The goal the file brings'")
    assert page.locator("#id_name").input_value() == "Keep me"
    assert page.locator("#json-problems").inner_text().strip() == ""


def test_a_node_is_dragged_into_place_and_ctrl_z_puts_it_back(live_url: str, page: Any,
                                                              composer: Any) -> None:
    from delegations.composer.services import delegation_create

    root = delegation_create(owner=composer, name="Caching study", packet=ROOT_PACKET)
    for label in ("reader", "writer", "checker"):
        delegation_create(owner=composer, name=label, parent=root,
                          packet={**FIRST_CHILD, "label": label, "budget": {"max_model_calls": 2}})
    login(page, live_url, composer.username)
    page.goto(f"{live_url}/delegations/{root.pk}/tree/")
    order = (f"() => [...document.querySelectorAll('#node-{root.pk} > ul > .tree-node > .node-card .node-name')]"
             ".map(n => n.innerText).join(',')")
    assert page.evaluate(order) == "reader,writer,checker"

    checker = page.locator(".tree-node:has(> .node-card .node-name:has-text('checker')) > .node-card .drag-handle")
    reader_card = page.locator(".tree-node:has(> .node-card .node-name:has-text('reader')) > .node-card")
    page.set_viewport_size({"width": 1280, "height": 1400})   # a native drag needs both ends on screen
    start, end = checker.bounding_box(), reader_card.bounding_box()
    page.mouse.move(start["x"] + start["width"] / 2, start["y"] + start["height"] / 2)
    page.mouse.down()
    page.mouse.move(end["x"] + 30, end["y"] + 8, steps=12)   # the top half: before it
    page.mouse.up()
    page.wait_for_function(f"() => ({order})() === 'checker,reader,writer'")

    page.locator("#tree-panel").click(position={"x": 5, "y": 5})   # out of any field
    page.keyboard.press("Control+z")
    page.wait_for_function(f"() => ({order})() === 'reader,writer,checker'")
    page.keyboard.press("Control+y")
    page.wait_for_function(f"() => ({order})() === 'checker,reader,writer'")


def test_one_node_is_dry_run_on_its_own_and_checked(live_url: str, page: Any, composer: Any) -> None:
    from delegations.composer.services import delegation_create

    root = delegation_create(owner=composer, name="Caching study", packet=ROOT_PACKET)
    delegation_create(owner=composer, name="reader", packet=FIRST_CHILD, parent=root)
    login(page, live_url, composer.username)
    page.goto(f"{live_url}/delegations/{root.pk}/#dry-run")
    script = page.locator("#id_dry-run-script")
    assert json.loads(script.input_value())   # a valid default to start from
    script.fill(json.dumps([{"tool_calls": [{"name": "yield_control", "arguments": {
        "status": "SUCCESS", "output_payload": {"choice": "b"}}}]}]))
    page.click("button:has-text('Start the dry run')")
    page.wait_for_url(re.compile(r".*/runs/[0-9a-f]{32}/$"))
    page.wait_for_selector("#run-head [data-state=COMPLETE]")
    body = page.locator("main").inner_text()
    assert "dry run" in body.lower()
    assert "reader" not in page.locator("#run-tree").inner_text()   # its child is not part of it
