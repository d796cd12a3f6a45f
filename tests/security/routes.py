"""Every route of the site, read from the URL resolver and the OpenAPI schema, and a way
to call one as each role inside a transaction that is rolled back afterwards."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from handoff_site.api import api
from tests.security.conftest import ROLES, World

API_METHODS = ("get", "post", "put", "patch", "delete")


def _walk(patterns: list[Any], prefix: str = "", namespace: str = "") -> Iterator[tuple[str, str]]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            inner = f"{namespace}:{pattern.namespace}" if namespace and pattern.namespace else (
                pattern.namespace or namespace)
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern), inner)
        elif isinstance(pattern, URLPattern):
            name = f"{namespace}:{pattern.name}" if namespace and pattern.name else (pattern.name or "")
            yield prefix + str(pattern.pattern), name


def page_routes() -> dict[str, str]:
    """URL name -> path pattern of every page (admin and API aside: they have tables of
    their own)."""
    return {name or pattern: pattern for pattern, name in _walk(get_resolver().url_patterns)
            if not pattern.startswith(("admin/", "api/"))}


def api_routes() -> list[str]:
    """``METHOD /api/path`` of every operation in the OpenAPI schema."""
    schema = api.get_openapi_schema(path_prefix="/api/")
    return sorted(f"{method.upper()} {path}" for path, operations in schema["paths"].items()
                  for method in operations if method in API_METHODS)


def fill(pattern: str, world: World) -> str:
    """A concrete path: ``<int:run_id>`` and ``{run_id}`` take the world's objects."""
    values = world.url_kwargs()

    def value(match: re.Match[str]) -> str:
        return str(values[match.group(1)])
    path = re.sub(r"<(?:\w+:)?(\w+)>", value, pattern)
    path = re.sub(r"\{(\w+)\}", value, path)
    return path if path.startswith("/") else "/" + path


def _client(world: World, role: str, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf, raise_request_exception=False)
    user = world.users[role]
    if user is not None:
        client.force_login(user)
    return client


def page_status(world: World, role: str, method: str, path: str) -> int:
    with transaction.atomic():
        client = _client(world, role)
        response = client.post(path, {}) if method == "POST" else client.get(path)
        transaction.set_rollback(True)
    return response.status_code


def api_status(world: World, role: str, method: str, path: str, body: Any) -> int:
    with transaction.atomic():
        client = Client(raise_request_exception=False)
        token = world.tokens.get(role)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        response = client.generic(method, path, json.dumps(body) if body is not None else "",
                                  content_type="application/json", headers=headers)
        transaction.set_rollback(True)
    return response.status_code


def row(statuses: dict[str, int]) -> str:
    return " ".join(str(statuses[role]) for role in ROLES)
