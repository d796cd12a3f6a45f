from __future__ import annotations

import json
import logging
import subprocess
import sys
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from delegations.models import APIToken
from handoff_site import env
from handoff_site.asgi import application

pytestmark = pytest.mark.django_db


def test_health_reports_database_channel_layer_and_workers(client):
    response = client.get("/api/health")
    assert response.status_code == 200
    body = response.json()
    assert body["database"]["ok"] is True
    assert body["channel_layer"]["ok"] is True
    assert "workers" in body and body["workers"]["backend"] == "db"


def test_every_page_requires_login(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_the_login_page_is_styled_like_the_app(client):
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    assert b"css/app.css" in response.content and b"Log in" in response.content


def test_a_logged_in_user_sees_the_dashboard_with_navigation(composer_client):
    response = composer_client.get("/")
    assert response.status_code == 200
    assert b"Dashboard" in response.content
    assert b'hx-headers=\'{"X-CSRFToken"' in response.content


def test_unknown_pages_get_the_styled_404(composer_client, settings):
    settings.DEBUG = False
    response = composer_client.get("/no/such/page/")
    assert response.status_code == 404
    assert b"Page not found" in response.content


def test_unknown_api_routes_answer_json_404(client):
    response = client.get("/api/no/such/route")
    assert response.status_code == 404
    assert "detail" in response.json()


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_an_unsafe_request_to_an_unknown_api_route_answers_json_404_not_a_csrf_page(method, composer):
    _, raw = APIToken.issue(user=composer, name="script")
    client = Client(enforce_csrf_checks=True)
    response = client.generic(method, "/api/no/such/route", "{}", content_type="application/json",
                              headers={"Authorization": f"Bearer {raw}"})
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["detail"] == "No API route at /api/no/such/route. See /api/docs."


def test_a_browser_post_to_an_unknown_api_route_is_told_the_same(composer):
    client = Client(enforce_csrf_checks=True)
    client.force_login(composer)
    response = client.post("/api/runz", "{}", content_type="application/json")
    assert response.status_code == 404 and "/api/docs" in response.json()["detail"]


@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("DELETE", "/api/health", "GET"),             # a route whose operations are sync
    ("DELETE", "/api/runs/some-run", "GET"),      # and one with an async operation
])
def test_a_known_api_route_answers_a_wrong_method_with_json_405(method, path, allowed, composer):
    _, raw = APIToken.issue(user=composer, name="script")
    response = Client().generic(method, path, headers={"Authorization": f"Bearer {raw}"})
    assert response.status_code == 405
    assert response["Allow"] == allowed
    assert response.json()["detail"] == (f"{method} is not allowed on {path}; it answers {allowed}. "
                                         "See /api/docs.")


def test_the_api_answers_401_json_without_credentials(client):
    response = client.get("/api/me")
    assert response.status_code == 401
    assert "Bearer" in response.json()["detail"]


def test_a_bearer_token_authenticates_the_api(client, composer):
    _, raw = APIToken.issue(user=composer, name="script")
    response = client.get("/api/me", headers={"Authorization": f"Bearer {raw}"})
    assert response.status_code == 200
    assert response.json() == {"username": "carol", "is_staff": False, "can_compose": True,
                               "can_approve": False}


def test_tokens_are_stored_hashed_and_revocable(client, composer):
    token, raw = APIToken.issue(user=composer, name="script")
    assert raw not in json.dumps(list(APIToken.objects.values()), default=str)
    token.revoke()
    response = client.get("/api/me", headers={"Authorization": f"Bearer {raw}"})
    assert response.status_code == 401


def test_a_wrong_token_gets_401(client, composer):
    response = client.get("/api/me", headers={"Authorization": "Bearer hnd_nope"})
    assert response.status_code == 401


def test_the_account_page_shows_a_new_token_once(composer_client):
    response = composer_client.post("/account/tokens/", {"name": "ci"})
    assert response.status_code == 200
    raw = APIToken.objects.get(name="ci")
    assert raw.prefix.encode() in response.content
    again = composer_client.get("/account/")
    assert b"will not be shown again" not in again.content


def test_a_token_without_a_name_is_refused_with_a_message(composer_client):
    response = composer_client.post("/account/tokens/", {"name": " "}, follow=True)
    assert b"Give the token a name" in response.content
    assert not APIToken.objects.exists()


def test_the_api_docs_and_schema_render(client):
    assert client.get("/api/docs").status_code == 200
    schema = client.get("/api/openapi.json").json()
    assert "/api/health" in schema["paths"]


def test_no_object_of_the_api_schema_has_a_key_twice(client):
    """Swagger UI refuses a document with a key twice ("duplicated mapping key"); json.loads
    keeps the last silently."""
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        assert len(keys) == len(set(keys)), sorted(key for key in keys if keys.count(key) > 1)
        return dict(pairs)

    json.loads(client.get("/api/openapi.json").content, object_pairs_hook=unique)


@pytest.mark.parametrize(("reader", "value", "message"), [
    (lambda: env.env_bool("HANDOFF_X", False), "maybe", "HANDOFF_X='maybe' is not a boolean"),
    (lambda: env.env_int("HANDOFF_X", 1), "ten", "HANDOFF_X='ten' is not a whole number"),
    (lambda: env.env_float("HANDOFF_X", 0.5, minimum=0, maximum=1), "2", "must be between"),
    (lambda: env.env_choice("HANDOFF_X", "a", ("a", "b")), "c", "must be one of: a, b"),
])
def test_bad_settings_fail_with_a_message_naming_the_variable(monkeypatch, reader, value, message):
    monkeypatch.setenv("HANDOFF_X", value)
    with pytest.raises(ImproperlyConfigured, match=message):
        reader()


def test_a_postgresql_url_keeps_its_options_beside_the_pool(tmp_path):
    shown = subprocess.run(
        [sys.executable, "-c", "import json; from django.conf import settings; "
                               "print(json.dumps(settings.DATABASES['default']['OPTIONS']))"],
        capture_output=True, text=True, check=True,
        env={"PATH": "/usr/bin:/bin", "HANDOFF_DATA_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "handoff_site.settings",
             "DATABASE_URL": "postgres://u@db.example:5432/h?sslmode=require", "HANDOFF_DATABASE_POOL_SIZE": "7"})
    options = json.loads(shown.stdout)
    assert options["sslmode"] == "require"
    assert options["pool"]["max_size"] == 7
    assert "idle_in_transaction_session_timeout" in options["options"]


def test_a_bad_setting_stops_start_up(tmp_path):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "manage.py", "check"], capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin", "HANDOFF_LANE_SIZE": "lots",
                                 "HANDOFF_DATA_DIR": str(tmp_path)})
    assert result.returncode != 0
    assert "HANDOFF_LANE_SIZE='lots' is not a whole number" in result.stderr


async def test_a_websocket_to_an_unknown_route_is_closed_and_the_server_keeps_serving():
    communicator = WebsocketCommunicator(application, "/ws/nowhere/",
                                         headers=[(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")])
    connected, _ = await communicator.connect()
    assert connected
    closed = await communicator.receive_output()
    assert closed == {"type": "websocket.close", "code": 4404}
    await communicator.disconnect()
    again = WebsocketCommunicator(application, "/ws/elsewhere/",
                                  headers=[(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")])
    assert (await again.connect())[0]
    await again.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_websocket_knows_the_signed_in_browser_session_and_not_a_forged_one(approver_client):
    origin = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")]
    session = approver_client.cookies["sessionid"].value
    for cookie, expected in ((f"sessionid={session}", {"type": "inbox.synced", "pending": 0}),
                             ("sessionid=forged", None), ("", None)):
        communicator = WebsocketCommunicator(application, "/ws/inbox/",
                                             headers=[*origin, (b"cookie", cookie.encode())])
        connected, _ = await communicator.connect()
        assert connected
        if expected is None:
            assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}
        else:
            assert json.loads(await communicator.receive_from(timeout=5)) == expected
        await communicator.disconnect()


def test_the_server_as_make_run_starts_it_serves_static_files_with_their_types(live_url: str) -> None:
    """Pages need their scripts and styles: served by WhiteNoise inside the async middleware
    chain (handoff_site/static_files.py), which the test client's synchronous path does not take."""
    import httpx

    script = httpx.get(f"{live_url}/static/js/inbox.js", timeout=10)
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert "KEYS" in script.text
    style = httpx.get(f"{live_url}/static/css/runs.css", timeout=10)
    assert style.status_code == 200 and style.headers["content-type"].startswith("text/css")
    assert httpx.get(f"{live_url}/static/js/no-such-file.js", timeout=10).status_code == 404


def test_the_server_as_make_run_starts_it_sends_the_security_headers_and_adds_slashes(live_url: str) -> None:
    """What Django's security, common, auth and clickjacking middleware do, through the
    async middleware chain the test client's synchronous path does not take: their
    headers, the slash a page's address lacks, the login a page asks for."""
    import httpx

    for answer in (httpx.get(f"{live_url}/api/health", timeout=10), httpx.get(f"{live_url}/accounts/login/", timeout=10)):
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["referrer-policy"] == "same-origin"
        assert answer.headers["cross-origin-opener-policy"] == "same-origin"
    slashless = httpx.get(f"{live_url}/accounts/login", timeout=10)
    assert slashless.status_code == 301 and slashless.headers["location"] == "/accounts/login/"
    # a page behind the login sends an anonymous visitor to it (request.user, set lazily)
    page = httpx.get(f"{live_url}/inbox/", timeout=10)
    assert page.status_code == 302 and page.headers["location"].startswith("/accounts/login/")


def test_a_refused_page_is_logged_in_one_line_and_a_crash_with_its_traceback(client, django_user_model, caplog):
    from django.contrib.auth.models import Group

    from handoff_site.log_filters import ClientErrorsInOneLine

    user = django_user_model.objects.create_user(username="carl")
    user.groups.add(Group.objects.get_or_create(name="approvers")[0])
    client.force_login(user)
    with caplog.at_level("WARNING", logger="django.request"):
        assert client.get("/inbox/rules/new/").status_code == 403   # approvers do not write rules
    [refused] = [record for record in caplog.records if record.name == "django.request"]
    assert refused.exc_info is None and "Forbidden" in refused.getMessage()
    crash = logging.LogRecord("django.request", logging.ERROR, __file__, 1, "Internal Server Error", None,
                              (ValueError, ValueError("boom"), None))
    crash.status_code = 500
    assert ClientErrorsInOneLine().filter(crash) and crash.exc_info is not None
