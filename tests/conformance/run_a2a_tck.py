"""Run the official A2A test kit (github.com/a2aproject/a2a-tck) against a live Handoff.

Handoff starts as `manage.py serve` on a loopback port with a fresh SQLite database and a
composer whose API token the kit sends as a bearer token. Its runs use the OpenAI adapter
against a stand-in OpenAI-compatible server on loopback that answers every turn at once
with a yield_control call: what is tested is the A2A layer, not a model (the local model
made the kit's blocking sends take over ten minutes on two busy cores).

Known disagreements (kit snapshot 410ba92): the kit sends SendMessage without
returnImmediately and then expects the task to be WORKING, but a blocking send answers
once the task ended (A2A 1.0); with a model that took 3 s per turn those tests still
failed, so the stand-in answers at once. It looks for the card under the JSON-RPC URL
(``/a2a/jsonrpc/.well-known/agent-card.json``), which needs a token like every /a2a/
route; the card is served at the site's own ``/.well-known/agent-card.json``. The kit's code is not part of Handoff: check it out and
give it a Python of its own with its requirements installed::

    git clone https://github.com/a2aproject/a2a-tck /tmp/a2a-tck
    python -m venv /tmp/tck-venv && /tmp/tck-venv/bin/pip install -r /tmp/a2a-tck/requirements.txt
    .venv/bin/python tests/conformance/run_a2a_tck.py --tck /tmp/a2a-tck --python /tmp/tck-venv/bin/python

It prints the kit's summary and exits with the kit's status (0: the category passed).
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from http.server import BaseHTTPRequestHandler  # noqa: E402

from tests.services import http_on_loopback  # noqa: E402

ANSWER = {"status": "SUCCESS", "summary": "Done.", "output_payload": {"answer": "Hello from Handoff."}}


class InstantModel(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint whose every answer is one streamed yield_control."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        call = {"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "yield_control", "arguments": json.dumps(ANSWER)}}
        chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]},
                                "finish_reason": None}]},
                  {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
                   "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}]
        body = "".join(f"data: {json.dumps({'id': 'c1', 'object': 'chat.completion.chunk', 'created': 0, 'model': 'instant', **chunk})}\n\n"
                       for chunk in chunks) + "data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(body.encode())))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


def prepared_database(folder: Path) -> tuple[str, str]:
    """A migrated SQLite database with a composer; its URL and the composer's API token."""
    url = f"sqlite:///{folder / 'tck.sqlite3'}"
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "handoff_site.settings")
    import django

    django.setup()
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command

    from delegations.models import APIToken

    call_command("migrate", verbosity=0)
    user = User.objects.create_user(username="tck")
    user.groups.add(Group.objects.get_or_create(name="composers")[0])
    _, token = APIToken.issue(user=user, name="a2a-tck")
    return url, token


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tck", type=Path, required=True, help="a checkout of a2aproject/a2a-tck")
    parser.add_argument("--python", default=sys.executable, help="the Python the kit runs with")
    parser.add_argument("--category", default="mandatory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="handoff-tck-") as folder:
        database_url, token = prepared_database(Path(folder))
        from tests.conftest import serve, stop_server

        with (Path(folder) / "server.log").open("w") as log, http_on_loopback(InstantModel) as model:
            endpoints = {"openai": {"adapter": "openai", "base_url": f"{model}/v1", "default_model": "instant"}}
            process, url = serve(database_url, log, HANDOFF_DEFAULT_ADAPTER="openai",
                                 HANDOFF_MODEL_ENDPOINTS=json.dumps(endpoints))
            try:
                started = time.monotonic()
                report = Path(folder) / "report.json"
                kit = subprocess.run(
                    [args.python, "run_tck.py", "--sut-url", f"{url}/a2a/jsonrpc",
                     "--category", args.category, "--compliance-report", str(report)],
                    cwd=args.tck, env={**os.environ, "A2A_AUTH_TYPE": "bearer", "A2A_AUTH_TOKEN": token})
                print(f"\nThe kit's {args.category} category took {time.monotonic() - started:.0f} s "
                      f"against {url}.")
                if report.exists():
                    print(report.read_text()[:4000])
            finally:
                stop_server(process)
    return kit.returncode


if __name__ == "__main__":
    sys.exit(main())
