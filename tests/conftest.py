from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "correct-horse-battery-staple"


@pytest.fixture(autouse=True)
def _fresh_rate_limits() -> None:
    """Failed logins and API tokens are counted per address (all tests share 127.0.0.1):
    each test starts with none. Only a process-local cache is cleared, never a shared one."""
    from django.conf import settings
    from django.core.cache import caches
    from django.core.cache.backends.locmem import LocMemCache

    cache = caches[settings.HANDOFF_RATE_LIMIT_CACHE]
    if isinstance(cache, LocMemCache):
        cache.clear()


@pytest.fixture(autouse=True)
def _fresh_mcp_listings() -> None:
    """A tool listing is cached per server config for 30 s, and test servers bind to
    ports the kernel hands out again: each test lists its own servers afresh. The MCP
    client is not imported for tests that never loaded it."""
    client = sys.modules.get("delegations.protocol.mcp_client")
    if client is not None:
        client.forget_listings()


def make_user(django_user_model: Any, username: str, *groups: str, password: str | None = PASSWORD,
              **extra: Any) -> Any:
    """A user in ``groups`` (``password=None``: none, for force_login and API tokens only,
    which spares hashing one, ~0.3 s)."""
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user(username=username, password=password, **extra)
    for name in groups:
        user.groups.add(Group.objects.get_or_create(name=name)[0])
    return user


@pytest.fixture
def composer(django_user_model: Any) -> Any:
    return make_user(django_user_model, "carol", "composers")


@pytest.fixture
def other_composer(django_user_model: Any) -> Any:
    """A second composer, for what one person may not see or change of another's."""
    return make_user(django_user_model, "dave", "composers")


@pytest.fixture
def approver(django_user_model: Any) -> Any:
    return make_user(django_user_model, "alice", "approvers")


@pytest.fixture
def outsider(django_user_model: Any) -> Any:
    return make_user(django_user_model, "oscar")


@pytest.fixture
def admin_user(django_user_model: Any) -> Any:
    return django_user_model.objects.create_superuser(username="root", password=PASSWORD, email="")


@pytest.fixture
def composer_client(client: Any, composer: Any) -> Any:
    client.force_login(composer)
    return client


@pytest.fixture
def approver_client(client: Any, approver: Any) -> Any:
    client.force_login(approver)
    return client


@pytest.fixture
def outsider_client(client: Any, outsider: Any) -> Any:
    client.force_login(outsider)
    return client


def bearer(user: Any) -> dict[str, str]:
    """Headers for an API call as `user`, through a real API token."""
    from delegations.models import APIToken

    _, raw = APIToken.issue(user=user, name="test")
    return {"Authorization": f"Bearer {raw}"}


@pytest.fixture
def composer_api(composer: Any) -> dict[str, str]:
    return bearer(composer)


@pytest.fixture
def other_composer_api(other_composer: Any) -> dict[str, str]:
    return bearer(other_composer)


@pytest.fixture
def approver_api(approver: Any) -> dict[str, str]:
    return bearer(approver)


@pytest.fixture
def outsider_api(outsider: Any) -> dict[str, str]:
    return bearer(outsider)


# --- live ASGI server (HTTP + websockets + embedded worker) for browser tests -------------

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _test_database_url() -> str:
    from django.db import connection

    settings_dict = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{settings_dict['NAME']}"
    user, password = settings_dict.get("USER", ""), settings_dict.get("PASSWORD", "")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    return (f"postgres://{auth}{settings_dict.get('HOST') or '127.0.0.1'}:"
            f"{settings_dict.get('PORT') or 5432}/{settings_dict['NAME']}")


# What a server started by a test inherits from the test process: what `make run` reads from
# a person's shell (the settings of README's Settings section, the model and tracing
# variables) and what any program needs to run. Nothing else: in particular never
# DJANGO_ALLOW_ASYNC_UNSAFE, which switches off the check that the product's async code
# makes no database call on the event loop (a suite with it on once hid a broken inbox).
SERVER_ENV_NAMES = frozenset({
    "PATH", "HOME", "USER", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM", "SHELL",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED", "VIRTUAL_ENV",
    "DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DEBUG", "ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS",
    "TIME_ZONE", "FORWARDED_ALLOW_IPS", "DJANGO_SETTINGS_MODULE",
    "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
})
SERVER_ENV_PREFIXES = ("HANDOFF_", "OTEL_", "LC_")
UNSAFE_ENV = "DJANGO_ALLOW_ASYNC_UNSAFE"


def server_environment(**settings: str) -> dict[str, str]:
    """The environment of a server a test starts: the allowlisted part of this process's,
    then ``settings``. Refuses DJANGO_ALLOW_ASYNC_UNSAFE among ``settings``."""
    if UNSAFE_ENV in settings:
        raise ValueError(f"{UNSAFE_ENV} is never set on a server a test starts: `make run` "
                         f"does not set it, so a test with it would not test what ships.")
    inherited = {name: value for name, value in os.environ.items()
                 if name in SERVER_ENV_NAMES or name.startswith(SERVER_ENV_PREFIXES)}
    return {**inherited, **settings}


def serve(database_url: str, log: IO[str], **settings: str) -> tuple[subprocess.Popen[bytes], str]:
    """`manage.py serve` (uvicorn with the embedded worker), as `make run` starts it, in a
    subprocess on a free loopback port against ``database_url``, ``settings``
    (HANDOFF_LEASE_SECONDS="5", ...) set in its environment (see server_environment): the
    process and its URL, once /api/health answers."""
    return serve_with(database_url, log, [], settings)


def serve_with(database_url: str, log: IO[str], arguments: list[str],
               settings: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """:func:`serve` with more of serve's arguments (``["--processes", "2"]``)."""
    port = _free_port()
    env = server_environment(**{
        "DATABASE_URL": database_url, "HANDOFF_TASK_BACKEND": "db", "HANDOFF_EMBEDDED_WORKER": "1",
        "DJANGO_SETTINGS_MODULE": "handoff_site.settings",
        "HANDOFF_DEFAULT_ADAPTER": os.environ.get("HANDOFF_DEFAULT_ADAPTER", "scripted"), **settings})
    process = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port), *arguments],
                               cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/api/health", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"live server did not start; see {log.name}")


def stop_server(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


@pytest.fixture(scope="module")
def live_server_settings() -> dict[str, str]:
    """The settings a module's live server starts with beside the defaults (a module that
    needs others overrides this fixture)."""
    return {}


@pytest.fixture(scope="module")
def live_server_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("live") / "server.log"


@pytest.fixture(scope="module")
def live_server_process(django_db_setup: Any, django_db_blocker: Any, live_server_log: Path,
                        live_server_settings: dict[str, str]) -> Iterator[str]:
    """`manage.py serve` in a subprocess against the test database: real uvicorn, real
    websockets, real embedded worker. Tests using it need `transactional_db`. One per
    module, stopped after it: a server left running would have its worker take the tasks
    that later modules' tests keep queued on purpose (``queued_tasks``)."""
    with django_db_blocker.unblock():
        database_url = _test_database_url()
    with live_server_log.open("w") as log:
        process, url = serve(database_url, log, **live_server_settings)
        yield url
        stop_server(process)


def assert_no_database_call_on_the_event_loop(log: Path, since: int = 0) -> None:
    """Fails when the server logged Django's refusal of a database call made from async
    code: whatever the test saw, a person on `make run` would have met that error."""
    with log.open(errors="replace") as text:
        text.seek(since)
        written = text.read()
    assert "SynchronousOnlyOperation" not in written, (
        f"the server made a database call on its event loop; see {log}:\n"
        + written[max(0, written.index("SynchronousOnlyOperation") - 3000):][:6000])


@pytest.fixture
def live_url(live_server_process: str, live_server_log: Path, transactional_db: None) -> Iterator[str]:
    since = live_server_log.stat().st_size
    yield live_server_process
    assert_no_database_call_on_the_event_loop(live_server_log, since)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Module-scoped: Playwright's sync API keeps an event loop running in the main thread
    while it is open, which would break the async tests of later modules.

    That loop also makes Django refuse the plain ORM calls a browser test makes around the
    browser (its users, skills and assertions on rows), as if they were async code. For
    this test process only, and only while the browser is open, the check is off
    (DJANGO_ALLOW_ASYNC_UNSAFE): the tests' own calls are synchronous, run one at a time.
    The server the browser drives never inherits it (``server_environment``), so the
    product's own async code stays checked."""
    from tests.services import CHROMIUM_ARGS, chromium_path

    executable = chromium_path()
    from playwright.sync_api import sync_playwright

    with pytest.MonkeyPatch.context() as scoped, sync_playwright() as playwright:
        scoped.setenv(UNSAFE_ENV, "true")
        browser = playwright.chromium.launch(executable_path=executable, headless=True,
                                             args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15000)
    yield page
    context.close()


def login(page: Any, live_url: str, username: str, password: str = PASSWORD) -> None:
    page.goto(f"{live_url}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_url}/")


# -- what a run did not test -------------------------------------------------------------------

# how to get what a skipped test needed, by the words its skip reason starts with
WHAT_TO_INSTALL = {
    "Chromium not found": "install Chromium: sudo apt-get install chromium chromium-driver",
    "Redis not reachable": "start Redis and set HANDOFF_TEST_REDIS_URL (.ci/run shows how)",
    "PostgreSQL not reachable": "start PostgreSQL and set HANDOFF_TEST_POSTGRES_URL (.ci/run shows how)",
}


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """After the run, a plain section naming what was skipped, how many tests each, and the
    command that lets them run: a green `make test` without Chromium has not tried a page."""
    skipped: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = str(longrepr[2] if isinstance(longrepr, tuple) else longrepr).removeprefix("Skipped: ")
        skipped[reason] = skipped.get(reason, 0) + 1
    if not skipped:
        return
    terminalreporter.section("what this run did not test", yellow=True)
    for reason, count in sorted(skipped.items(), key=lambda item: -item[1]):
        fix = next((how for start, how in WHAT_TO_INSTALL.items() if reason.startswith(start)), None)
        tests = "test" if count == 1 else "tests"
        terminalreporter.write_line(f"{count} {tests} skipped: {reason}"
                                    + (f"\n    to run them, {fix}, then make test again" if fix else ""))
