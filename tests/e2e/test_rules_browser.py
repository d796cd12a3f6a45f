"""Approval rules in a real browser against a real server with its embedded worker: an item
waits in an approver's inbox; a rule author writes a rule that matches it (through the
API, as a rule author's token would); the item says which rule decided it and leaves the
inbox without a reload, and its run goes on."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.conftest import bearer, login, make_user
from tests.delegations import scripts

pytestmark = pytest.mark.browser


def test_a_new_rule_takes_a_waiting_item_out_of_the_inbox_live(
        live_url: str, page: Any, composer: Any, approver: Any, django_user_model: Any) -> None:
    author = make_user(django_user_model, "rita", "approvers", "rule_authors", password=None)
    login(page, live_url, approver.username)
    page.goto(f"{live_url}/inbox/")
    page.evaluate("window.__sameDocument = true")
    page.wait_for_selector("#inbox-live[data-status=live]")

    started = httpx.post(f"{live_url}/api/runs", headers=bearer(composer), timeout=10, json={
        "packet": scripts.approval_packet(label="cache-cleaner"),
        "adapter": {"name": "scripted", "config": scripts.needs_approval()}})
    assert started.status_code == 201, started.text
    run_id = started.json()["id"]
    item = page.locator(f'.inbox-item[data-run-id="{run_id}"]')
    item.wait_for()

    rule = {"name": "stale deletes", "reason": "cache files are routine", "effect": "approve",
            "match": {"kinds": ["capability"], "tools": ["delete_file"],
                      "arguments": [{"name": "path", "op": "under", "value": "."}]}}
    saved = httpx.post(f"{live_url}/api/approval-rules", headers=bearer(author), json=rule, timeout=20)
    assert saved.status_code == 201, saved.text

    page.locator(f'.inbox-item[data-run-id="{run_id}"] .left-note').wait_for()
    assert "by rule 'stale deletes' v1" in item.locator(".left-note").inner_text()
    item.wait_for(state="detached")
    assert page.evaluate("window.__sameDocument") is True, "the item left by a reload"

    for _ in range(100):
        state = httpx.get(f"{live_url}/api/runs/{run_id}", headers=bearer(composer), timeout=10).json()["state"]
        if state == "COMPLETE":
            break
        time.sleep(0.1)
    assert state == "COMPLETE"
