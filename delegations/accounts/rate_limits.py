"""Failed-attempt limits for logins and API tokens, counted in Django's cache.

A client (its address, for logins also the username tried, for API tokens the token's
prefix) that fails too often in a window is refused with 429 and ``Retry-After`` until the window ends. Only failures count,
so people who type their password right are never slowed; a success resets a login's
count. The cache is ``HANDOFF_RATE_LIMIT_CACHE``: with several server processes, point it
at a shared cache (Redis) or each process counts on its own.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import caches
from django.http import HttpRequest


class RateLimited(Exception):
    """Too many failed attempts; try again in ``retry_after`` seconds."""

    def __init__(self, what: str, retry_after: int) -> None:
        super().__init__(f"Too many failed {what}; try again in {retry_after} seconds.")
        self.message = str(self)
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class AttemptLimit:
    """At most ``max_failures`` failures per ``window_s`` seconds for each key."""

    scope: str
    max_failures: int
    window_s: int

    def _key(self, key: str) -> str:
        return f"handoff:rate:{self.scope}:{hashlib.sha256(key.encode()).hexdigest()}"

    def retry_after(self, *keys: str) -> int:
        """Seconds until each of ``keys`` may try again; 0 when all may."""
        cache = caches[settings.HANDOFF_RATE_LIMIT_CACHE]
        now = time.time()
        waits = [0]
        for key in keys:
            count, started = cache.get(self._key(key), (0, now))
            if count >= self.max_failures:
                waits.append(max(1, int(started + self.window_s - now + 0.999)))
        return max(waits)

    def check(self, *keys: str, what: str) -> None:
        if wait := self.retry_after(*keys):
            raise RateLimited(what, wait)

    def fail(self, *keys: str) -> None:
        """Count one failure for each key; the window starts at its first failure."""
        cache = caches[settings.HANDOFF_RATE_LIMIT_CACHE]
        now = time.time()
        for key in keys:
            count, started = cache.get(self._key(key), (0, now))
            remaining = started + self.window_s - now
            if remaining <= 0:
                count, started, remaining = 0, now, self.window_s
            cache.set(self._key(key), (count + 1, started), timeout=int(remaining) + 1)

    def reset(self, *keys: str) -> None:
        cache = caches[settings.HANDOFF_RATE_LIMIT_CACHE]
        cache.delete_many([self._key(key) for key in keys])


def login_limits() -> tuple[AttemptLimit, AttemptLimit]:
    """Per username tried, and per client address (one address may try many names)."""
    window = settings.HANDOFF_LOGIN_WINDOW_S
    return (AttemptLimit("login-user", settings.HANDOFF_LOGIN_MAX_FAILURES, window),
            AttemptLimit("login-address", settings.HANDOFF_LOGIN_MAX_FAILURES_PER_ADDRESS, window))


def token_limit() -> AttemptLimit:
    return AttemptLimit("token", settings.HANDOFF_TOKEN_MAX_FAILURES, settings.HANDOFF_TOKEN_WINDOW_S)


def client_address(request: HttpRequest) -> str:
    """The client's address: REMOTE_ADDR, which the server takes from X-Forwarded-For only
    when a proxy named in FORWARDED_ALLOW_IPS sent it (manage.py serve)."""
    return str(request.META.get("REMOTE_ADDR") or "unknown")
