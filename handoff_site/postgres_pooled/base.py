"""Django's PostgreSQL backend, its connections taken from a pool (Django's "pool" option,
psycopg_pool), each checked as it is handed out, with every idle one replaced at once when
one is found dead.

Without a pool every request of the web process and every run a worker took opened a
connection of its own, PostgreSQL forking a backend for each: 15 % of the web process's
samples and about 9 % of a worker's, and the pool about doubled the scale-out rate
(load_probe.py --mode scaleout, tests/benchmarks/README.md, seventh round).

The pool's own ``check`` is not used. When a connection fails it, psycopg_pool sleeps
before it tries the next one, 1, 2, 4 ... seconds with jitter (psycopg/psycopg#711). After
PostgreSQL restarts, or terminates the backends, every idle connection is dead, so the
first request after it slept through them one by one, past the pool's 30 s timeout with
five or more. Here a dead connection is closed and given back, the pool checks all its
idle ones in one pass (``ConnectionPool.check``, which replaces the dead ones), and the
next connection is taken at once.
"""

from __future__ import annotations

from typing import Any

import psycopg
from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        connection = super().get_new_connection(conn_params)
        pool = self.pool
        if pool is None:
            return connection
        try:
            ConnectionPool.check_connection(connection)
        except psycopg.Error:   # its backend is gone
            connection.close()
            pool.putconn(connection)   # a closed connection is dropped, and a new one made
            pool.check()               # every other idle one that is dead goes the same way
            connection = super().get_new_connection(conn_params)
        return connection
