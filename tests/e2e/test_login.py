from __future__ import annotations

import pytest

from tests.conftest import login

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
