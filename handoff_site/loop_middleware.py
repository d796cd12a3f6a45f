"""Django's own middleware whose hooks do no I/O, run on the event loop.

In an async middleware chain Django runs each hook of a synchronous middleware
(``MiddlewareMixin``'s ``process_request`` and ``process_response``) in the request's
thread and back again: with the stock list, fourteen thread hand-offs for one API call.
These four only read the request and write headers (the user is a lazy object until
something reads it), so their hooks run inline here. Sessions, CSRF, messages and the
login check may read or save the session in the database and keep their hand-offs."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import middleware as auth
from django.http import HttpRequest
from django.middleware import clickjacking, common, security


class OnTheLoop:
    """Runs a ``MiddlewareMixin``'s hooks inline in an async chain (see the module docstring)."""

    get_response: Any

    async def __acall__(self, request: HttpRequest) -> Any:
        response = self.process_request(request) if hasattr(self, "process_request") else None
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            response = self.process_response(request, response)
        return response


class SecurityMiddleware(OnTheLoop, security.SecurityMiddleware):
    pass


class CommonMiddleware(OnTheLoop, common.CommonMiddleware):
    pass


class AuthenticationMiddleware(OnTheLoop, auth.AuthenticationMiddleware):
    pass


class XFrameOptionsMiddleware(OnTheLoop, clickjacking.XFrameOptionsMiddleware):
    pass
