"""The suite runs the product as it ships: a server a test starts never inherits Django's
switch for its async-safety check, and a database call the server makes on its event loop
fails the test that caused it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    UNSAFE_ENV,
    _test_database_url,
    assert_no_database_call_on_the_event_loop,
    serve,
    server_environment,
    stop_server,
)


def test_a_started_server_never_inherits_the_switch_that_turns_the_check_off(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, transactional_db: None) -> None:
    monkeypatch.setenv(UNSAFE_ENV, "true")
    monkeypatch.setenv("HANDOFF_LANE_SIZE", "3")            # a setting make run would read
    monkeypatch.setenv("SOME_TOOL_TOKEN", "not-for-the-server")
    with (tmp_path / "server.log").open("w") as log:
        process, _ = serve(_test_database_url(), log)
        try:
            environ = dict(line.split("=", 1) for line in
                           Path(f"/proc/{process.pid}/environ").read_text().split("\0") if "=" in line)
        finally:
            stop_server(process)
    assert UNSAFE_ENV not in environ
    assert environ["HANDOFF_LANE_SIZE"] == "3"
    assert "SOME_TOOL_TOKEN" not in environ


def test_a_test_cannot_hand_the_switch_to_a_server() -> None:
    with pytest.raises(ValueError, match="never set on a server a test starts"):
        server_environment(**{UNSAFE_ENV: "true"})


def test_a_database_call_on_the_servers_event_loop_fails_the_test(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("INFO started\n")
    since = log.stat().st_size
    assert_no_database_call_on_the_event_loop(log, since)   # nothing new: fine
    with log.open("a") as text:
        text.write("django.core.exceptions.SynchronousOnlyOperation: You cannot call this from an "
                   "async context - use a thread or sync_to_async.\n")
    with pytest.raises(AssertionError, match="made a database call on its event loop"):
        assert_no_database_call_on_the_event_loop(log, since)


def test_the_suite_itself_runs_with_the_check_on(django_user_model: Any) -> None:
    import asyncio
    import os

    from django.core.exceptions import SynchronousOnlyOperation

    assert not os.environ.get(UNSAFE_ENV)

    async def on_the_loop() -> None:
        django_user_model.objects.count()

    with pytest.raises(SynchronousOnlyOperation):
        asyncio.run(on_the_loop())
