"""wait_for_run's wait, off the server's threads: the answer is an async stream that waits
on the run's live feed (``live.notices``, as ``GET /api/runs/{id}?wait=`` and A2A do) and
then sends the tool's own result, which the tool computes once the wait is over (asked
with no time left to wait). A sync tool that slept between looks held a server thread for
up to WAIT_MAX_S per waiting client.

When the caller asks for progress (a ``progressToken`` in ``_meta``) the stream is
``text/event-stream`` and sends one ``notifications/progress`` each time the run's state or
usage changes, then the result; otherwise it is the result alone, as JSON. Each look at the
run is one short query in a thread, whose connection is closed after it.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, StreamingHttpResponse
from django_mcpz.legacy import is_legacy_request

from delegations.accounts.roles import visible_runs
from delegations.interop.mcp.run_tools import WAIT_MAX_S
from delegations.interop.mcp.server import server
from delegations.live.notices import FALLBACK_S, release_connection, run_notices
from delegations.models import Approval
from delegations.protocol.approvals import ApprovalKind


def progress_token(params: dict[str, Any]) -> str | int | None:
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return token if isinstance(token, str | int) and not isinstance(token, bool) else None


def _sse(data: bytes | str) -> bytes:
    text = data.decode() if isinstance(data, bytes) else data
    return f"event: message\ndata: {text}\n\n".encode()


def _look(request: HttpRequest, run_id: str) -> tuple[str, bool, bool] | None:
    """One line saying where the run is; whether waiting is over (it ended or waits for a
    person); and whether what it waits for is only a person's decision (no question the
    client could answer). None when the caller may not see it (the tool then says so)."""
    try:
        run = visible_runs(request.user).filter(pk=run_id).first()
        if run is None:
            return None
        kinds = set() if run.is_terminal else set(
            Approval.objects.pending().filter(run__in=run.tree()).values_list("kind", flat=True))
        usage = run.usage or {}
        line = (f"{run.state}: {usage.get('model_calls', 0)} model calls, "
                f"{usage.get('input_tokens', 0) + usage.get('output_tokens', 0)} tokens")
        deciding = bool(kinds) and ApprovalKind.CLARIFICATION not in kinds
        return line + (", waiting for a person" if kinds else ""), run.is_terminal or bool(kinds), deciding
    finally:
        release_connection()


def _result(request: HttpRequest, request_id: str | int, params: dict[str, Any]) -> bytes:
    """The tool's answer once the stream has waited (the tool itself does not wait)."""
    answer = server._tools_call(request, request_id, params, legacy=is_legacy_request(request))
    return bytes(answer.content)


def wait_seconds(params: dict[str, Any]) -> float:
    """How long a wait_for_run call asks to wait, capped at WAIT_MAX_S (0 when its argument
    is not a number: the tool's own argument check answers)."""
    arguments = params.get("arguments")
    try:
        asked = float(arguments.get("timeout_s", WAIT_MAX_S)) if isinstance(arguments, dict) else 0.0
    except (TypeError, ValueError):
        return 0.0
    return min(max(asked, 0.0), WAIT_MAX_S) if asked == asked else 0.0   # NaN waits not at all


def wait_then_answer(request: HttpRequest, request_id: str | int, params: dict[str, Any],
                     token: str | int | None) -> StreamingHttpResponse:
    arguments = params.get("arguments")
    run_id = str(arguments.get("run_id", "")) if isinstance(arguments, dict) else ""
    wait_s = wait_seconds(params)

    async def events() -> AsyncIterator[bytes]:
        deadline, sent, last = time.monotonic() + wait_s, 0, ""
        deciding_since_start: bool | None = None
        async with run_notices(run_id) as notices:
            while (seen := await sync_to_async(_look)(request, run_id)) is not None:
                line, over, deciding = seen
                # a run already waiting for a person's decision when the wait began: the wait
                # is for that decision (answering at once, a client's loop asked ~80 times a second)
                deciding_since_start = deciding and deciding_since_start is not False
                if deciding_since_start:
                    over = False
                if token is not None and line != last:
                    sent, last = sent + 1, line
                    yield _sse(json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {
                        "progressToken": token, "progress": sent, "message": line}}))
                left = deadline - time.monotonic()
                if over or left <= 0:
                    break
                await notices.wait(min(FALLBACK_S, left))
        answer = await sync_to_async(_result)(request, request_id, params)
        yield _sse(answer) if token is not None else answer

    return StreamingHttpResponse(events(), content_type="text/event-stream" if token is not None else "application/json",
                                 headers={"Cache-Control": "no-cache"})
