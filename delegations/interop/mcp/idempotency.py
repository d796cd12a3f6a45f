"""One logical start, one run: an MCP tool body may run more than once for one call (clients
retry; an elicitation round re-runs the tool), so a start is remembered by its key.

The key is the caller's ``idempotency_key`` (kept a day), or else derived from the caller,
the tool and its arguments (kept a minute: the same call a minute later is a new run).
Remembered in Django's cache (``HANDOFF_RATE_LIMIT_CACHE``, as the token limits are): with
several server processes, point it at a shared cache or each process remembers its own.
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
from django_mcpz.server import ToolError

from delegations.models import Run

GIVEN_KEY_S = 24 * 3600
DERIVED_KEY_S = 60
STARTING = "starting"      # held while the first call creates the run
STARTING_MAX_S = 15.0      # how long a repeated call waits for the first to finish


def _cache_key(request: HttpRequest, tool: str, arguments: dict[str, Any], given: str) -> str:
    if given:
        material = f"key:{given}"
    else:
        material = "args:" + json.dumps({k: v for k, v in arguments.items() if k != "idempotency_key"},
                                        sort_keys=True, default=str)
    digest = hashlib.sha256(f"{request.user.pk}:{tool}:{material}".encode()).hexdigest()
    return f"handoff:mcp:once:{digest}"


def once(request: HttpRequest, tool: str, arguments: dict[str, Any], given_key: str,
         start: Callable[[], Run]) -> tuple[Run, bool]:
    """The run this call started, and whether an earlier call with the same key had started
    it (then ``start`` is not called)."""
    cache = caches[settings.HANDOFF_RATE_LIMIT_CACHE]
    key = _cache_key(request, tool, arguments, given_key.strip()[:200])
    window = GIVEN_KEY_S if given_key.strip() else DERIVED_KEY_S
    if cache.add(key, STARTING, timeout=window):
        try:
            run = start()
        except BaseException:
            cache.delete(key)   # a refused start is no start: the same call may try again
            raise
        cache.set(key, run.pk, timeout=window)
        return run, False
    return _earlier_run(cache, key), True


def _earlier_run(cache: Any, key: str) -> Run:
    deadline = time.monotonic() + STARTING_MAX_S
    while (run_id := cache.get(key)) == STARTING and time.monotonic() < deadline:
        time.sleep(0.05)
    run = Run.objects.filter(pk=run_id).first() if isinstance(run_id, str) and run_id != STARTING else None
    if run is None:
        raise ToolError("The same start is still being handled by an earlier call; read_run "
                        "or call start_run again in a few seconds.")
    return run
