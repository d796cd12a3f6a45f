"""Django's SQLite backend, with its connections kept for the next thread that needs one.

Under ASGI each request runs its synchronous code in a thread of its own, so it opened a
new SQLite connection: a file opened, Django's SQL functions registered, the PRAGMAs run
and the schema parsed again. Under the load probe (tests/benchmarks/load_probe.py, 8
clients) that was 14 % of the server's CPU, and closing them another 4 %. Here a closed
connection goes back to a small pool instead, and the next connection of the same database
file is taken from it. PostgreSQL has its own pool in Django ("pool" in OPTIONS); SQLite
has none.

A pooled connection is never in a transaction (one left open is rolled back) and is used
by one thread at a time (the pool hands it out once). It belongs to one file: a database
file replaced under the same name (a test database created again) gets fresh connections.

With several server processes on the file (``serve --processes N``), a write transaction
first takes an ``flock`` on a lock file beside the database, so writers queue in the
kernel and the next one starts the moment the last commits. Without it they met on
SQLite's write lock and waited in its busy handler, which sleeps (1, 2, 5 ... 100 ms)
whether or not the lock came free meanwhile: with 2 processes and 32 clients, p95 1,321 /
1,491 ms and 43.4 / 50.8 runs/s without, 887 / 897 ms and 55.3 / 52.9 runs/s with
(load_probe.py, 2026-12-05). One process gains nothing from it (measured before with a
lock in the process), so it is taken only with siblings.
"""

from __future__ import annotations

import fcntl
import os
import threading
from typing import Any

from django.conf import settings
from django.db.backends.sqlite3 import base

# idle connections kept per database file: more than the threads that use one at once
POOL_SIZE = 16

_idle: dict[tuple[str, int], list[Any]] = {}
_lock = threading.Lock()


def _file_key(name: str) -> tuple[str, int] | None:
    """The database file and its inode, or None for an in-memory database (never pooled:
    Django keeps that connection open) or a file not created yet."""
    if not name or name == ":memory:" or name.startswith("file:"):
        return None
    try:
        return name, os.stat(name).st_ino
    except OSError:
        return None


class DatabaseWrapper(base.DatabaseWrapper):
    _pool_key: tuple[str, int] | None = None   # the file of the connection held now
    _writer_lock: int | None = None            # this connection's descriptor of the lock file
    _writing = False

    def _start_transaction_under_autocommit(self) -> None:
        if settings.HANDOFF_SIBLINGS_HUB and self._pool_key is not None:
            if self._writer_lock is None:
                self._writer_lock = os.open(f"{self._pool_key[0]}-writer", os.O_CREAT | os.O_RDWR, 0o600)
            fcntl.flock(self._writer_lock, fcntl.LOCK_EX)
            self._writing = True
        try:
            super()._start_transaction_under_autocommit()  # type: ignore[misc]  # django-stubs omit it
        except BaseException:
            self._done_writing()
            raise

    def _commit(self) -> None:
        try:
            super()._commit()  # type: ignore[misc]
        finally:
            self._done_writing()

    def _rollback(self) -> None:
        try:
            super()._rollback()  # type: ignore[misc]
        finally:
            self._done_writing()

    def _done_writing(self) -> None:
        if self._writing and self._writer_lock is not None:
            self._writing = False
            fcntl.flock(self._writer_lock, fcntl.LOCK_UN)

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        name = str(self.settings_dict["NAME"])
        key = _file_key(name)
        if key is not None:
            with _lock:
                idle = _idle.get(key)
                if idle:
                    self._pool_key = key
                    return idle.pop()
        raw = super().get_new_connection(conn_params)
        self._pool_key = key or _file_key(name)   # a file the connection just created
        return raw

    def _close(self) -> None:
        self._done_writing()
        raw, key = self.connection, self._pool_key
        if raw is None or key is None:
            return super()._close()  # type: ignore[misc]  # django-stubs omit _close
        with self.wrap_database_errors:
            if raw.in_transaction:
                raw.rollback()
            with _lock:
                idle = _idle.setdefault(key, [])
                if len(idle) < POOL_SIZE:
                    idle.append(raw)
                    return None
            raw.close()
        return None
