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
    for number in range(4):   # guesses at the rest of a token whose prefix is known
        response = client.get("/api/me", headers={"Authorization": f"Bearer {good[:12]}guess{number}"},
                              REMOTE_ADDR="10.0.0.9")
        assert response.status_code == 401
    refused = client.get("/api/me", headers={"Authorization": f"Bearer {good}"}, REMOTE_ADDR="10.0.0.9")
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 120
    assert "Too many failed API token attempts" in refused.json()["detail"]
    # a program on another address keeps working
    assert client.get("/api/me", headers={"Authorization": f"Bearer {good}"},
                      REMOTE_ADDR="10.0.0.10").status_code == 200


def test_made_up_tokens_are_limited_as_many_times_but_lock_out_no_real_token_on_their_address(
        client: Client, composer: Any, limits: Any) -> None:
    _, good = APIToken.issue(user=composer, name="ci")
    _, revoked = APIToken.issue(user=composer, name="old script")
    APIToken.objects.get(prefix=revoked[:12]).revoke()

    def me(token: str) -> int:
        return client.get("/api/me", headers={"Authorization": f"Bearer {token}"},
                          REMOTE_ADDR="10.0.0.9").status_code

    assert [me(f"hnd_madeup{number}xyz") for number in range(6)] == [401] * 4 + [429] * 2
    assert [me(revoked) for _ in range(5)] == [401] * 4 + [429]   # a forgotten script's old token
    assert me(good) == 200


def test_right_api_tokens_are_never_limited(client: Client, composer: Any, limits: Any) -> None:
    _, good = APIToken.issue(user=composer, name="ci")
    for _ in range(10):
        assert client.get("/api/me", headers={"Authorization": f"Bearer {good}"}).status_code == 200


def test_a_forged_forwarded_header_does_not_dodge_the_limit(client: Client, limits: Any) -> None:
    # the server alone believes X-Forwarded-For, from FORWARDED_ALLOW_IPS (tests/test_serve.py)
    for number in range(4):
        client.get("/api/me", headers={"Authorization": "Bearer nope", "X-Forwarded-For": f"1.1.1.{number}"})
    assert client.get("/api/me", headers={"Authorization": "Bearer nope",
                                          "X-Forwarded-For": "1.1.1.99"}).status_code == 429


def test_wrong_admin_passwords_count_against_the_same_login_limits(client: Client, admin_user: Any) -> None:
    answers = [client.post("/admin/login/", {"username": "root", "password": f"guess{number}"},
                           REMOTE_ADDR="10.0.0.7").status_code for number in range(30)]
    assert answers.count(200) == 5 and set(answers[5:]) == {429}   # HANDOFF_LOGIN_MAX_FAILURES
    refused = client.post("/admin/login/", {"username": "root", "password": PASSWORD}, REMOTE_ADDR="10.0.0.7")
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert "Too many failed logins" in refused.content.decode()
    assert "_auth_user_id" not in client.session
    # the app's login page counts the same username: the admin was no way around it
    assert login(client, "root", PASSWORD, address="10.0.0.8").status_code == 429


def test_the_admin_login_still_logs_staff_in(client: Client, admin_user: Any) -> None:
    response = client.post("/admin/login/?next=/admin/", {"username": "root", "password": PASSWORD})
    assert response.status_code == 302 and response["Location"] == "/admin/"
    assert client.get("/admin/").status_code == 200
