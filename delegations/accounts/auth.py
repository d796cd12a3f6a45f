"""Who is asking. The API: `Authorization: Bearer <token>` or the browser session (with
CSRF). Websockets: the same token in the handshake, or else the browser session, read
once when the socket connects."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from channels.auth import AuthMiddleware
from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware
from channels.security.websocket import AllowedHostsOriginValidator
from channels.sessions import CookieMiddleware
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest
from ninja.security import HttpBearer, SessionAuth

from delegations.accounts.rate_limits import RateLimited, client_address, token_limit
from delegations.models import APIToken

# what REST, MCP and A2A answer (401) to a bearer token that is no token of theirs
WRONG_TOKEN = "This API token is wrong or was revoked; create a new one on your account page."


class BearerTokenAuth(HttpBearer):
    """An API token. Too many wrong ones from an address (HANDOFF_TOKEN_MAX_FAILURES per
    HANDOFF_TOKEN_WINDOW_S) get 429 for a while, even the right one, counted per token
    prefix (:meth:`APIToken.known_prefix`): the other tokens used there keep working."""

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        user = token_user(token, client_address(request))
        if user is not None:
            request.user = user
        return user


def bearer_token(authorization: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header's value, or None (another
    scheme, or no token)."""
    scheme, _, token = authorization.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def token_user(token: str, address: str) -> Any:
    """The user of API token ``token`` sent from ``address``, or None for a wrong one;
    raises RateLimited while that address is locked out for this token's prefix."""
    limit = token_limit()
    api_token = APIToken.authenticate(token)
    # a known token's prefix is its own: the query that tells whether a wrong token's
    # prefix belongs to some token is made for wrong tokens only (it was one more query
    # on every API call)
    prefix = api_token.prefix if api_token is not None else APIToken.known_prefix(token)
    attempts = f"address:{address}:prefix:{prefix}"
    limit.check(attempts, what="API token attempts")   # locked out: 429, even the right token
    if api_token is None:
        limit.fail(attempts)
        return None
    return api_token.user


class BrowserSessionAuth(SessionAuth):
    """The logged-in browser session; unsafe methods need the CSRF token (hx-headers sends it)."""


api_auth = [BearerTokenAuth(), BrowserSessionAuth()]


class ReadOnlySessionMiddleware(BaseMiddleware):
    """Puts the browser's session in the websocket scope, for AuthMiddleware to find its
    user. A socket never changes the session, so unlike channels' SessionMiddleware this
    does not wrap ``send`` to save it: that wrapper checked the session on every frame
    to every viewer, a quarter of what a live event cost the server to send."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.session_store = import_module(settings.SESSION_ENGINE).SessionStore

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        session_key = scope["cookies"].get(settings.SESSION_COOKIE_NAME)
        return await super().__call__({**scope, "session": self.session_store(session_key)}, receive, send)


class TokenOrSession:
    """``scope["user"]`` for a websocket: a program's API token in the handshake's
    `Authorization: Bearer` header, or else the browser session, whose socket must come
    from a page of this site (the Origin check against cross-site pages using its cookie).
    A page cannot set that header on a websocket, so a token's socket skips the check; a
    wrong, revoked or locked-out token leaves the socket anonymous (closed 4401), and counts
    against the address as on the API."""

    def __init__(self, inner: Any) -> None:
        self.with_token = inner
        self.with_session = AllowedHostsOriginValidator(
            CookieMiddleware(ReadOnlySessionMiddleware(AuthMiddleware(inner))))

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        authorization = dict(scope.get("headers", ())).get(b"authorization", b"")
        token = bearer_token(authorization.decode("latin-1"))
        if token is None:
            return await self.with_session(scope, receive, send)
        address = str((scope.get("client") or ("unknown",))[0])
        user = await database_sync_to_async(_socket_user)(token, address)
        return await self.with_token({**scope, "user": user or AnonymousUser()}, receive, send)


def _socket_user(token: str, address: str) -> Any:
    try:
        return token_user(token, address)
    except RateLimited:
        return None


def websocket_auth(inner: Any) -> Any:
    """The websocket's user in ``scope["user"]`` (AnonymousUser without one)."""
    return TokenOrSession(inner)
