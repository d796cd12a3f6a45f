"""Each HTTP request's thread-sensitive work runs on a thread of its own, as Django asks,
but the threads are reused from one request to the next.

Django's ASGI handler gives every request a fresh ``ThreadSensitiveContext``: asgiref
then starts a thread for the request's first sync step (a sync middleware hook, a signal,
a sync view) and, when the request ends, starts another thread to join it. Two threads
started a request were a seventh of the embedded server's held-GIL samples at 32 clients
(py-spy, ``load_probe.py --clients 32``, 2026-12-05). Here the outermost context is
entered with an executor of one thread taken from a few kept idle; Django's own context
then finds it and adds none. A request still has its thread to itself, from its first
sync step to its end, and a thread still busy when its request ends (a sync call the
request stopped waiting for) is let go rather than kept.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext

IDLE_KEPT = 64   # threads kept for the next requests; more concurrent requests start more


class _RequestThread(ThreadPoolExecutor):
    """One thread that knows whether the last call it was given has ended (calls run in
    the order given, so then it is idle)."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="request")
        self.last: Future[Any] | None = None

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.last = super().submit(fn, *args, **kwargs)
        return self.last

    @property
    def idle(self) -> bool:
        return self.last is None or self.last.done()


def reused_request_threads(app: Any) -> Any:
    """``app`` (an ASGI app for HTTP) with its requests' threads reused."""
    idle: list[_RequestThread] = []

    async def serve(scope: dict[str, Any], receive: Any, send: Any) -> None:
        thread = idle.pop() if idle else _RequestThread()
        try:
            async with ThreadSensitiveContext(executor=thread):
                await app(scope, receive, send)
        finally:
            if thread.idle and len(idle) < IDLE_KEPT:
                idle.append(thread)
            else:
                thread.shutdown(wait=False)

    return serve
