"""The live run page and the inbox in a real browser against `serve --processes 2`
(`make run PROCESSES=2`): the page's socket, the API calls and the run's execution land on
either process, and the page follows the run and the inbox as it does on one process.
The journeys are those of test_run_live and test_inbox_browser, on this module's server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import _test_database_url, serve_with, stop_server
from tests.e2e.test_inbox_browser import (
    test_a_network_call_arrives_live_is_edited_with_a_diff_and_approved_from_the_keyboard,
)
from tests.e2e.test_run_live import (
    test_a_person_watches_a_run_stream_grow_wait_for_approval_and_finish,
)

pytestmark = pytest.mark.browser

__all__ = ["test_a_network_call_arrives_live_is_edited_with_a_diff_and_approved_from_the_keyboard",
           "test_a_person_watches_a_run_stream_grow_wait_for_approval_and_finish"]


@pytest.fixture(scope="module")
def live_server_process(django_db_setup: Any, django_db_blocker: Any, live_server_log: Path) -> Iterator[str]:
    with django_db_blocker.unblock():
        database_url = _test_database_url()
    with live_server_log.open("w") as log:
        process, url = serve_with(database_url, log, ["--processes", "2"], {})
        yield url
        stop_server(process)
