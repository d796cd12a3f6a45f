"""Finding the machine services some tests need (PostgreSQL, Redis, Chromium).

With HANDOFF_REQUIRE_SERVICES=1 (as in CI) a missing service fails the test instead of
skipping it, so a green CI run means every integration test really ran."""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import urlparse

import pytest

CHROMIUM = os.environ.get("HANDOFF_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def services_required() -> bool:
    return os.environ.get("HANDOFF_REQUIRE_SERVICES") == "1"


def missing(reason: str) -> None:
    """Skip, or fail when services are required."""
    if services_required():
        pytest.fail(f"Required service missing: {reason}")
    pytest.skip(reason)


def reachable(url: str) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 0), timeout=1):
            return True
    except OSError:
        return False


def chromium_path() -> str:
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        missing(f"Chromium not found at {CHROMIUM}: the browser tests need it")
    return CHROMIUM


def redis_url() -> str:
    url = os.environ.get("HANDOFF_TEST_REDIS_URL") or os.environ.get("REDIS_URL", "")
    if not url or not reachable(url):
        missing("Redis not reachable: set HANDOFF_TEST_REDIS_URL (see .ci/run)")
    return url


def postgres_url() -> str:
    url = os.environ.get("HANDOFF_TEST_POSTGRES_URL", "")
    if not url and os.environ.get("DATABASE_URL", "").startswith("postgres"):
        url = os.environ["DATABASE_URL"]
    if not url or not reachable(url):
        missing("PostgreSQL not reachable: set HANDOFF_TEST_POSTGRES_URL (see .ci/run)")
    return url


def page_handler(body: str, content_type: str = "text/html", status: int = 200) -> type[BaseHTTPRequestHandler]:
    """A handler that answers every GET with ``body`` (and ``status``); the paths asked for
    are in its ``served``."""

    class Page(BaseHTTPRequestHandler):
        served: ClassVar[list[str]] = []

        def do_GET(self) -> None:
            Page.served.append(self.path)
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return Page


@contextmanager
def http_on_loopback(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served on a free 127.0.0.1 port in a thread: its base URL, until the
    block ends and the server is shut down."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
