"""The scale-out services really work with this code: PostgreSQL as the database and
Redis as the channel layer. .ci/run runs the `services` tests a second time with
DATABASE_URL and REDIS_URL pointing at them."""

from __future__ import annotations

import time
import uuid

import psycopg
import pytest
from channels_redis.core import RedisChannelLayer
from django.db import connection

from tests.services import postgres_url, redis_url

pytestmark = pytest.mark.services


def test_postgresql_accepts_connections_and_json_queries():
    with psycopg.connect(postgres_url().replace("postgres://", "postgresql://")) as conn:
        row = conn.execute("SELECT '{\"a\": [1, 2]}'::jsonb -> 'a' ->> 1").fetchone()
    assert row == ("2",)


async def test_the_redis_channel_layer_delivers_group_messages():
    layer = RedisChannelLayer(hosts=[redis_url()])
    channel = await layer.new_channel()
    group = f"run-{uuid.uuid4().hex}"
    await layer.group_add(group, channel)
    await layer.group_send(group, {"type": "run.event", "seq": 1})
    assert await layer.receive(channel) == {"type": "run.event", "seq": 1}
    await layer.group_discard(group, channel)
    await layer.flush()


@pytest.mark.django_db
def test_the_configured_database_runs_migrations_and_queries():
    from delegations.models import APIToken

    assert APIToken.objects.count() == 0
    assert connection.vendor in {"sqlite", "postgresql"}


@pytest.mark.django_db(transaction=True)
def test_postgresql_connections_are_pooled_and_a_restart_costs_no_wait():
    if connection.vendor != "postgresql":
        pytest.skip("runs in .ci/run's PostgreSQL stage (DATABASE_URL=postgres://...)")

    def backend_pid() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return int(cursor.fetchone()[0])

    pool = connection.pool  # type: ignore[attr-defined]  # the PostgreSQL wrapper's
    opened = pool.get_stats().get("connections_num", 0)
    used = set()
    for _ in range(10):
        used.add(backend_pid())
        connection.close()   # back to the pool, still open
    assert pool.get_stats().get("connections_num", 0) - opened <= 2   # not one a use
    with psycopg.connect(postgres_url().replace("postgres://", "postgresql://"), autocommit=True) as admin:
        for pid in used:     # as a restart of PostgreSQL ends them
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    started = time.monotonic()
    assert backend_pid() not in used   # the dead ones were found and replaced, with no error
    # psycopg_pool's own check sleeps at least 0.9 s after each dead connection (1, 2, 4 ...
    # s): this is the only thing that could make taking one slow here
    assert time.monotonic() - started < 0.9
