"""Malformed Content-Type headers and bodies get 400/413/415/422 with a JSON ``detail``
saying what is wrong, on every unsafe API operation; pages answer them 400, never 500."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.security.conftest import World
from tests.security.routes import api_routes, fill, page_routes
from tests.security.test_csrf import UNSAFE_PAGES

pytestmark = pytest.mark.django_db

UNSAFE_API = [key for key in api_routes() if not key.startswith(("GET ", "DELETE "))]
MALFORMED = [
    ("multipart/form-data", b"--x\r\nnot really\r\n"),
    ("multipart/form-data; boundary=", b"anything"),
    ("multipart/form-data; boundary=zzz", b"--zzz\r\nContent-Disposition: form-data\r\n\r\n"),
    ("application/json", b"{not json"),
    ("application/json", b"\xff\xfe\x00garbage"),
    ("application/json", b"[" * 100_000),
    ("application/x-www-form-urlencoded", b"%%%=&&&" * 10),
    ("text/plain", b"\x00\x01\x02"),
    ("application/xml", b"<packet/>"),
    ("image/png", b"\x89PNG\r\n"),
]


@pytest.mark.parametrize("key", UNSAFE_API)
def test_every_unsafe_api_operation_refuses_malformed_bodies_with_a_json_detail(
        key: str, world: World) -> None:
    method, pattern = key.split(" ", 1)
    client = Client(raise_request_exception=False)
    headers = {"Authorization": f"Bearer {world.tokens['superuser']}"}
    for content_type, body in MALFORMED:
        response = client.generic(method, fill(pattern, world), body, content_type=content_type,
                                  headers=headers)
        assert response.status_code < 500, (key, content_type, body[:20], response.content[:300])
        if response.status_code >= 400:
            assert response["Content-Type"].startswith("application/json")
            assert response.json()["detail"], (key, content_type)


def test_a_multipart_body_without_a_boundary_says_so(world: World) -> None:
    response = Client().post("/api/skills", b"x", content_type="multipart/form-data",
                             headers={"Authorization": f"Bearer {world.tokens['owner']}"})
    assert response.status_code == 400
    assert "boundary" in response.json()["detail"]


def test_a_json_body_that_does_not_parse_says_where(world: World) -> None:
    response = Client().post("/api/runs", b'{"packet": ', content_type="application/json",
                             headers={"Authorization": f"Bearer {world.tokens['owner']}"})
    assert response.status_code == 400
    assert "not valid JSON" in response.json()["detail"] and "line 1" in response.json()["detail"]


@pytest.mark.parametrize("path", ["/api/runs", "/api/delegations", "/api/approval-rules"])
def test_nan_in_a_body_is_refused_before_it_reaches_a_json_column(world: World, path: str) -> None:
    # Python's json reads NaN; SQLite's JSON columns refuse it at the insert: a 500
    body = b'{"packet": {"goal": "x", "budget": {"max_tokens": NaN}}, "adapter": {"name": "scripted", "config": {"t": NaN}}}'
    response = Client().post(path, body, content_type="application/json",
                             headers={"Authorization": f"Bearer {world.tokens['owner']}"})
    assert response.status_code == 400, response.content
    assert "NaN is not a JSON number" in response.json()["detail"]


def test_a_body_in_another_format_gets_415(world: World) -> None:
    response = Client().post("/api/delegations", b"<delegation/>", content_type="application/xml",
                             headers={"Authorization": f"Bearer {world.tokens['owner']}"})
    assert response.status_code == 415
    assert "application/json" in response.json()["detail"]


def test_json_sent_as_a_form_is_still_read(world: World) -> None:
    # `curl -d` sends application/x-www-form-urlencoded
    response = Client().post("/api/runs/" + world.run.pk + "/messages", b'{"text": "hi"}',
                             content_type="application/x-www-form-urlencoded",
                             headers={"Authorization": f"Bearer {world.tokens['owner']}"})
    assert response.status_code == 202


@pytest.mark.parametrize("name", UNSAFE_PAGES)
def test_a_browser_post_with_a_broken_multipart_header_never_gets_500(name: str, world: World) -> None:
    """Views that read the form get 400; the CSRF check, which reads it first, 400 or 403."""
    for csrf in (False, True):
        client = Client(enforce_csrf_checks=csrf, raise_request_exception=False)
        client.force_login(world.users["superuser"])  # type: ignore[arg-type]
        response = client.post(fill(page_routes()[name], world), b"--x\r\n",
                               content_type="multipart/form-data")
        assert response.status_code < 500, (name, csrf, response.status_code)
        if csrf:
            assert response.status_code in (400, 403), (name, response.status_code)


@pytest.mark.parametrize("path", ["/api/runs", "/api/approvals", "/api/delegations"])
def test_a_page_number_past_the_database_range_is_an_empty_page(path: str, world: World) -> None:
    response = Client(raise_request_exception=False).get(
        f"{path}?page={2**70}", headers={"Authorization": f"Bearer {world.tokens['owner']}"})
    assert response.status_code == 200, response.content
    listed = response.json()
    assert [value for key, value in listed.items() if isinstance(value, list)] == [[]]   # no rows
