"""API authentication: `Authorization: Bearer <token>` or the browser session (with CSRF)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja.security import HttpBearer, SessionAuth

from .models import APIToken


class BearerTokenAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Any:
        api_token = APIToken.authenticate(token)
        if api_token is None:
            return None
        request.user = api_token.user
        return api_token.user


class BrowserSessionAuth(SessionAuth):
    """The logged-in browser session; unsafe methods need the CSRF token (hx-headers sends it)."""


api_auth = [BearerTokenAuth(), BrowserSessionAuth()]
