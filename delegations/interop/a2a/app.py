"""The A2A routes (the SDK's Starlette routes over :class:`HandoffRequestHandler`) and the
gate in front of them.

Starlette routes skip Django's middleware, so the gate applies the same rules itself:
allowed hosts, the HTTPS redirect and HSTS, Handoff API tokens (looked up off the event
loop, counted against the same failed-token limit as the REST API), and one audit line per
request. The agent card is public; everything else needs a token.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from contextvars import ContextVar
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.routes import (
    DefaultServerCallContextBuilder,
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.types.a2a_pb2 import AgentCard, TaskState
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, PROTOCOL_VERSION_1_0, VERSION_HEADER
from asgiref.sync import sync_to_async
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from starlette.applications import Starlette
from starlette.requests import Request

from delegations.accounts.auth import WRONG_TOKEN, bearer_token, token_user
from delegations.accounts.rate_limits import RateLimited
from delegations.protocol import text_limits
from delegations.request_bodies import too_large

from .card import JSONRPC_PATH, REST_PATH, agent_card, card_frame
from .handler import HandoffRequestHandler

Scope = MutableMapping[str, Any]
ASGIApp = Callable[..., Awaitable[None]]

audit = logging.getLogger("handoff.a2a")

PREFIX = "/a2a/"
# 1.0's path, 0.3's name, and the same card under the JSON-RPC URL, where clients handed
# only that URL (the A2A test kit among them) look for it; the card is public everywhere
CARD_PATHS = (AGENT_CARD_WELL_KNOWN_PATH, "/.well-known/agent.json",
              f"{JSONRPC_PATH}{AGENT_CARD_WELL_KNOWN_PATH}")


def serves(path: str) -> bool:
    """Whether ``path`` is an A2A route (else it is Django's)."""
    return path.startswith(PREFIX) or path in CARD_PATHS


class HandoffContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's context with the Django user the gate found and the site's URL. A request
    without ``A2A-Version`` is read as 1.0: the spec would read it as 0.3, but 0.3's methods
    have names of their own (``message/send``), which the SDK's 0.3 adapter answers by name
    whatever the header says, so only a 1.0 method reaches this without it (the A2A test
    kit sends none). A version stated and unsupported is still refused."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state["headers"].setdefault(VERSION_HEADER.lower(), PROTOCOL_VERSION_1_0)
        context.state["django_user"] = request.scope["handoff_user"]
        context.state["base_url"] = request.scope["handoff_base_url"]
        return context


def _routes() -> list[Any]:
    handler, builder = HandoffRequestHandler(), HandoffContextBuilder()

    async def current_card(_: AgentCard) -> AgentCard:
        return await sync_to_async(agent_card)(_base_url.get(settings.HANDOFF_BASE_URL))

    frame = card_frame(settings.HANDOFF_BASE_URL)
    cards = [route for path in CARD_PATHS
             for route in create_agent_card_routes(frame, card_modifier=current_card, card_url=path)]
    return [*cards,
            *create_jsonrpc_routes(handler, JSONRPC_PATH, context_builder=builder,
                                   enable_v0_3_compat=True),
            *create_rest_routes(handler, context_builder=builder, path_prefix=REST_PATH)]


# -- the gate ---------------------------------------------------------------------------------

# the URL the caller reached the site at, for the card the SDK's route builds
_base_url: ContextVar[str] = ContextVar("a2a_base_url")


def _headers(scope: Scope) -> dict[str, str]:
    return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}


def _is_secure(scope: Scope, headers: dict[str, str]) -> bool:
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        header = proxy[0].removeprefix("HTTP_").replace("_", "-").lower()
        if headers.get(header, "").split(",")[0].strip() == proxy[1]:
            return True
    return scope.get("scheme") == "https"


async def _answer(send: Any, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"),
        *[(name.encode(), value.encode()) for name, value in (headers or {}).items()]]})
    await send({"type": "http.response.body", "body": body})


async def _buffered(receive: Any) -> tuple[bytes | None, Any]:
    """The request's whole body (None past ``DATA_UPLOAD_MAX_MEMORY_SIZE``, the limit the
    REST API and MCP keep: the rest is not read), and a ``receive`` that hands it to the
    routes again once, then passes on what follows (a stream listens there for the caller
    going away)."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            return None, receive
        chunks.append(chunk)
        more = message.get("more_body", False)
    body, replayed = b"".join(chunks), False

    async def replay() -> dict[str, Any]:
        nonlocal replayed
        if replayed:
            return dict(await receive())
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return body, replay


PARSE_ERROR, INVALID_PARAMS = -32700, -32602   # JSON-RPC's codes


def _refused_request(body: bytes) -> tuple[Any, int, str] | None:
    """A request answered here, before the SDK: its id, JSON-RPC error code and what to fix.

    - a body that is not UTF-8, or JSON nested past what Python's parser reads: the SDK
      answers them as an internal error (-32603; 500 on HTTP+JSON), though the request is
      at fault;
    - a ListTasks ``status`` that names no task state: the SDK's parser reads an unknown enum
      name as unspecified (it ignores unknown fields for forward compatibility, which
      protobuf extends to enum names), so the request would list every task instead of
      saying the filter is wrong."""
    try:
        request = text_limits.parse(body.decode("utf-8"))   # as the SDK reads it (json alone takes UTF-16)
    except UnicodeDecodeError as exc:
        return None, PARSE_ERROR, f"The request body is not UTF-8 text (byte {exc.start}); send JSON as UTF-8."
    except text_limits.NestedTooDeeply as exc:   # which the SDK's parser would raise as well
        return None, PARSE_ERROR, f"The request is not valid JSON: {exc}."
    except ValueError:
        return None   # the SDK answers a body that is not JSON with its parse error
    if not isinstance(request, dict) or request.get("method") != "ListTasks":
        return None
    params = request.get("params")
    status = params.get("status") if isinstance(params, dict) else None
    if not isinstance(status, str) or status in TaskState.keys():  # noqa: SIM118 (an enum wrapper, not a dict)
        return None
    return request.get("id"), INVALID_PARAMS, (f"Unknown status {status!r}; use one of "
                                               f"{', '.join(TaskState.keys()[1:])}.")


async def _answer_rpc(send: Any, request_id: Any, code: int, message: str) -> None:
    """A JSON-RPC error answer, as the SDK's JSON-RPC transport gives it."""
    body = json.dumps({"jsonrpc": "2.0", "id": request_id,
                       "error": {"code": code, "message": message}}).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


class A2AGate:
    """Django's host, HTTPS and token rules in front of the SDK's routes."""

    def __init__(self, inner: ASGIApp) -> None:
        self.inner = inner

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        headers = _headers(scope)
        host = headers.get("host", "")
        domain, _ = split_domain_port(host)
        if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
            await _answer(send, 400, f"Invalid Host header {host!r}; it is not in ALLOWED_HOSTS.")
            return
        secure = _is_secure(scope, headers)
        if getattr(settings, "SECURE_SSL_REDIRECT", False) and not secure:
            query = f"?{scope['query_string'].decode()}" if scope.get("query_string") else ""
            await _answer(send, 301, "Use HTTPS.", {"location": f"https://{host}{scope['path']}{query}"})
            return
        base_url = f"{'https' if secure else 'http'}://{host}"
        scope = {**scope, "handoff_base_url": base_url, "handoff_user": None}
        if scope["path"] not in CARD_PATHS:
            user = await self._user(scope, headers, send)
            if user is None:
                return
            scope["handoff_user"] = user
            audit.info("a2a %s %s by %s", scope["method"], scope["path"], user.get_username())
        if scope["method"] in ("POST", "PUT", "PATCH"):
            body, receive = await _buffered(receive)
            if body is None:
                await _answer(send, 413, too_large())
                return
            refusal = _refused_request(body)
            if refusal is not None and scope["path"] == JSONRPC_PATH:
                await _answer_rpc(send, *refusal)
                return
            if refusal is not None and refusal[1] == PARSE_ERROR:   # HTTP+JSON: the SDK answered 500
                await _answer(send, 400, refusal[2])
                return
        _base_url.set(base_url)
        await self.inner(scope, receive, self._with_security_headers(send, secure))

    async def _user(self, scope: Scope, headers: dict[str, str], send: Any) -> Any:
        token = bearer_token(headers.get("authorization", ""))
        if token is None:
            await _answer(send, 401, "Send a Handoff API token: 'Authorization: Bearer <token>' "
                                     "(create one on your account page).", {"www-authenticate": "Bearer"})
            return None
        address = (scope.get("client") or ("unknown",))[0]
        try:
            user = await sync_to_async(token_user)(token, address)
        except RateLimited as exc:
            await _answer(send, 429, exc.message, {"retry-after": str(exc.retry_after)})
            return None
        if user is None:
            await _answer(send, 401, WRONG_TOKEN, {"www-authenticate": 'Bearer error="invalid_token"'})
        return user

    def _with_security_headers(self, send: Any, secure: bool) -> Any:
        extra = [(b"x-content-type-options", b"nosniff")]
        hsts = getattr(settings, "SECURE_HSTS_SECONDS", 0)
        if secure and hsts:
            value = f"max-age={hsts}"
            if getattr(settings, "SECURE_HSTS_INCLUDE_SUBDOMAINS", False):
                value += "; includeSubDomains"
            if getattr(settings, "SECURE_HSTS_PRELOAD", False):
                value += "; preload"
            extra.append((b"strict-transport-security", value.encode()))

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        return sending


def beside(django_app: ASGIApp) -> ASGIApp:
    """``django_app`` with the A2A routes (behind the gate) in front of it."""
    a2a = A2AGate(Starlette(routes=_routes()))

    async def route(scope: Scope, receive: Any, send: Any) -> None:
        await (a2a if serves(scope["path"]) else django_app)(scope, receive, send)

    return route
