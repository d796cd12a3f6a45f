"""One logical start, one run: a client retries a start whose answer it never got (a
timeout, a dropped connection), and an MCP tool body may run more than once for one call
(an elicitation round re-runs the tool), so a start is remembered by its key.

The key is the caller's own (MCP's ``idempotency_key``, the API's ``Idempotency-Key``
header; kept a day), or for MCP without one, derived from the caller, the tool and its
arguments (kept a minute: the same call a minute later is a new run). A key is the
caller's, whatever it starts with. Remembered in Django's cache
(``HANDOFF_RATE_LIMIT_CACHE``, as the token limits are): with several server processes,
point it at a shared cache or each process remembers its own.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.http import HttpRequest

from delegations.models import Run

GIVEN_KEY_S = 24 * 3600
DERIVED_KEY_S = 60
STARTING = "starting"      # held while the first call creates the run
STARTING_MAX_S = 15.0      # how long a repeated call waits for the first to finish
KEY_MAX_CHARS = 200


class KeyReused(Exception):
    """The caller's key started an earlier run with other arguments (a key reused by
    mistake, as Stripe's API answers it)."""


class StillStarting(Exception):
    """The first call with this key has not finished starting its run."""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _cache_key(request: HttpRequest, given: str, asked: str) -> str:
    """A given key is the caller's whatever the tool (start_run, run_skill.*); a derived one
    is the call itself."""
    material = f"key:{given}" if given else f"args:{asked}"
    return f"handoff:once:{_digest(f'{request.user.pk}:{material}')}"


def once(request: HttpRequest, tool: str, arguments: dict[str, Any], given_key: str,
         start: Callable[[], Run]) -> tuple[Run, bool]:
    """The run this call started, and whether an earlier call with the same key had started
    it (then ``start`` is not called). Raises KeyReused or StillStarting."""
    cache = caches[settings.HANDOFF_RATE_LIMIT_CACHE]
    given = given_key.strip()[:KEY_MAX_CHARS]
    asked = _digest(tool + ":" + json.dumps({k: v for k, v in arguments.items() if k != "idempotency_key"},
                                             sort_keys=True, default=str))
    key = _cache_key(request, given, asked)
    window = GIVEN_KEY_S if given else DERIVED_KEY_S
    if cache.add(key, (STARTING, asked), timeout=window):
        try:
            run = start()
        except BaseException:
            cache.delete(key)   # a refused start is no start: the same call may try again
            raise
        cache.set(key, (run.pk, asked), timeout=window)
        return run, False
    return _earlier_run(cache, key, asked, given), True


def _earlier_run(cache: Any, key: str, asked: str, given: str) -> Run:
    deadline = time.monotonic() + STARTING_MAX_S
    while (held := _held(cache, key))[0] == STARTING and time.monotonic() < deadline:
        time.sleep(0.05)
    run_id, arguments = held
    if arguments is not None and arguments != asked:
        raise KeyReused(given)
    run = Run.objects.filter(pk=run_id).first() if run_id not in (None, STARTING) else None
    if run is None:
        raise StillStarting(given)
    return run


def _held(cache: Any, key: str) -> tuple[str | None, str | None]:
    """The run id (or STARTING) a key holds and the digest of the arguments it was given
    with; (None, None) once it is gone."""
    held = cache.get(key)
    return (str(held[0]), str(held[1])) if isinstance(held, tuple | list) else (None, None)
