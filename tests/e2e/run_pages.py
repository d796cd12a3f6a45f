"""What the run page's browser tests share: a scripted run started through the API and
opened live on its page, and a node of its tree found by label."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import bearer, login


def open_scripted_run(page: Any, live_url: str, user: Any, packet: dict[str, Any],
                      config: dict[str, Any]) -> str:
    """Log ``user`` in, start ``packet`` on the scripted adapter, open its page and wait
    for the live view; the run's id."""
    login(page, live_url, user.username)
    response = httpx.post(f"{live_url}/api/runs", headers=bearer(user), timeout=10,
                          json={"packet": packet, "adapter": {"name": "scripted", "config": config}})
    assert response.status_code == 201, response.text
    run_id = str(response.json()["id"])
    page.goto(f"{live_url}/runs/{run_id}/")
    page.wait_for_selector("#live-status[data-status=live]")
    return run_id


def tree_node(page: Any, label: str) -> Any:
    return page.locator(f"#run-tree li.tree-node:has(> .tree-row > a:text-is('{label}'))")
