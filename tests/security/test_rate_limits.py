"""Failed logins and API tokens are limited per username and per address: past the
limit, 429 with Retry-After, until the window ends."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from delegations.models import APIToken
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


@pytest.fixture
def limits(settings: Any) -> Any:
    settings.HANDOFF_LOGIN_MAX_FAILURES = 3
    settings.HANDOFF_LOGIN_MAX_FAILURES_PER_ADDRESS = 5
    settings.HANDOFF_LOGIN_WINDOW_S = 600
    settings.HANDOFF_TOKEN_MAX_FAILURES = 4
    settings.HANDOFF_TOKEN_WINDOW_S = 120
    return settings


def login(client: Client, username: str, password: str, address: str = "10.0.0.1") -> Any:
    return client.post("/accounts/login/", {"username": username, "password": password},
                       REMOTE_ADDR=address)


def test_a_username_that_failed_too_often_gets_429_with_retry_after_even_with_the_right_password(
        client: Client, composer: Any, limits: Any) -> None:
    for _ in range(3):
        assert login(client, "carol", "wrong").status_code == 200
    refused = login(client, "carol", PASSWORD)
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 600
    assert "Too many failed logins" in refused.content.decode()
    assert "_auth_user_id" not in client.session


def test_a_right_password_before_the_limit_logs_in_and_clears_the_username_count(
        client: Client, composer: Any, limits: Any) -> None:
    for _ in range(2):
        login(client, "carol", "wrong")
    assert login(client, "carol", PASSWORD).status_code == 302
    client.logout()
    for _ in range(2):
        assert login(client, "carol", "wrong").status_code == 200   # counting from zero again


def test_one_address_spraying_many_usernames_is_limited_too(client: Client, limits: Any) -> None:
    for number in range(5):
        assert login(client, f"user{number}", "guess").status_code == 200
    assert login(client, "someone-else", "guess").status_code == 429
    # another address is not affected
    assert login(client, "someone-else", "guess", address="10.0.0.2").status_code == 200


def test_the_login_window_ends(client: Client, composer: Any, limits: Any,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    import time as real_time

    for _ in range(3):
        login(client, "carol", "wrong")
    assert login(client, "carol", PASSWORD).status_code == 429
    later = real_time.time() + 601
    monkeypatch.setattr("delegations.accounts.rate_limits.time.time", lambda: later)
    assert login(client, "carol", PASSWORD).status_code == 302


def test_wrong_api_tokens_from_one_address_get_429_with_retry_after(
        client: Client, composer: Any, limits: Any) -> None:
    _, good = APIToken.issue(user=composer, name="ci")
    for number in range(4):
        response = client.get("/api/me", headers={"Authorization": f"Bearer hnd_guess{number}"},
                              REMOTE_ADDR="10.0.0.9")
        assert response.status_code == 401
    refused = client.get("/api/me", headers={"Authorization": f"Bearer {good}"}, REMOTE_ADDR="10.0.0.9")
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 120
    assert "Too many failed API token attempts" in refused.json()["detail"]
    # a program on another address keeps working
    assert client.get("/api/me", headers={"Authorization": f"Bearer {good}"},
                      REMOTE_ADDR="10.0.0.10").status_code == 200


def test_right_api_tokens_are_never_limited(client: Client, composer: Any, limits: Any) -> None:
    _, good = APIToken.issue(user=composer, name="ci")
    for _ in range(10):
        assert client.get("/api/me", headers={"Authorization": f"Bearer {good}"}).status_code == 200


def test_a_forged_forwarded_header_does_not_dodge_the_limit_unless_the_proxy_is_trusted(
        client: Client, limits: Any) -> None:
    for number in range(4):
        client.get("/api/me", headers={"Authorization": "Bearer nope", "X-Forwarded-For": f"1.1.1.{number}"})
    assert client.get("/api/me", headers={"Authorization": "Bearer nope",
                                          "X-Forwarded-For": "1.1.1.99"}).status_code == 429
    limits.HANDOFF_CLIENT_IP_HEADER = "X-Forwarded-For"
    assert client.get("/api/me", headers={"Authorization": "Bearer nope",
                                          "X-Forwarded-For": "spoofed, 1.1.1.99"}).status_code == 401
