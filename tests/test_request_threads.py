"""Requests' thread-sensitive work runs on threads reused from request to request, one
request on a thread at a time (handoff_site/request_threads.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from asgiref.sync import sync_to_async

from handoff_site.request_threads import reused_request_threads


def recording(threads: list[int], *, hold: asyncio.Event | None = None, first_busy_s: float = 0.0) -> Any:
    """An ASGI app whose request makes two sync steps and notes the thread of each; its
    very first step takes ``first_busy_s``."""
    busy = [first_busy_s]

    def step() -> int:
        if busy:
            time.sleep(busy.pop())
        return threading.get_ident()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        threads.append(await sync_to_async(step)())
        if hold is not None:
            await hold.wait()
        threads.append(await sync_to_async(step)())

    return app


async def test_a_request_keeps_one_thread_and_the_next_request_reuses_it() -> None:
    threads: list[int] = []
    serve = reused_request_threads(recording(threads))
    await serve({"type": "http"}, None, None)
    await serve({"type": "http"}, None, None)
    assert len(set(threads)) == 1, threads
    assert threads[0] != threading.get_ident()


async def test_requests_at_once_each_have_a_thread_of_their_own() -> None:
    threads: list[int] = []
    hold = asyncio.Event()
    serve = reused_request_threads(recording(threads, hold=hold))
    both = asyncio.gather(serve({"type": "http"}, None, None), serve({"type": "http"}, None, None))
    await asyncio.sleep(0.2)
    hold.set()
    await both
    first, second, third, fourth = threads
    assert first != second and {third, fourth} == {first, second}


async def test_a_thread_still_busy_when_its_request_ends_is_not_given_to_the_next() -> None:
    threads: list[int] = []
    serve = reused_request_threads(recording(threads, first_busy_s=1.0))
    abandoned = asyncio.ensure_future(serve({"type": "http"}, None, None))
    await asyncio.sleep(0.1)
    abandoned.cancel()   # the client went away while its sync step still runs
    await asyncio.gather(abandoned, return_exceptions=True)
    started = time.monotonic()
    await serve({"type": "http"}, None, None)
    assert time.monotonic() - started < 0.5   # not queued behind the abandoned step
    assert len(threads) == 2
