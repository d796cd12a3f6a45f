"""Talking to a live Handoff's ``/mcp`` as an MCP client would: the official ``mcp`` client
with a bearer token, and raw JSON-RPC posts for what a well-behaved client never sends."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import httpx2
import mcp_types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

PROTOCOL = "2026-07-28"


def call(url: str, token: str, job: Callable[[Client], Awaitable[Any]], **client_options: Any) -> Any:
    """Run ``job`` with an official client connected to ``url``/mcp as ``token``'s user."""
    async def main() -> Any:
        async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
                    Client(streamable_http_client(f"{url}/mcp", http_client=http), **client_options) as client):
            return await job(client)
    return asyncio.run(main())


def tool(url: str, token: str, name: str, arguments: dict[str, Any], **client_options: Any) -> mcp_types.CallToolResult:
    async def job(client: Client) -> mcp_types.CallToolResult:
        return await client.call_tool(name, arguments)
    return call(url, token, job, **client_options)


def structured(result: mcp_types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, text(result)
    assert result.structured_content is not None
    return dict(result.structured_content)


def text(result: mcp_types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, mcp_types.TextContent))


def raw(url: str, body: bytes | str | dict[str, Any], *, token: str | None = None,
        method: str = "tools/call", name: str | None = None) -> httpx.Response:
    """One JSON-RPC POST with the 2026-07-28 headers (``_meta`` filled in when ``body`` is a
    dict), as a hand-written or broken client sends it."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": PROTOCOL, "Mcp-Method": method}
    if name is not None:
        headers["Mcp-Name"] = name
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if isinstance(body, dict):
        params = body.setdefault("params", {})
        params.setdefault("_meta", {"io.modelcontextprotocol/protocolVersion": PROTOCOL,
                                    "io.modelcontextprotocol/clientCapabilities": {}})
        body = json.dumps(body)
    return httpx.post(f"{url}/mcp", content=body, headers=headers, timeout=30)


def rpc_tool(url: str, token: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tools/call by hand: the JSON-RPC result object."""
    response = raw(url, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                         "params": {"name": name, "arguments": arguments}}, token=token, name=name)
    assert response.status_code == 200, response.text
    return dict(response.json()["result"])
