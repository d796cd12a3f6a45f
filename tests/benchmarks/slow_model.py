"""An OpenAI-compatible chat completions endpoint that answers every request after
SLOW_MODEL_LATENCY_MS (500) with a ``yield_control`` tool call: the load probe's stand-in
for a hosted model, served by uvicorn in a process of its own so that hundreds of requests
wait at once without a thread each.

    SLOW_MODEL_LATENCY_MS=500 .venv/bin/python -m uvicorn tests.benchmarks.slow_model:app --port 9000
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

LATENCY_S = int(os.environ.get("SLOW_MODEL_LATENCY_MS", "500")) / 1000
ARGUMENTS = json.dumps({"status": "SUCCESS", "output_payload": {"answer": 42}})


def completion() -> bytes:
    return json.dumps({
        "id": "chatcmpl-probe", "object": "chat.completion", "created": int(time.time()), "model": "probe",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [{
                "id": "call_probe", "type": "function",
                "function": {"name": "yield_control", "arguments": ARGUMENTS}}]}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}}).encode()


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:   # read the request body to its end
        message = await receive()
        more = message.get("more_body", False)
    await asyncio.sleep(LATENCY_S)
    body = completion()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
