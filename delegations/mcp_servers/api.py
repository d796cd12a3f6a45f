"""REST routes for the MCP servers runs may use (``/api/mcp-servers``): list, add, read,
change, delete.

Superusers only (403 for everyone else): a server record decides which host receives a
secret and which ``HANDOFF_MCP_SECRET_*`` variable is read for it, which is the
operator's choice. The secret itself never passes through here; an answer says only
whether its variable is set on this server.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema, Status
from pydantic import Field

from delegations.models import McpServer
from delegations.request_bodies import RequestBody
from delegations.secret_records_api import record_or_404, require_superuser, saved_or_422

router = Router(tags=["mcp servers"])


class McpServerIn(RequestBody):
    name: str = Field(min_length=1, max_length=30, examples=["github"],
                      description="Lowercase letters, digits and hyphens; tools are offered as "
                                  "mcp__<name>__<tool>.")
    url: str = Field("", max_length=500, examples=["https://tools.example.com/mcp"],
                     description="The streamable-HTTP endpoint (or give stdio_command).")
    stdio_command: str = Field("", max_length=100,
                               description="A command name from HANDOFF_MCP_STDIO_COMMANDS, instead of a URL.")
    secret_env: str = Field("", max_length=100, examples=["HANDOFF_MCP_SECRET_GITHUB"],
                            description="The name of the variable holding the secret (sent as a Bearer "
                                        "token); it must start with HANDOFF_MCP_SECRET_.")
    allowed_tools: list[str] = Field(min_length=1, max_length=200, examples=[["search_issues"]])
    tool_capabilities: dict[str, str] = Field(
        default_factory=dict, examples=[{"search_issues": "search"}],
        description="The capability a run needs per tool, where it is not network_outbound.")
    timeout_s: float = Field(30.0, ge=1, le=600)
    enabled: bool = True


class McpServerUpdateIn(RequestBody):
    """Fields left out stay as they are."""

    name: str | None = Field(None, min_length=1, max_length=30)
    url: str | None = Field(None, max_length=500)
    stdio_command: str | None = Field(None, max_length=100)
    secret_env: str | None = Field(None, max_length=100)
    allowed_tools: list[str] | None = Field(None, min_length=1, max_length=200)
    tool_capabilities: dict[str, str] | None = None
    timeout_s: float | None = Field(None, ge=1, le=600)
    enabled: bool | None = None


class McpServerOut(Schema):
    id: int
    name: str
    url: str
    stdio_command: str
    secret_env: str
    secret_set: bool = Field(description="Whether secret_env is set on this server (never its value).")
    allowed_tools: list[str]
    tool_capabilities: dict[str, str]
    timeout_s: float
    enabled: bool
    created_at: datetime
    updated_at: datetime


class ErrorOut(Schema):
    detail: Any


def _out(server: McpServer) -> McpServerOut:
    return McpServerOut(
        id=server.pk, name=server.name, url=server.url, stdio_command=server.stdio_command,
        secret_env=server.secret_env, secret_set=bool(server.secret_env and os.environ.get(server.secret_env)),
        allowed_tools=server.allowed_tools, tool_capabilities=server.tool_capabilities,
        timeout_s=server.timeout_s, enabled=server.enabled, created_at=server.created_at,
        updated_at=server.updated_at)


def _superuser(request: HttpRequest) -> None:
    require_superuser(request, "MCP servers")


def _server(request: HttpRequest, server_id: int) -> McpServer:
    return record_or_404(request, McpServer, server_id, "MCP servers", "MCP server")


def _saved(server: McpServer) -> Status[Any] | None:
    return saved_or_422(server, ErrorOut)


@router.get("", response={200: list[McpServerOut], 403: ErrorOut}, summary="The MCP servers runs may use")
def list_servers(request: HttpRequest) -> list[McpServerOut]:
    _superuser(request)
    return [_out(server) for server in McpServer.objects.all()]


@router.post("", response={201: McpServerOut, 403: ErrorOut, 422: ErrorOut}, summary="Add an MCP server")
def create_server(request: HttpRequest, body: McpServerIn) -> Status[Any]:
    _superuser(request)
    server = McpServer(**body.model_dump())
    return _saved(server) or Status(201, _out(server))


@router.get("/{server_id}", response={200: McpServerOut, 403: ErrorOut, 404: ErrorOut},
            summary="One MCP server")
def read_server(request: HttpRequest, server_id: int) -> McpServerOut:
    return _out(_server(request, server_id))


@router.put("/{server_id}", response={200: McpServerOut, 403: ErrorOut, 404: ErrorOut, 422: ErrorOut},
            summary="Change an MCP server")
def update_server(request: HttpRequest, body: McpServerUpdateIn,
                  server_id: int) -> Status[Any]:
    server = _server(request, server_id)
    for field, value in body.model_dump(exclude_unset=True).items():
        if value is not None:
            setattr(server, field, value)
    return _saved(server) or Status(200, _out(server))


@router.delete("/{server_id}", response={204: None, 403: ErrorOut, 404: ErrorOut},
               summary="Delete an MCP server")
def delete_server(request: HttpRequest, server_id: int) -> Status[None]:
    _server(request, server_id).delete()
    return Status(204, None)
