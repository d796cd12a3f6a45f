from __future__ import annotations

import httpx
import pytest
from django.core.management import call_command

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


@pytest.mark.parametrize("width", [1280, 390], ids=["desktop", "phone"])
def test_no_page_is_wider_than_the_window(live_url, page, composer, width):
    """Long goals, ids, session keys and schema property names are cut, wrapped or scroll
    inside their panel: none pushes a page past the window, on a desktop or a phone."""
    call_command("load_builtin_skills", verbosity=0)
    goal = "Say whether this review is positive, negative or mixed, " * 8
    response = httpx.post(f"{live_url}/api/runs?wait=10", headers=bearer(composer), timeout=20, json={
        "packet": {"subagent_type": "reviewer", "goal": goal},
        "adapter": {"name": "scripted", "config": {"script": [scripts.yield_turn()]}}})
    assert response.status_code == 201 and response.json()["state"] == "COMPLETE", response.text
    saved = httpx.post(f"{live_url}/api/delegations", headers=bearer(composer), json={
        "name": "unbroken", "packet": scripts.packet(goal="Check " + "x" * 160 + " before it ships")})
    assert saved.status_code == 201, saved.text
    page.set_viewport_size({"width": width, "height": 900})
    login(page, live_url, composer.username)
    for path in ("/", "/skills/", "/skills/agloop-executor/", "/skills/review-sentiment/", "/delegations/",
                 "/delegations/new/?skill=review-sentiment", "/runs/", f"/runs/{response.json()['id']}/",
                 "/inbox/", f"/delegations/{saved.json()['id']}/tree/"):
        page.goto(f"{live_url}{path}")
        wide = page.evaluate("document.documentElement.scrollWidth")
        assert wide <= width, f"{path} is {wide} px wide in a {width} px window"
        for card in page.locator(".node-card").all():   # a long word wraps inside its card
            assert page.evaluate("(card) => card.scrollWidth <= card.clientWidth", card.element_handle()), path
    page.goto(f"{live_url}/delegations/new/?skill=review-sentiment")
    assert page.locator("#id_name").bounding_box()["width"] >= min(300, width - 100)
