"""The README's picture of a remote A2A child: A's run page, its tree showing the child
``peer/review-sentiment@1.1.0`` that B ran, taken with the two servers of
tests/integration/handoff_peers.py in Debian's headless Chromium. Run by hand::

    .venv/bin/python tests/integration/screenshot_handoff_to_handoff.py [--out docs/remote_agent_run.png]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "handoff_site.settings")

from tests.conftest import login  # noqa: E402
from tests.integration.handoff_peers import (  # noqa: E402
    QuotingModel,
    approve_remote_call,
    remote_child,
    review_run,
    start_caller,
    start_remote,
    wait_for_run,
)
from tests.services import CHROMIUM, CHROMIUM_ARGS, http_on_loopback  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "remote_agent_run.png")
    args = parser.parse_args()
    from playwright.sync_api import ViewportSize, sync_playwright

    with tempfile.TemporaryDirectory(prefix="handoff-peers-") as folder, \
            (Path(folder) / "servers.log").open("w") as log, http_on_loopback(QuotingModel) as model:
        remote = start_remote(Path(folder), log, model)
        caller = start_caller(Path(folder), log, remote)
        try:
            run_id = review_run(caller)
            approve_remote_call(caller, run_id)
            run = wait_for_run(caller, run_id)
            child = remote_child(caller, run_id)
            if (run["state"], child["state"]) != ("COMPLETE", "COMPLETE"):
                print(f"The run ended {run['state']} (its remote child {child['state']}); see {log.name}.")
                return 1
            with sync_playwright() as playwright:
                # a fresh profile (the temporary folder), so nothing of an earlier session shows
                browser = playwright.chromium.launch_persistent_context(
                    str(Path(folder) / "profile"), executable_path=CHROMIUM, headless=True,
                    args=CHROMIUM_ARGS, viewport=ViewportSize(width=1440, height=1000))
                page = browser.new_page()
                login(page, caller.url, "carol")
                page.goto(f"{caller.url}/runs/{run_id}/")
                page.wait_for_selector("#run-tree [data-remote-agent]")
                page.screenshot(path=str(args.out), full_page=False)
                browser.close()
        finally:
            caller.stop()
            remote.stop()
    print(f"Saved {args.out} (run {run_id}, its remote child {child['id']}).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
