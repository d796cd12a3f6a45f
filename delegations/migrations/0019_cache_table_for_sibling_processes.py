"""The table of the cache that the processes of `serve --processes N` share (settings:
HANDOFF_SIBLINGS_HUB): the failed-attempt limits and idempotency keys then count across
them, as a Redis cache makes them count across the scale-out stack's processes. Made on
every database, as Django's `createcachetable` makes one; unused where nothing names it."""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.db import migrations

TABLE = "handoff_cache"


def create(apps: Any, schema_editor: Any) -> None:
    call_command("createcachetable", TABLE, database=schema_editor.connection.alias, verbosity=0)


def drop(apps: Any, schema_editor: Any) -> None:
    schema_editor.execute(f"DROP TABLE IF EXISTS {schema_editor.quote_name(TABLE)}")


class Migration(migrations.Migration):
    dependencies = [("delegations", "0018_indexes_for_a_database_in_use")]
    operations = [migrations.RunPython(create, drop)]
