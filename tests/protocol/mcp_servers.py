"""MCP servers for the tests of runs that use MCP tools: built with the official SDK and
served on loopback (uvicorn in a thread), each keeping what it was asked."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError


@dataclass
class Seen:
    """What a test server was asked: the JSON-RPC methods, the tools called with their
    arguments, the Authorization headers, the trace context in the tool calls' ``_meta``."""

    methods: list[str] = field(default_factory=list)
    traceparents: list[str] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    authorization: list[str] = field(default_factory=list)


def weather_server(seen: Seen) -> MCPServer:
    """A small weather service: a forecast, and tools that misbehave on purpose."""
    server = MCPServer("weather")

    @server.tool()
    def forecast(city: str) -> str:
        """Tomorrow's weather for a city."""
        seen.calls.append(("forecast", {"city": city}))
        return f"Sunny and 21 C in {city} tomorrow."

    @server.tool()
    def whoami() -> str:
        """Echoes the credentials the caller sent (a careless server)."""
        seen.calls.append(("whoami", {}))
        return f"You sent: {seen.authorization[-1] if seen.authorization else 'nothing'}"

    @server.tool()
    async def slow(seconds: float) -> str:
        """Answers after ``seconds``."""
        seen.calls.append(("slow", {"seconds": seconds}))
        await asyncio.sleep(seconds)
        return "done"

    @server.tool()
    def big(size: int) -> str:
        """An answer of ``size`` characters."""
        seen.calls.append(("big", {"size": size}))
        return "x" * size

    @server.tool()
    def broken() -> str:
        """Always fails."""
        seen.calls.append(("broken", {}))
        raise ToolError("the weather station is offline")

    return server


class _Recorder:
    """ASGI middleware keeping each request's JSON-RPC method and Authorization header."""

    def __init__(self, app: Any, seen: Seen) -> None:
        self.app = app
        self.seen = seen

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        self.seen.authorization.append(headers.get(b"authorization", b"").decode())

        async def recording_receive() -> dict[str, Any]:
            message: dict[str, Any] = await receive()
            body = message.get("body") or b""
            try:
                request = json.loads(body) if body else {}
                method = request.get("method")
            except (ValueError, AttributeError):
                request, method = {}, None
            if method:
                self.seen.methods.append(method)
            if method == "tools/call":
                meta = (request.get("params") or {}).get("_meta") or {}
                self.seen.traceparents.append(str(meta.get("traceparent", "")))
            return message

        await self.app(scope, recording_receive, send)


@dataclass
class Running:
    """A test MCP server being served: its URL; ``stop()`` takes it down."""

    url: str
    web: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.web.should_exit = True
        self.thread.join(10)


@contextmanager
def served(server: MCPServer, seen: Seen) -> Iterator[Running]:
    """``server`` over streamable HTTP on a free 127.0.0.1 port, until the block ends."""
    app = _Recorder(server.streamable_http_app(stateless_http=True, json_response=True), seen)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    web = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=web.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not web.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test MCP server did not start")
        time.sleep(0.02)
    running = Running(f"http://127.0.0.1:{port}/mcp", web, thread)
    try:
        yield running
    finally:
        running.stop()
        sock.close()


def free_port_url() -> str:
    """A loopback URL nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/mcp"
