"""Every unsafe browser route refuses a POST without the CSRF token; the API does too when
it is called with the browser's session rather than a token."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.security.conftest import World
from tests.security.routes import api_routes, fill, page_routes
from tests.security.test_route_table import PAGES

pytestmark = pytest.mark.django_db

# routes a logged-in person may POST to (from the table: not 405 for the owner); /mcp reads
# no session at all, only a token (test_mcp_ignores_the_browser_session)
UNSAFE_PAGES = sorted(key.split(" ", 1)[1] for key, statuses in PAGES.items()
                      if key.startswith("POST ") and statuses.split()[4] != "405" and key != "POST mcp")


def test_the_list_of_unsafe_pages_is_not_empty() -> None:
    assert {"delegations:inbox_decide", "delegations:token_create", "delegations:run_cancel",
            "login", "logout"} <= set(UNSAFE_PAGES)


@pytest.mark.parametrize("name", UNSAFE_PAGES)
def test_a_post_without_the_csrf_token_is_refused(name: str, world: World) -> None:
    client = Client(enforce_csrf_checks=True)
    if name != "login":
        client.force_login(world.users["superuser"])  # type: ignore[arg-type]
    response = client.post(fill(page_routes()[name], world), {"decision": "approve", "comment": "x"})
    assert response.status_code == 403, name
    assert b"CSRF" in response.content


def test_mcp_ignores_the_browser_session(world: World) -> None:
    """A page another site opens can post to /mcp with the visitor's cookies: they grant
    nothing there, so /mcp needs no CSRF token."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.users["superuser"])  # type: ignore[arg-type]
    response = client.post("/mcp", '{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}',
                           content_type="application/json")
    assert response.status_code == 401


def test_a_post_with_the_csrf_token_goes_through(world: World) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.users["owner"])  # type: ignore[arg-type]
    client.get("/account/")
    token = client.cookies["csrftoken"].value
    response = client.post("/account/tokens/", {"name": "deploy", "csrfmiddlewaretoken": token})
    assert response.status_code == 200 and b"hnd_" in response.content


UNSAFE_API = [key for key in api_routes() if not key.startswith("GET ")]


@pytest.mark.parametrize("key", UNSAFE_API)
def test_the_api_with_a_session_and_no_csrf_token_is_refused(key: str, world: World) -> None:
    method, pattern = key.split(" ", 1)
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.users["superuser"])  # type: ignore[arg-type]
    response = client.generic(method, fill(pattern, world), "{}", content_type="application/json")
    assert response.status_code == 403, key
    assert "CSRF" in response.json()["detail"]


def test_the_api_with_a_token_needs_no_csrf_token(world: World) -> None:
    client = Client(enforce_csrf_checks=True)
    response = client.post(f"/api/runs/{world.run.pk}/cancel", "{}", content_type="application/json",
                           headers={"Authorization": f"Bearer {world.tokens['owner']}"})
    assert response.status_code == 200
