"""Run the official A2A test kit (github.com/a2aproject/a2a-tck) against a live Handoff.

Handoff starts as `manage.py serve` on a loopback port with a fresh SQLite database and a
composer whose API token the kit sends as a bearer token. Its runs use the OpenAI adapter
against a stand-in OpenAI-compatible server on loopback that answers every turn, after
ANSWER_S, with a yield_control call: what is tested is the A2A layer, not a model (the local
model made the kit's blocking sends take over ten minutes on two busy cores).

The kit expects a task it started with a plain SendMessage to be still working when the
send answers (its ListTasks tests wait 5 s for TASK_STATE_WORKING; its cancel, continue and
history tests act on the task). Handoff holds such a send at most HANDOFF_A2A_SEND_WAIT_S,
here SEND_WAIT_S, and the stand-in takes longer than that, so the kit meets the tasks
working, as it would meet those of a real model that takes its time.

Against the kit's snapshot 410ba92: 87 passed, 0 failed, 29 skipped in about 60 s (the
category passes). Its push-notification error test skips: Handoff offers push
notifications, so there is no -32003 to provoke. Against an agent that does not offer them,
that test fails inside the kit: it calls its helper
``transport_create_task_push_notification_config`` with four arguments where it takes three.

The kit's code is not part of Handoff: check it out and give it a Python of its own with
its requirements installed (its requirements.txt lacks some of what its pyproject.toml names)::

    git clone https://github.com/a2aproject/a2a-tck /tmp/a2a-tck
    python -m venv /tmp/tck-venv
    /tmp/tck-venv/bin/pip install -r /tmp/a2a-tck/requirements.txt
    /tmp/tck-venv/bin/pip install python-dotenv grpcio-status proto-plus pyOpenSSL aiohttp
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
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from http.server import BaseHTTPRequestHandler  # noqa: E402

from tests.services import http_on_loopback  # noqa: E402

ANSWER = {"status": "SUCCESS", "summary": "Done.", "output_payload": {"answer": "Hello from Handoff."}}
# How long a blocking send waits, and what the stand-in model spends on its one answer: a
# send answers while its task is still working, and the task completes a little later, as
# it would with a real model. The kit's history test sends a task three follow-ups, 0.5 s
# apart after each answer, and expects it still open for the last one (about 2.5 s in).
SEND_WAIT_S = 0.3
ANSWER_S = 3.5
# the kit starts tasks one after another, each waited on only until it works, so about
# ANSWER_S / 0.5 s of them work at once: more than the 8 one person's lane holds by default
LANE_SIZE = 16


class StandInModel(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint whose every answer, after ANSWER_S, is one
    streamed yield_control."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        time.sleep(ANSWER_S)
        call = {"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "yield_control", "arguments": json.dumps(ANSWER)}}
        chunks: list[dict[str, Any]] = [{"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]},
                                "finish_reason": None}]},
                  {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
                   "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}]
        body = "".join(f"data: {json.dumps({'id': 'c1', 'object': 'chat.completion.chunk', 'created': 0, 'model': 'stand-in', **chunk})}\n\n"
                       for chunk in chunks) + "data: [DONE]\n\n"
        try:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(body.encode())))
            self.end_headers()
            self.wfile.write(body.encode())
        except (BrokenPipeError, ConnectionResetError):
            pass   # the task was cancelled while its model answered: the call was dropped

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

        with (Path(folder) / "server.log").open("w") as log, http_on_loopback(StandInModel) as model:
            endpoints = {"openai": {"adapter": "openai", "base_url": f"{model}/v1", "default_model": "stand-in"}}
            process, url = serve(database_url, log, HANDOFF_DEFAULT_ADAPTER="openai",
                                 HANDOFF_MODEL_ENDPOINTS=json.dumps(endpoints),
                                 HANDOFF_A2A_SEND_WAIT_S=str(SEND_WAIT_S), HANDOFF_LANE_SIZE=str(LANE_SIZE))
            try:
                started = time.monotonic()
                report = Path(folder) / "report.json"
                # the JSON-RPC URL (the kit posts raw requests there and reads the card under
                # it), by name: the kit takes 127.0.0.1 in a card for a leaked internal address
                site = url.replace("127.0.0.1", "localhost")
                kit = subprocess.run(
                    [args.python, "run_tck.py", "--sut-url", f"{site}/a2a/jsonrpc",
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
