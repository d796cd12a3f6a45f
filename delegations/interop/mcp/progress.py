"""wait_for_run with MCP progress notifications: when the caller asks for progress (a
``progressToken`` in ``_meta``), the answer is a ``text/event-stream`` that sends one
``notifications/progress`` each time the run's state or usage changes, then the tool's own
result, which the tool computes once the wait is over (asked with no time left to wait).

The stream is an async iterator, so waiting holds no server thread (a sync one would be read
to its end before the first byte is sent); each look at the run is one short query in a
thread, as Django's async views do.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, StreamingHttpResponse
from django_mcpz.legacy import is_legacy_request

from delegations.accounts.roles import visible_runs
from delegations.interop.mcp.run_tools import POLL_S, WAIT_MAX_S
from delegations.interop.mcp.server import server
from delegations.models import Approval


def progress_token(params: dict[str, Any]) -> str | int | None:
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return token if isinstance(token, str | int) and not isinstance(token, bool) else None


def _sse(data: bytes | str) -> bytes:
    text = data.decode() if isinstance(data, bytes) else data
    return f"event: message\ndata: {text}\n\n".encode()


def _look(request: HttpRequest, run_id: str) -> tuple[str, bool] | None:
    """One line saying where the run is, and whether waiting is over (it ended or waits for a
    person); None when the caller may not see it (the tool then says so)."""
    run = visible_runs(request.user).filter(pk=run_id).first()
    if run is None:
        return None
    waits = not run.is_terminal and Approval.objects.pending().filter(run__in=run.tree()).exists()
    usage = run.usage or {}
    line = (f"{run.state}: {usage.get('model_calls', 0)} model calls, "
            f"{usage.get('input_tokens', 0) + usage.get('output_tokens', 0)} tokens")
    return line + (", waiting for a person" if waits else ""), run.is_terminal or waits


def _result(request: HttpRequest, request_id: str | int, params: dict[str, Any]) -> bytes:
    """The tool's answer, asked with no time left to wait (the stream has waited)."""
    arguments = {**params.get("arguments", {}), "timeout_s": 0}
    answer = server._tools_call(request, request_id, {**params, "arguments": arguments},
                                legacy=is_legacy_request(request))
    return bytes(answer.content)


def wait_with_progress(request: HttpRequest, request_id: str | int, params: dict[str, Any],
                       token: str | int) -> StreamingHttpResponse:
    arguments = params.get("arguments")
    arguments = arguments if isinstance(arguments, dict) else {}
    run_id = str(arguments.get("run_id", ""))
    try:
        wait_s = min(max(float(arguments.get("timeout_s", WAIT_MAX_S)), 0.0), WAIT_MAX_S)
    except (TypeError, ValueError):
        wait_s = 0.0   # the tool's own argument check answers

    async def events() -> AsyncIterator[bytes]:
        deadline, sent, last = time.monotonic() + wait_s, 0, ""
        while (seen := await sync_to_async(_look)(request, run_id)) is not None:
            line, over = seen
            if line != last:
                sent, last = sent + 1, line
                yield _sse(json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {
                    "progressToken": token, "progress": sent, "message": line}}))
            if over or time.monotonic() >= deadline:
                break
            await asyncio.sleep(POLL_S)
        yield _sse(await sync_to_async(_result)(request, request_id, params))

    return StreamingHttpResponse(events(), content_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})
