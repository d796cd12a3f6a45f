"""The inbox in a real browser against a real server with its embedded worker: a scripted
run that needs network_outbound arrives in an approver's inbox without a reload; the
approver edits the URL, sees the diff, approves with the keyboard, and the run's page
shows it carry on with the edited URL. The run's own owner is refused, with the reason."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import httpx
import pytest

from tests.conftest import bearer, login

pytestmark = pytest.mark.browser


def packet(label: str) -> dict[str, Any]:
    return {
        "goal": "Fetch the price list and report its status", "label": label, "subagent_type": "researcher",
        "instruction_set": "Fetch the URL with http_get, then answer with JSON.", "input_data": {"source": "prices"},
        "allowed_inputs": ["source"], "expected_output_schema": {"answer": "integer"},
        "success_criteria": ["JSON is schema-valid"], "timeout_s": 120,
        "budget": {"max_model_calls": 6, "max_tokens": 20000}, "capabilities": ["network_outbound"],
    }


def fetching(url: str) -> dict[str, Any]:
    return {"script": [
        {"text": "Fetching the price list.", "usage": {"input_tokens": 90, "output_tokens": 20},
         "tool_calls": [{"name": "http_get", "arguments": {"url": url}}]},
        {"text": "Got it.", "tool_calls": [{"name": "yield_control", "arguments": {
            "status": "SUCCESS", "output_payload": {"answer": 200}, "log_summary": "fetched"}}]},
    ]}


def start_run(live_url: str, owner: Any, label: str, url: str) -> str:
    response = httpx.post(f"{live_url}/api/runs", headers=bearer(owner), timeout=10,
                          json={"packet": packet(label), "adapter": {"name": "scripted", "config": fetching(url)}})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_a_network_call_arrives_live_is_edited_with_a_diff_and_approved_from_the_keyboard(
        live_url: str, page: Any, chromium: Any, composer: Any, approver: Any) -> None:
    login(page, live_url, approver.username)
    page.goto(f"{live_url}/inbox/")
    page.evaluate("window.__sameDocument = true")
    page.wait_for_selector("#inbox-live[data-status=live]")
    assert page.locator("#inbox-empty").is_visible()

    asked, edited = f"{live_url}/api/not-this-one", f"{live_url}/api/health"
    run_id = start_run(live_url, composer, "price-fetcher", asked)
    item = page.locator(f'.inbox-item[data-run-id="{run_id}"]')
    item.wait_for()
    assert page.evaluate("window.__sameDocument") is True, "the item arrived by a reload"
    assert page.locator("#inbox-empty").is_hidden()
    assert f"make one outbound HTTP request to {asked}" in item.inner_text()
    assert "price-fetcher" in item.locator(".lineage").inner_text()

    page.keyboard.press("j")
    assert "is-current" in (item.get_attribute("class") or "")
    page.keyboard.press("e")
    editor = item.locator("textarea[name=edited_arguments]")
    assert editor.evaluate("element => element === document.activeElement")
    assert json.loads(editor.input_value()) == {"url": asked}
    editor.fill(json.dumps({"url": edited}))
    item.get_by_role("button", name="Check and show the changes").click()
    diff = item.locator("[data-edit-diff]")
    diff.wait_for()
    assert f'-  "url": "{asked}"' in diff.inner_text() and f'+  "url": "{edited}"' in diff.inner_text()

    page.keyboard.press("Escape")
    page.keyboard.press("a")
    page.locator(f'.inbox-item[data-run-id="{run_id}"][data-pending="0"]').wait_for()
    assert "approved with edits" in item.inner_text()
    recent = page.locator(f'#inbox-history tr[data-approval-id="{item.get_attribute("data-approval-id")}"]')
    recent.wait_for()   # listed under "Recently decided" at once, without a reload
    assert "edited" in recent.inner_text() and "price-fetcher" in recent.inner_text()
    item.wait_for(state="detached")
    assert page.evaluate("window.__sameDocument") is True

    watcher = chromium.new_context(viewport={"width": 1280, "height": 900}).new_page()
    try:
        login(watcher, live_url, composer.username)
        watcher.goto(f"{live_url}/runs/{run_id}/")
        watcher.wait_for_selector("#run-head [data-state=COMPLETE]")
        approvals = watcher.locator("#run-approvals").inner_text()
        assert "edited" in approvals and f"by {approver.username}" in approvals
        assert watcher.locator("#run-timeline").filter(has_text=re.compile(r"http_get")).count()
        results = httpx.get(f"{live_url}/api/runs/{run_id}/events", headers=bearer(composer), timeout=10).json()
        events = results["events"] if isinstance(results, dict) else results
        fetched = [event for event in events if event["type"] == "tool_result" and event["data"].get("name") == "http_get"]
        assert fetched and fetched[0]["data"]["result"]["url"] == edited
    finally:
        watcher.context.close()


def test_the_runs_owner_is_refused_with_the_reason(live_url: str, page: Any, admin_user: Any) -> None:
    run_id = start_run(live_url, admin_user, "own-fetch", f"{live_url}/api/health")
    login(page, live_url, admin_user.username)
    page.goto(f"{live_url}/inbox/")
    item = page.locator(f'.inbox-item[data-run-id="{run_id}"]')
    item.wait_for()
    assert "You started this run; someone else must decide its inbox items" in item.inner_text()
    assert item.get_by_role("button", name="Approve", exact=True).is_disabled()
    page.keyboard.press("j")
    page.keyboard.press("a")
    page.wait_for_timeout(500)
    response = httpx.get(f"{live_url}/api/approvals", params={"status": "pending"}, headers=bearer(admin_user))
    assert [entry["run_id"] for entry in response.json()["results"]] == [run_id]


def test_the_inbox_hears_its_socket_even_when_its_own_script_loads_late(
        live_url: str, page: Any, approver: Any) -> None:
    """The nav's socket script must not connect before the page's own script listens:
    with inbox.js held back, the socket used to open unheard and the page never said
    "Live"."""
    def late(route: Any) -> None:
        time.sleep(1.0)
        route.continue_()

    page.route(re.compile(r".*/js/inbox\.js.*"), late)
    login(page, live_url, approver.username)
    page.goto(f"{live_url}/inbox/")
    page.wait_for_selector("#inbox-live[data-status=live]", timeout=10_000)


def test_a_decision_made_with_tab_and_enter_keeps_the_keyboard_in_the_inbox(
        live_url: str, page: Any, admin_user: Any, approver: Any) -> None:
    # focus went with the swapped card to the page's body: the next Tab started at the top
    first = start_run(live_url, admin_user, "tab-first", f"{live_url}/api/health")
    second = start_run(live_url, admin_user, "tab-second", f"{live_url}/api/health")
    login(page, live_url, approver.username)
    page.goto(f"{live_url}/inbox/")
    for run_id in (first, second):
        page.locator(f'.inbox-item[data-run-id="{run_id}"]').wait_for()
    decided = page.locator('.inbox-item[data-pending="1"]').first
    decided_id = decided.get_attribute("data-approval-id")
    decided.get_by_role("button", name="Approve", exact=True).focus()
    page.keyboard.press("Enter")
    page.wait_for_function(f"""() => {{
        const card = document.querySelector('.inbox-item[data-approval-id="{decided_id}"]');
        return card && card.dataset.pending === "0" && card.contains(document.activeElement); }}""")
    # when the decided card leaves, the keyboard moves to the item that is left
    page.wait_for_function(f"""() => !document.querySelector('.inbox-item[data-approval-id="{decided_id}"]')
        && document.activeElement.matches('.inbox-item[data-pending="1"]')""", timeout=15000)
