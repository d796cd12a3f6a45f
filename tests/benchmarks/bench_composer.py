"""The composer's live lint: server time of one lint round trip, and keystroke to findings
on the page in Chromium, for the agloop executor packet.

Run: `.venv/bin/python tests/benchmarks/bench_composer.py [--rounds N]`.

It builds a throwaway SQLite database in a temporary folder (HANDOFF_DATA_DIR) and saves
the agloop executor packet (tests/protocol/protocol_examples.py) as a delegation.

- **server**: POSTs the composer form, as the page sends it, to `/delegations/lint/`
  through Django's test client (middleware, session, form, `lint_as_run`, the panel's
  template; no network); median of N. Target: under 20 ms.
- **browser**: `manage.py serve` on that database and headless Chromium on the saved
  delegation's composer page. A key pressed in the goal field (a real keydown) is timed
  to the moment the swapped-in lint panel is in the document (a MutationObserver), so the
  figure includes htmx's debounce (`delay:` in the form's `hx-trigger`), the request, the
  server and the swap; median of N. Target: under 150 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.throwaway_site import (  # first: it sets up Django
    ROOT,
    free_port,
    median_and_p95,
)

# isort: split
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.test import Client

from delegations.accounts.roles import COMPOSERS
from delegations.composer.forms import ComposerForm, initial_from_packet
from delegations.composer.services import delegation_create
from tests.protocol.protocol_examples import AGLOOP_EXECUTOR

SERVER_TARGET_MS = 20.0
BROWSER_TARGET_MS = 150.0
PASSWORD = "bench-password-123"


def form_data(packet: dict[str, Any]) -> dict[str, Any]:
    """The composer form's fields as the page posts them, filled from ``packet``."""
    form = ComposerForm(initial=initial_from_packet(packet))
    data: dict[str, Any] = {}
    for field in form:
        value = field.value()
        if value is None or value is False:
            continue
        data[field.html_name] = "on" if value is True else value
    return data


def server_round_trips(client: Client, rounds: int) -> list[float]:
    data = form_data(AGLOOP_EXECUTOR)
    first = client.post("/delegations/lint/", data, HTTP_HX_REQUEST="true")
    assert first.status_code == 200 and b'id="lint-panel"' in first.content, first.status_code
    timings = []
    for _ in range(rounds):
        started = time.perf_counter()
        response = client.post("/delegations/lint/", data, HTTP_HX_REQUEST="true")
        timings.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200
    return timings


def browser_round_trips(delegation_id: int, rounds: int) -> list[float]:
    from playwright.sync_api import sync_playwright

    from tests.services import CHROMIUM_ARGS, chromium_path

    port = free_port()
    env = {**os.environ, "HANDOFF_EMBEDDED_WORKER": "0"}
    server = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port), "--no-worker"],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.2)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True,
                                                 args=CHROMIUM_ARGS)
            page = browser.new_page()
            page.goto(f"{url}/accounts/login/")
            page.fill("#id_username", "bench")
            page.fill("#id_password", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_url(f"{url}/")
            page.goto(f"{url}/delegations/{delegation_id}/")
            page.evaluate("""() => {
                window.__swaps = [];
                const panel = document.getElementById('lint-panel');
                new MutationObserver(() => window.__swaps.push(performance.now()))
                    .observe(panel.parentNode, {childList: true});
                document.getElementById('id_goal').addEventListener(
                    'keydown', () => { window.__pressed = performance.now(); });
            }""")
            goal = page.locator("#id_goal")
            goal.click()
            page.keyboard.press("End")
            timings = []
            for round_number in range(rounds + 2):   # the first two warm the path
                seen = page.evaluate("window.__swaps.length")
                page.keyboard.type("x" if round_number % 2 else "y")
                page.wait_for_function(f"window.__swaps.length > {seen}")
                elapsed = page.evaluate("window.__swaps[window.__swaps.length - 1] - window.__pressed")
                if round_number >= 2:
                    timings.append(float(elapsed))
                page.wait_for_timeout(200)   # a pause between keystrokes, as a person types
            browser.close()
        return timings
    finally:
        server.terminate()
        server.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("bench", password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name=COMPOSERS)[0])
    delegation = delegation_create(owner=user, name="agloop executor", packet=AGLOOP_EXECUTOR)
    client = Client()
    client.force_login(user)

    server = median_and_p95(server_round_trips(client, args.rounds))
    browser = median_and_p95(browser_round_trips(delegation.pk, args.rounds))
    for name, (median, p95), target in (("server", server, SERVER_TARGET_MS),
                                        ("keystroke to findings", browser, BROWSER_TARGET_MS)):
        verdict = "meets" if median < target else "MISSES"
        print(f"lint round trip, {name}: median {median:.1f} ms, p95 {p95:.1f} ms over "
              f"{args.rounds}; {verdict} the {target:.0f} ms target")
    print(json.dumps({"case": "composer_lint", "server_median_ms": round(server[0], 1),
                      "server_p95_ms": round(server[1], 1), "browser_median_ms": round(browser[0], 1),
                      "browser_p95_ms": round(browser[1], 1), "rounds": args.rounds}))


if __name__ == "__main__":
    main()
