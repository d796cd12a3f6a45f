from __future__ import annotations

import httpx
import pytest

from tests.conftest import bearer, login
from tests.delegations import scripts

pytestmark = pytest.mark.browser


def test_a_person_logs_in_and_sees_the_dashboard(live_url, page, composer):
    page.goto(live_url)
    assert "/accounts/login/" in page.url
    login(page, live_url, composer.username)
    assert page.locator("h1").inner_text() == "Dashboard"
    assert page.locator("nav[aria-label=Main]").is_visible()


def test_a_wrong_password_is_refused_with_a_message(live_url, page, composer):
    page.goto(f"{live_url}/accounts/login/")
    page.fill("#id_username", composer.username)
    page.fill("#id_password", "wrong")
    page.click("button[type=submit]")
    assert page.locator(".errorlist").is_visible()


def test_a_long_goal_on_the_dashboard_is_cut_not_widening_the_page(live_url, page, composer):
    goal = "Say whether this review is positive, negative or mixed, " * 8
    response = httpx.post(f"{live_url}/api/runs?wait=10", headers=bearer(composer), timeout=20, json={
        "packet": {"subagent_type": "reviewer", "goal": goal},
        "adapter": {"name": "scripted", "config": {"script": [scripts.yield_turn()]}}})
    assert response.status_code == 201 and response.json()["state"] == "COMPLETE", response.text
    login(page, live_url, composer.username)
    assert page.locator("#recent-h").is_visible()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
