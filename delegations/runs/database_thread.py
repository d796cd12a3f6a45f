"""The one thread that makes an execution's ORM calls (async code may not make them)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from django.db import DatabaseError, close_old_connections, connection

T = TypeVar("T")


class DatabaseCalls(Protocol):
    """Where async code sends its ORM calls: a :class:`DatabaseThread`, or an execution's
    calls to one behind its lease fence."""

    async def call(self, fn: Callable[..., T], *args: Any) -> T: ...


class DatabaseThread:
    """One thread that makes every ORM call of an execution (async code may not), on one
    connection kept for the execution: reopening it (SQLite reconnects and compiles its
    statements again) cost every stored batch. A call that fails on a database error
    closes it, so the next call starts on a fresh one."""

    def __init__(self, name: str = "handoff-db") -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, _reconnecting_on_error,
                                                                fn, *args)

    def close(self) -> None:
        def _close() -> None:
            close_old_connections()
            connection.close()
        with contextlib.suppress(Exception):
            self._executor.submit(_close).result(timeout=10)
        self._executor.shutdown(wait=True)


def _reconnecting_on_error[R](fn: Callable[..., R], *args: Any) -> R:
    try:
        return fn(*args)
    except DatabaseError:
        connection.close()
        raise
