"""The MCP server object and who may call it: Handoff's own API tokens, counted against the
same failed-token limit as the REST API (429 with Retry-After past it), 401 otherwise.

The server is django-mcpz's ``MCPServer``, a plain Django view: the request passes through
the site's middleware (allowed hosts, header limits, security headers) like any API call,
and its tools run in the request's thread with the ORM, as the REST routes do.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any, Protocol

import msgspec
from django.http import HttpRequest, HttpResponse, JsonResponse
from django_mcpz.jsonrpc import INVALID_PARAMS, error_response
from django_mcpz.server import (
    _CACHE_FIELDS,
    BaseToolError,
    MCPServer,
    ToolError,
    _tool_definition,
    _tool_result,
    _validate_name_header,
)

from delegations.accounts.auth import WRONG_TOKEN, BearerTokenAuth, bearer_token
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
    credential = bearer_token(request.headers.get("Authorization", ""))
    if credential is None:
        return _unauthorized("Send a Handoff API token: 'Authorization: Bearer <token>' "
                             "(create one on your account page).")
    try:
        user = BearerTokenAuth().authenticate(request, credential)
    except RateLimited as exc:
        response = JsonResponse({"detail": exc.message}, status=HTTPStatus.TOO_MANY_REQUESTS)
        response["Retry-After"] = str(exc.retry_after)
        return response
    if user is None:
        return _unauthorized(WRONG_TOKEN, error="invalid_token")
    return None


def _unauthorized(detail: str, *, error: str | None = None) -> HttpResponse:
    challenge = f'Bearer error="{error}"' if error else "Bearer"
    return JsonResponse({"detail": detail}, status=HTTPStatus.UNAUTHORIZED,
                        headers={"WWW-Authenticate": challenge})


class ListedTools(Protocol):
    """Tools whose list changes while the server runs (one per published skill)."""

    def definitions(self, request: HttpRequest) -> list[dict[str, Any]]: ...
    def handles(self, name: str) -> bool: ...
    def call(self, request: HttpRequest, name: str, arguments: dict[str, Any]) -> Any: ...


class HandoffMCPServer(MCPServer):
    """django-mcpz's server, saying that it serves resources too (endpoint.py answers them),
    and listing and calling ``listed`` tools beside the ones registered with ``tool()``
    (endpoint.py hands in the per-skill tools, which import this module)."""

    listed: ListedTools | None = None

    def _tools_list(self, request: HttpRequest, request_id: str | int, params: dict[str, Any]) -> HttpResponse:
        if self.listed is None or params.get("cursor") is not None:
            return super()._tools_list(request, request_id, params)
        tools = [_tool_definition(tool, request) for tool in self._tools.values() if tool.permitted(request)]
        return self._result(request, request_id,
                            {"tools": tools + self.listed.definitions(request), **_CACHE_FIELDS})

    def _tools_call(self, request: HttpRequest, request_id: str | int, params: dict[str, Any], *,
                    legacy: bool = False) -> HttpResponse:
        name = params.get("name")
        if self.listed is None or not isinstance(name, str) or not self.listed.handles(name):
            return super()._tools_call(request, request_id, params, legacy=legacy)
        refused = None if legacy else _validate_name_header(request, request_id, name)
        if refused is not None:
            return refused
        arguments = params.get("arguments") or {}
        if not isinstance(arguments, dict):
            return error_response(request_id, INVALID_PARAMS, "arguments must be an object")
        try:
            output = self.listed.call(request, name, arguments)
        except BaseToolError as exc:
            return self._tool_error(request, request_id, str(exc))
        except Exception:   # as django-mcpz answers a registered tool that raises
            audit.exception("Tool %r raised an exception", name)
            return self._tool_error(request, request_id, f"Tool {name!r} failed unexpectedly.")
        return self._result(request, request_id, _tool_result(output))

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
