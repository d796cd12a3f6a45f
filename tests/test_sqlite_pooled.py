"""The SQLite backend that keeps closed connections for the next thread (sqlite_pooled)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from handoff_site.sqlite_pooled.base import DatabaseWrapper


@pytest.fixture(autouse=True)
def own_databases(django_db_blocker: Any) -> Iterator[None]:
    """These tests open files of their own, not the test database."""
    with django_db_blocker.unblock():
        yield


def wrapper(path: Path) -> DatabaseWrapper:
    return DatabaseWrapper({**settings.DATABASES["default"], "NAME": str(path)}, alias="pooled-test")


def in_thread(job: Any) -> Any:
    """What ``job`` returns in a thread of its own, as each request runs under ASGI."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(job()))
    thread.start()
    thread.join()
    return out[0]


def used_then_closed(path: Path, sql: str = "SELECT 1") -> Any:
    db = wrapper(path)
    db.connect()
    raw = db.connection
    with db.cursor() as cursor:
        cursor.execute(sql)
    db.close()
    return raw


def test_a_closed_connection_serves_the_next_thread_of_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "a.sqlite3"
    first = in_thread(lambda: used_then_closed(path))
    assert in_thread(lambda: used_then_closed(path)) is first
    assert in_thread(lambda: used_then_closed(tmp_path / "b.sqlite3")) is not first


def test_a_connection_left_in_a_transaction_comes_back_rolled_back(tmp_path: Path) -> None:
    path = tmp_path / "a.sqlite3"
    used_then_closed(path, "CREATE TABLE t (x integer)")
    db = wrapper(path)
    db.connect()
    db.connection.execute("BEGIN")
    db.connection.execute("INSERT INTO t VALUES (1)")
    db.close()
    again = wrapper(path)
    again.connect()
    assert not again.connection.in_transaction
    assert again.connection.execute("SELECT count(*) FROM t").fetchone() == (0,)
    again.close()


def test_a_database_file_made_anew_gets_new_connections(tmp_path: Path) -> None:
    path = tmp_path / "a.sqlite3"
    first = used_then_closed(path, "CREATE TABLE t (x integer)")
    path.unlink()
    second = used_then_closed(path)
    assert second is not first
    assert second.execute("SELECT name FROM sqlite_master").fetchall() == []
