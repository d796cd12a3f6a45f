"""MCP tools for runs: the tools of configured MCP servers, offered and called like the
runner's own.

The host hands the runner an :class:`McpTools` built from the servers an operator
configured (:class:`McpServerConfig`: a streamable-HTTP URL or an allowlisted stdio
command, the *name* of the environment variable holding its secret, the tools it may
offer and the capability each needs). At run start :meth:`McpTools.refresh` lists each
server's tools (a listing, or its failure, is reused for :data:`LISTING_CACHE_S`, so a
tree's runs and the next runs do not ask again); a run is then offered the allowlisted
ones whose capability its token covers, as :class:`~delegations.protocol.tools.RuntimeTool`
entries named ``mcp__<server>__<tool>``, which cannot collide with a built-in tool. The
runner checks the token, the approval gate and the effect guard for them as for any
tool call.

Every failure of a server (unreachable, an answer that is not MCP, no answer within the
server's timeout, an answer over the size limit, a tool that reports an error) is a
ProtocolError ERR_TOOL_FAILURE naming the server and the tool, so the run's model reads
why and goes on. The secret is read from the environment at call time and sent as a
Bearer header (to a stdio server: as its environment variable); it is scrubbed from
everything that comes back, and never stored. The ``mcp`` SDK (about 4 s to import on a
busy 2-core machine) is imported once, in a thread, when a host first lists tools: a
host with no MCP servers never loads it.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ErrorCode, ProtocolError
from .redaction import Redactor
from .tools import RuntimeTool, ToolContext
from .trace_context import outgoing_headers

if TYPE_CHECKING:
    from mcp import Client

MCP_PREFIX = "mcp__"
# An MCP server's secret lives in a variable of this prefix: the operator decides which
# variables hold MCP secrets and a server record only picks one (it can never have a model
# provider's key or the signing key sent to its URL); the host redacts all of them.
SECRET_ENV_PREFIX = "HANDOFF_MCP_SECRET_"
LISTING_CACHE_S = 30.0           # how long a server's tool list (or its failure) is reused
LISTING_MAX_BYTES = 4_000_000    # a tool list may be large (a hundred tools with schemas)
DESCRIPTION_MAX_CHARS = 1000


def mcp_tool_name(server: str, tool: str) -> str:
    """The name a run's model calls ``tool`` of ``server`` by."""
    return f"{MCP_PREFIX}{server}__{tool}"


def is_mcp_tool(name: str) -> bool:
    return name.startswith(MCP_PREFIX)


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """One MCP server as its operator configured it. ``tools`` pairs each allowlisted tool
    with the capability a run needs to be offered it; ``command`` is an argv the operator
    allowlisted (a stdio server), else ``url`` is a streamable-HTTP endpoint."""

    name: str
    tools: tuple[tuple[str, str], ...]
    url: str = ""
    command: tuple[str, ...] = ()
    secret_env: str = ""
    timeout_s: float = 30.0

    @property
    def where(self) -> str:
        return self.url or f"stdio command {self.command[0]!r}"


@dataclass(frozen=True, slots=True)
class _Listing:
    """What a server listed of its allowlisted tools (name, description, input schema),
    or why its tools are not offered, and until when that is reused."""

    expires_at: float
    tools: tuple[tuple[str, str, dict[str, Any]], ...] = ()
    problem: str = ""
    # how the listing's client connected (the protocol version and the server's discover
    # answer, None for a server from before 2026-07-28): a call adopts it instead of
    # asking again: one round trip fewer per tool call (median call on loopback on a busy
    # 2-core machine about 220 -> 165 ms)
    connected: tuple[str, Any] | None = None


_listings: dict[McpServerConfig, _Listing] = {}


def forget_listings() -> None:
    """Drop every cached listing: the next run start asks each server again (a server
    restarted on the same URL with other tools, or a test's server on a reused port)."""
    _listings.clear()


class McpTools:
    """The tools of a host's MCP servers for the runs it executes."""

    def __init__(self, servers: Sequence[McpServerConfig], *, result_max_bytes: int,
                 environ: Mapping[str, str] | None = None) -> None:
        self.servers = {server.name: server for server in servers}
        self.result_max_bytes = result_max_bytes
        self.environ = environ if environ is not None else os.environ
        self._tools: dict[str, RuntimeTool] = {}
        self._problems: dict[str, str] = {}       # server name -> why (some of) its tools are missing

    async def refresh(self) -> list[str]:
        """List every server's tools (or reuse a recent listing); returns one line per
        server whose tools are not all offered, for the run's log."""
        if "mcp" not in sys.modules:
            await asyncio.to_thread(importlib.import_module, "mcp")   # seconds: off the event loop
        listings = await asyncio.gather(*(self._listing(server) for server in self.servers.values()))
        self._tools, self._problems = {}, {}
        for server, listing in zip(self.servers.values(), listings, strict=True):
            capability = dict(server.tools)
            for tool, description, schema in listing.tools:
                offered = self._offered(server, tool, capability[tool], description, schema)
                self._tools[offered.name] = offered
            if listing.problem:
                self._problems[server.name] = listing.problem
        return [f"MCP server '{name}': {problem}." for name, problem in self._problems.items()]

    def schemas(self, capabilities: Iterable[str]) -> list[dict[str, Any]]:
        """The schemas of the listed tools whose capability is in ``capabilities``."""
        granted = frozenset(capabilities)
        return [tool.schema for tool in self._tools.values() if tool.capability in granted]

    def names(self, capability: str) -> list[str]:
        return [tool.name for tool in self._tools.values() if tool.capability == capability]

    def get(self, name: str) -> RuntimeTool | None:
        """The tool a model called by ``name``; None when no server offers such a name, and
        ERR_TOOL_FAILURE when its server is configured but did not list it."""
        tool = self._tools.get(name)
        if tool is not None or not is_mcp_tool(name):
            return tool
        server_name, _, tool_name = name.removeprefix(MCP_PREFIX).partition("__")
        problem = self._problems.get(server_name)
        if problem is not None and tool_name in dict(self.servers[server_name].tools):
            raise _failure(server_name, tool_name, f"at run start, {problem}")
        return None

    async def _listing(self, server: McpServerConfig) -> _Listing:
        listing = _listings.get(server)
        now = time.monotonic()
        if listing is None or listing.expires_at <= now:
            listing = await self._list(server, now + LISTING_CACHE_S)
            _listings[server] = listing
        return listing

    async def _list(self, server: McpServerConfig, expires_at: float) -> _Listing:
        try:
            async with self._client(server, LISTING_MAX_BYTES) as client:
                listed = await client.list_tools()
                discovered = client.session.discover_result
                connected = (client.protocol_version, discovered) if discovered is not None else None
        except Exception as exc:
            return _Listing(expires_at, problem=f"its tools could not be listed ({self._reason(server, exc)}), "
                                                f"so none is offered")
        allowed = dict(server.tools)
        tools = tuple((tool.name, tool.description or "", dict(tool.input_schema))
                      for tool in listed.tools if tool.name in allowed)
        missing = sorted(set(allowed) - {name for name, _, _ in tools})
        problem = f"it lists no tool {', '.join(missing)}, so that is not offered" if missing else ""
        return _Listing(expires_at, tools=tools, problem=problem, connected=connected)

    def _offered(self, server: McpServerConfig, tool: str, capability: str, description: str,
                 input_schema: dict[str, Any]) -> RuntimeTool:
        name = mcp_tool_name(server.name, tool)
        scrub = self._redactor(server)   # what a server says goes into prompts and events
        schema = {"name": name,
                  "description": scrub.text(f"{description.strip()[:DESCRIPTION_MAX_CHARS]} (tool "
                                            f"'{tool}' of the MCP server '{server.name}')".strip()),
                  "parameters": scrub.value({**input_schema, "type": "object"})}

        async def call(_context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
            return await self._call(server, tool, arguments)

        return RuntimeTool(name, capability, schema, call)

    async def _call(self, server: McpServerConfig, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            listing = _listings.get(server)
            connected = listing.connected if listing is not None else None
            async with self._client(server, self.result_max_bytes, connected) as client:
                # MCP carries W3C trace context in the request's _meta
                traced = outgoing_headers()
                result = await client.call_tool(tool, arguments, meta=traced or None)  # type: ignore[arg-type]
        except Exception as exc:
            raise _failure(server.name, tool, self._reason(server, exc)) from None
        scrub = self._redactor(server)
        content = scrub.value([_content_part(part) for part in result.content])
        if result.is_error:
            said = " ".join(part.get("text", "") for part in content)[:500] or "no message"
            raise _failure(server.name, tool, f"the tool reported an error: {said}")
        answer: dict[str, Any] = {"server": server.name, "tool": tool, "content": content}
        if result.structured_content is not None:
            answer["structured"] = scrub.value(result.structured_content)
        return answer

    @asynccontextmanager
    async def _client(self, server: McpServerConfig, max_bytes: int,
                      connected: tuple[str, Any] | None = None) -> AsyncIterator[Client]:
        """A connected client of ``server`` whose every answer is at most ``max_bytes`` and
        comes within the server's timeout (one asyncio timeout around the whole exchange:
        the SDK's read timeout does not stop a server that trickles); ``connected`` is how
        an earlier client connected, adopted without asking the server again."""
        from mcp import Client

        secret = self._secret(server)
        mode: dict[str, Any] = ({"mode": connected[0], "prior_discover": connected[1]}
                                if connected is not None else {})
        async with asyncio.timeout(server.timeout_s):
            if server.command:
                from mcp.client.stdio import StdioServerParameters

                params = StdioServerParameters(command=server.command[0], args=list(server.command[1:]),
                                               env={server.secret_env: secret} if secret else None)
                async with Client(params, **mode) as client:
                    yield client
                return
            from mcp.client.streamable_http import streamable_http_client

            from . import mcp_transport

            async with (mcp_transport.client(secret=secret, timeout_s=server.timeout_s,
                                             max_bytes=max_bytes) as http,
                        Client(streamable_http_client(server.url, http_client=http,
                                                     max_sse_event_size=max_bytes), **mode) as client):
                yield client

    def _secret(self, server: McpServerConfig) -> str:
        if not server.secret_env:
            return ""
        secret = self.environ.get(server.secret_env, "")
        if not secret:
            raise ProtocolError(ErrorCode.TOOL_FAILURE,
                                f"its secret is read from {server.secret_env}, which is not set on "
                                f"this server")
        return secret

    def _redactor(self, server: McpServerConfig) -> Redactor:
        return Redactor([self.environ.get(server.secret_env, "")] if server.secret_env else [])

    def _reason(self, server: McpServerConfig, exc: BaseException) -> str:
        """Why asking ``server`` failed, in a line, with its secret scrubbed (a server may
        echo a header back in an error)."""
        leaf = _leaf(exc)
        if isinstance(leaf, TimeoutError):
            text = f"no answer within {server.timeout_s:g} s"
        elif isinstance(leaf, ProtocolError):
            text = leaf.message
        else:
            text = f"{type(leaf).__name__}: {str(leaf)[:300] or 'no detail'}"
        return self._redactor(server).text(f"{server.where}: {text}")


def _failure(server: str, tool: str, reason: str) -> ProtocolError:
    return ProtocolError(ErrorCode.TOOL_FAILURE,
                         f"MCP tool '{tool}' of server '{server}' failed: {reason}.",
                         details={"mcp_server": server, "mcp_tool": tool})


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside the SDK's task-group exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _content_part(part: Any) -> dict[str, Any]:
    """A result's content part as the run records it: text as it is, binary parts
    described (their bytes are no use to a model reading JSON)."""
    kind = getattr(part, "type", "unknown")
    if kind == "text":
        return {"type": "text", "text": part.text}
    if kind in ("image", "audio"):
        return {"type": kind, "mime_type": part.mime_type, "note": "binary content, not shown"}
    if kind == "resource_link":
        return {"type": kind, "uri": str(part.uri), "name": part.name}
    if kind == "resource":
        text = getattr(part.resource, "text", None)
        return {"type": kind, "uri": str(part.resource.uri),
                **({"text": text} if text is not None else {"note": "binary content, not shown"})}
    return {"type": str(kind)}
