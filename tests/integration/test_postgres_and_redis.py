"""The scale-out services really work with this code: PostgreSQL as the database and
Redis as the channel layer. .ci/run runs the `services` tests a second time with
DATABASE_URL and REDIS_URL pointing at them."""

from __future__ import annotations

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
def test_postgresql_connections_come_from_a_pool_that_replaces_a_terminated_one():
    if connection.vendor != "postgresql":
        pytest.skip("runs in .ci/run's PostgreSQL stage (DATABASE_URL=postgres://...)")

    def backend_pid() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return int(cursor.fetchone()[0])

    used = set()
    for _ in range(10):
        used.add(backend_pid())
        connection.close()   # back to the pool, still open
    assert len(used) <= 5    # the pool's few connections, not one a use
    with psycopg.connect(postgres_url().replace("postgres://", "postgresql://"), autocommit=True) as admin:
        for pid in used:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    assert backend_pid() not in used   # the dead ones were checked and replaced, with no error
