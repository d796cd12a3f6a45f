"""Django's session, common, authentication and messages middleware, with their hooks run
on the event loop when they do no I/O.

In an async request Django's ``MiddlewareMixin`` hands every ``process_request`` and
``process_response`` to the request's thread and waits for it back, even where the hook
only sets an attribute or a header. Those hand-offs were 9.4 % of the embedded server's
held-GIL samples at 32 clients on the loop's side alone, 5.7 % with these four on the loop
(py-spy, ``load_probe.py --clients 32``, 2026-12-05). These subclasses call the hooks directly, and still hand one to the thread
when it may touch the database: a session to save, messages to store. Django's checks
accept subclasses of these four; the security, CSRF and clickjacking middleware stay
Django's own, because the deploy checks look for them by their paths.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import middleware as auth
from django.contrib.messages import middleware as messages
from django.contrib.sessions import middleware as sessions
from django.http import HttpRequest, HttpResponseBase
from django.middleware import common


class _OnTheLoop:
    """Mixed in before a ``MiddlewareMixin`` class whose ``process_request`` does no I/O."""

    get_response: Any

    def response_needs_thread(self, request: HttpRequest) -> bool:
        """Whether ``process_response`` may touch the database for this request."""
        return False

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.process_request(request) if hasattr(self, "process_request") else None
        response = response or await self.get_response(request)
        if not hasattr(self, "process_response"):
            return response
        if self.response_needs_thread(request):
            return await sync_to_async(self.process_response, thread_sensitive=True)(request, response)
        return self.process_response(request, response)


class SessionMiddleware(_OnTheLoop, sessions.SessionMiddleware):
    """The session is read lazily, by whoever uses it; it is saved in the thread."""

    def response_needs_thread(self, request: HttpRequest) -> bool:
        session = getattr(request, "session", None)
        return session is not None and session.accessed and (
            session.modified or settings.SESSION_SAVE_EVERY_REQUEST)


class CommonMiddleware(_OnTheLoop, common.CommonMiddleware):
    """Host and slash checks, and the response's length: no I/O."""


class AuthenticationMiddleware(_OnTheLoop, auth.AuthenticationMiddleware):
    """Sets the lazy ``request.user`` and ``request.auser``: no I/O."""


class MessageMiddleware(_OnTheLoop, messages.MessageMiddleware):
    """Messages are read lazily; stored in the thread when a view read or added some (the
    fallback storage may write them to the session)."""

    def response_needs_thread(self, request: HttpRequest) -> bool:
        storage = getattr(request, "_messages", None)
        return storage is not None and (storage.used or storage.added_new)
