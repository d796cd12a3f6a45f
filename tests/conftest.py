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

# Playwright's sync API runs an event loop in the test thread; the ORM calls the tests
# make around it are still plain synchronous calls.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

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


def serve(database_url: str, log: IO[str], **settings: str) -> tuple[subprocess.Popen[bytes], str]:
    """`manage.py serve` (uvicorn with the embedded worker) in a subprocess on a free loopback
    port against ``database_url``, ``settings`` (HANDOFF_LEASE_SECONDS="5", ...) set in its
    environment: the process and its URL, once /api/health answers."""
    port = _free_port()
    env = {**os.environ, "DATABASE_URL": database_url, "HANDOFF_TASK_BACKEND": "db",
           "HANDOFF_EMBEDDED_WORKER": "1", "DJANGO_SETTINGS_MODULE": "handoff_site.settings",
           "HANDOFF_DEFAULT_ADAPTER": os.environ.get("HANDOFF_DEFAULT_ADAPTER", "scripted"), **settings}
    process = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port)],
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
def live_server_process(django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory,
                        live_server_settings: dict[str, str]) -> Iterator[str]:
    """`manage.py serve` in a subprocess against the test database: real uvicorn, real
    websockets, real embedded worker. Tests using it need `transactional_db`. One per
    module, stopped after it: a server left running would have its worker take the tasks
    that later modules' tests keep queued on purpose (``queued_tasks``)."""
    with django_db_blocker.unblock():
        database_url = _test_database_url()
    with (tmp_path_factory.mktemp("live") / "server.log").open("w") as log:
        process, url = serve(database_url, log, **live_server_settings)
        yield url
        stop_server(process)


@pytest.fixture
def live_url(live_server_process: str, transactional_db: None) -> str:
    return live_server_process


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Module-scoped: Playwright's sync API keeps an event loop running in the main thread
    while it is open, which would break the async tests of later modules."""
    from tests.services import CHROMIUM_ARGS, chromium_path

    executable = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
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
