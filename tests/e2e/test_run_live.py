"""The live run view in a real browser, against a real server with its embedded worker: a
scripted coordinator delegates to a child that streams text, then asks to delete a file;
an approver approves through the API; the page follows all of it without a reload."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from tests.conftest import bearer, login

pytestmark = pytest.mark.browser

NOTES_DIFF = "--- /dev/null\n+++ b/notes.md\n@@ -0,0 +1,2 @@\n+# Notes\n+Option b wins.\n"
SUMMARY_DIFF = "--- /dev/null\n+++ b/summary.md\n@@ -0,0 +1 @@\n+Use caching option b.\n"
FIRST_WORDS = "Reading the three options one by one."
LATER_WORDS = "Option b is the fastest of the three."

PACKET = {
    "goal": "Pick the fastest caching option",
    "label": "caching-coordinator",
    "subagent_type": "researcher",
    "instruction_set": "Delegate the comparison, write notes, clean up, answer with JSON.",
    "input_data": {"options": ["a", "b", "c"]},
    "allowed_inputs": ["options"],
    "expected_output_schema": {"answer": "integer"},
    "success_criteria": ["JSON is schema-valid"],
    "timeout_s": 120,
    "budget": {"max_model_calls": 20, "max_tokens": 100000},
    "capabilities": ["fs_write", "file_delete"],
    "allow_nested": True,
}

CHILD = {"script": [
    {"text": FIRST_WORDS, "delay_ms": 1000, "usage": {"input_tokens": 120, "output_tokens": 30},
     "tool_calls": [{"name": "apply_edit", "arguments": {"edit": NOTES_DIFF}}]},
    # the pause lets the test see the first words on the page before the next ones exist
    {"text": " " + LATER_WORDS, "delay_ms": 3000, "usage": {"input_tokens": 150, "output_tokens": 20},
     "tool_calls": [{"name": "yield_control", "arguments": {
         "status": "SUCCESS", "output_payload": {"answer": 2}, "log_summary": "b wins"}}]},
]}

CONFIG = {
    "script": [
        # the pause lets the page open before the tree grows
        {"text": "Delegating the comparison.", "delay_ms": 3000,
         "usage": {"input_tokens": 100, "output_tokens": 40},
         "tool_calls": [{"name": "delegate_task", "arguments": {
             "label": "kid", "subagent_type": "researcher", "goal": "Compare the options",
             "instruction_set": "Compare them; answer with JSON.", "input_data": {"options": ["a", "b", "c"]},
             "expected_output_schema": {"answer": "integer"}, "timeout_s": 60,
             "capabilities": ["fs_write"]}}]},
        {"text": "Writing the summary.", "usage": {"input_tokens": 200, "output_tokens": 50},
         "tool_calls": [{"name": "apply_edit", "arguments": {"edit": SUMMARY_DIFF}}]},
        # the child's scratch notes share the tree's workspace; deleting them needs a person
        {"text": "Removing the scratch notes.",
         "tool_calls": [{"name": "delete_file", "arguments": {"path": "notes.md"}}]},
        {"text": "Done.", "tool_calls": [{"name": "yield_control", "arguments": {
            "status": "SUCCESS", "output_payload": {"answer": 2},
            "log_summary": "Option b is the fastest.",
            "evidence": [{"source": "kid", "artifact_id": "comparison"}]}}]},
    ],
    "children": {"kid": CHILD},
}


def _start_run_in_the_form(page: Any, live_url: str, packet: dict[str, Any] = PACKET,
                           config: dict[str, Any] = CONFIG) -> str:
    page.goto(f"{live_url}/runs/new/")
    page.fill("#id_packet", json.dumps(packet))
    page.select_option("#id_adapter", "scripted")
    page.fill("#id_adapter_config", json.dumps(config))
    page.click("button:has-text('Start run')")
    page.wait_for_url(re.compile(r".*/runs/[0-9a-f]{32}/$"))
    return page.url.rstrip("/").rsplit("/", 1)[-1]


def _pending_approval_id(live_url: str, headers: dict[str, str], run_id: str) -> int:
    response = httpx.get(f"{live_url}/api/approvals", params={"status": "pending"}, headers=headers)
    assert response.status_code == 200, response.text
    items = [item for item in response.json()["results"] if item["root_run_id"] == run_id]
    assert len(items) == 1, items
    return int(items[0]["id"])


def test_a_person_watches_a_run_stream_grow_wait_for_approval_and_finish(live_url, page, composer, approver):
    login(page, live_url, composer.username)
    run_id = _start_run_in_the_form(page, live_url)
    # set once; a reload would drop it, so its survival proves the page updated in place
    page.evaluate("window.__sameDocument = true")
    page.wait_for_selector("#live-status[data-status=live]")

    tree = page.locator("#run-tree [data-tree-run]")
    assert tree.count() == 1, "the coordinator had not delegated yet when the page opened"
    page.wait_for_selector("#run-tree .tree-row a:has-text('kid')")
    assert tree.count() == 2

    child_output = page.locator("#run-streams .stream:has(.stream-label a:has-text('kid')) .stream-text")
    child_output.filter(has_text=FIRST_WORDS).wait_for()
    assert LATER_WORDS not in child_output.inner_text()
    child_output.filter(has_text=LATER_WORDS).wait_for()

    page.wait_for_selector("#run-head [data-state=AWAITING_APPROVAL]")
    approvals = page.locator("#run-approvals")
    assert approvals.is_visible() and "waiting for a person" in approvals.inner_text()

    approval_id = _pending_approval_id(live_url, bearer(approver), run_id)
    assert f"#{approval_id}" in approvals.inner_text()
    decided = httpx.post(f"{live_url}/api/approvals/{approval_id}/decision",
                         json={"decision": "approve"}, headers=bearer(approver))
    assert decided.status_code == 200, decided.text

    page.wait_for_selector("#run-head [data-state=COMPLETE]")
    result = page.locator("#result")
    result.wait_for()
    assert "SUCCESS" in result.inner_text()
    assert '"answer": 2' in result.inner_text()
    assert "Option b is the fastest." in result.inner_text()
    assert "comparison" in result.inner_text()  # the evidence list
    assert page.locator("#criteria td.met").count() == 1
    assert page.locator("#changes .dl.add:has-text('Use caching option b.')").count() == 1
    assert "approved" in page.locator("#run-approvals").inner_text()
    assert page.locator("#run-timeline [data-type=child] a:has-text('open kid')").count() == 1
    assert page.locator("#run-tree .tree-node .badge:has-text('complete')").count() == 2
    assert page.evaluate("window.__sameDocument") is True
    # still connected, and no longer "Live": the run has ended
    assert page.locator("#live-status").inner_text() == "Finished"
    assert page.locator("#live-status").get_attribute("data-status") == "live"


def _edit_turn(text: str, path: str, delay_ms: int) -> dict[str, Any]:
    diff = f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+{text}\n"
    return {"text": text, "delay_ms": delay_ms,
            "tool_calls": [{"name": "apply_edit", "arguments": {"edit": diff}}]}


def test_the_page_reconnects_by_itself_and_refills_what_it_missed(live_url, page, composer):
    """The first socket loses the frame carrying "Second." and then drops; the page
    reconnects with after=<last seq it has> and the backlog brings the missing text, in
    batched frames (several events in one JSON array)."""
    urls: list[str] = []
    arrays: list[str] = []

    def route(socket: Any) -> None:
        urls.append(socket.url)
        server = socket.connect_to_server()
        lossy = len(urls) == 1

        def to_page(message: str | bytes) -> None:
            if lossy and "Second." in str(message):
                socket.close()
                return
            if str(message).startswith("["):
                arrays.append(str(message))
            socket.send(message)

        server.on_message(to_page)
        socket.on_message(lambda message: server.send(message))

    page.route_web_socket(re.compile(r".*/ws/runs/.*"), route)
    login(page, live_url, composer.username)
    config = {"script": [
        _edit_turn("First.", "first.md", 2000), _edit_turn("Second.", "second.md", 1000),
        {"text": "Third.", "delay_ms": 1000, "tool_calls": [{"name": "yield_control", "arguments": {
            "status": "SUCCESS", "output_payload": {"answer": 3}}}]}]}
    packet = {**PACKET, "capabilities": ["fs_write"], "allow_nested": False, "label": "three-turns"}
    _start_run_in_the_form(page, live_url, packet, config)
    page.evaluate("window.__sameDocument = true")
    # every status the badge takes, recorded as it changes (a reconnect can be over before a
    # poll for it would look)
    page.evaluate("""() => {
      const badge = document.getElementById("live-status");
      window.__statuses = [badge.dataset.status];
      new MutationObserver(() => window.__statuses.push(badge.dataset.status))
        .observe(badge, {attributes: true, attributeFilter: ["data-status"]});
    }""")

    page.wait_for_function("(window.__statuses || []).includes('reconnecting')")
    page.wait_for_selector("#live-status[data-status=live]")
    page.wait_for_selector("#run-head [data-state=COMPLETE]")
    output = page.locator("#run-streams .stream-text")
    output.filter(has_text="Third.").wait_for()
    assert output.inner_text() == "First.\n\nSecond.\n\nThird."

    assert len(urls) >= 2
    assert all("batch=1" in url for url in urls)
    assert arrays, "no frame carried several events"
    resumed_after = re.search(r"[?&]after=(\d+)", urls[1])
    assert resumed_after is not None and int(resumed_after.group(1)) > 0
    seqs = page.eval_on_selector_all("#run-timeline > li", "rows => rows.map(row => Number(row.dataset.seq))")
    assert seqs == sorted(set(seqs))   # every event once, in order
    assert page.evaluate("window.__sameDocument") is True
