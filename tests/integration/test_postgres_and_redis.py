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
