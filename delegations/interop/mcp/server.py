"""The MCP server object and who may call it: Handoff's own API tokens, counted against the
same failed-token limit as the REST API (429 with Retry-After past it), 401 otherwise.

The server is django-mcpz's ``MCPServer``, a plain Django view: the request passes through
the site's middleware (allowed hosts, header limits, security headers) like any API call,
and its tools run in the request's thread with the ORM, as the REST routes do.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

import msgspec
from django.http import HttpRequest, HttpResponse, JsonResponse
from django_mcpz.server import _CACHE_FIELDS, MCPServer, ToolError

from delegations.accounts.auth import BearerTokenAuth
from delegations.accounts.rate_limits import RateLimited
from delegations.accounts.roles import can_approve, can_compose

audit = logging.getLogger("handoff.mcp")

INSTRUCTIONS = (
    "Handoff runs work for you under a contract: find a skill (find_skills, describe_skill), "
    "start a run of it (start_run), then follow it (read_run, wait_for_run). Runs are "
    "checked before they start (lint_packet says what would block one), keep to their "
    "budget and capabilities, and ask a person in Handoff's inbox before risky actions: "
    "a run that waits for approval says so with the inbox URL; a person decides there, "
    "and you wait again. You can never approve a run's actions through these tools.")


def api_token_auth(request: HttpRequest) -> HttpResponse | None:
    """``Authorization: Bearer <token>`` with a Handoff API token, through the REST API's own
    check, so failures count against the same limit."""
    scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
    credential = credential.strip()
    if scheme.lower() != "bearer" or not credential:
        return _unauthorized("Send a Handoff API token: 'Authorization: Bearer <token>' "
                             "(create one on your account page).")
    try:
        user = BearerTokenAuth().authenticate(request, credential)
    except RateLimited as exc:
        response = JsonResponse({"detail": exc.message}, status=HTTPStatus.TOO_MANY_REQUESTS)
        response["Retry-After"] = str(exc.retry_after)
        return response
    if user is None:
        return _unauthorized("This API token is wrong or was revoked; create a new one on "
                             "your account page.", error="invalid_token")
    return None


def _unauthorized(detail: str, *, error: str | None = None) -> HttpResponse:
    challenge = f'Bearer error="{error}"' if error else "Bearer"
    return JsonResponse({"detail": detail}, status=HTTPStatus.UNAUTHORIZED,
                        headers={"WWW-Authenticate": challenge})


class HandoffMCPServer(MCPServer):
    """django-mcpz's server, saying that it serves resources too (endpoint.py answers them)."""

    def _discover(self, request: HttpRequest, request_id: str | int) -> HttpResponse:
        result: dict[str, Any] = {"supportedVersions": self.supported_versions,
                                  "capabilities": {"tools": {}, "resources": {}},
                                  "instructions": self.instructions, **_CACHE_FIELDS}
        return self._result(request, request_id, result)


server = HandoffMCPServer(name="handoff", version="1.0.0", title="Handoff",
                   description="Hand work to AI subagents safely: skills, runs with budgets "
                               "and capabilities, and an approval inbox.",
                   instructions=INSTRUCTIONS, auth=api_token_auth)


def about(description: str) -> msgspec.Meta:
    """A tool argument's description, as the calling model reads it in the input schema."""
    return msgspec.Meta(description=description)


ROLE_CHECKS = {"composer": can_compose, "approver": can_approve}


def require_role(request: HttpRequest, role: str, tool: str) -> None:
    """A tool the token's user may not use says which role it needs (the REST API's 403)."""
    if not ROLE_CHECKS[role](request.user):
        raise ToolError(f"{tool} needs the {role} role, which {request.user.get_username()} does "
                        f"not have: ask an admin to add you to the “{role}s” group.")


def log_call(request: HttpRequest, tool: str, **facts: Any) -> None:
    """One audit line per call that changes something: who, through which token's user, what."""
    audit.info("mcp %s by %s %s", tool, request.user.get_username(),
               " ".join(f"{key}={value}" for key, value in facts.items()))
