"""The README's picture of a run tree in a trace viewer: Arize Phoenix, started on loopback
from a virtualenv of its own (Handoff never depends on it), receives the trace of a scripted
coordinator with two subagents run by ``manage.py run_delegation``, and Debian's headless
Chromium takes the trace's page. Run by hand::

    python3 -m venv /tmp/phoenix-venv && /tmp/phoenix-venv/bin/pip install arize-phoenix
    .venv/bin/python tests/integration/screenshot_traces_phoenix.py --phoenix /tmp/phoenix-venv/bin/phoenix

Phoenix itself tries to fetch a sandbox binary from the internet as it starts; without a
network it says so in its log and serves traces all the same.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent / "traces_phoenix"
sys.path.insert(0, str(ROOT))

from tests.services import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

PORT = 6006
BASE = f"http://127.0.0.1:{PORT}"


def start_phoenix(phoenix: str, folder: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(folder / "phoenix"), "PHOENIX_HOST": "127.0.0.1",
           "PHOENIX_PORT": str(PORT), "PHOENIX_TELEMETRY_ENABLED": "false"}
    process = subprocess.Popen([phoenix, "serve"], env=env, stdout=(folder / "phoenix.log").open("w"),
                               stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{BASE}/v1/projects", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.5)
    process.kill()
    raise RuntimeError(f"Phoenix did not start; see {folder / 'phoenix.log'}")


def run_tree(folder: Path) -> str:
    """The scripted tree, run by the CLI with traces sent to Phoenix; its root run id."""
    env = {**{n: v for n, v in os.environ.items() if not n.startswith("OTEL_")},
           "DJANGO_SETTINGS_MODULE": "handoff_site.settings", "HANDOFF_DATA_DIR": str(folder),
           "HANDOFF_WORKSPACE_ROOT": str(folder / "workspaces"),
           "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{BASE}/v1/traces",
           "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    done = subprocess.run([*manage, "run_delegation", str(HERE / "packet.json"), "--adapter", "scripted",
                           "--adapter-config", f"@{HERE / 'scripted_config.json'}", "--json"],
                          cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    return str(json.loads(done.stdout.splitlines()[0])["run_id"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phoenix", required=True, help="the phoenix command of its own virtualenv")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "traces_phoenix.png")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="handoff-phoenix-") as name:
        folder = Path(name)
        phoenix = start_phoenix(args.phoenix, folder)
        try:
            trace_id = run_tree(folder)   # the trace id is the root run's id
            project = httpx.get(f"{BASE}/v1/projects", timeout=10).json()["data"][0]["id"]
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1440, "height": 860})
                page.goto(f"{BASE}/projects/{project}/traces/{trace_id}", wait_until="networkidle")
                page.get_by_text("invoke_agent planner caching-study").first.wait_for()
                page.wait_for_timeout(1500)
                page.screenshot(path=str(args.out))
                browser.close()
        finally:
            phoenix.terminate()
            phoenix.wait(timeout=20)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
