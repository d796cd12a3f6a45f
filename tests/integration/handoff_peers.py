"""Two Handoff servers on loopback, one delegating to the other over A2A: what the live test
(tests/integration/test_handoff_to_handoff.py) and the README's screenshot
(tests/integration/screenshot_handoff_to_handoff.py) share.

**B**, the remote, is a plain Handoff with the built-in skills loaded and a composer whose
API token is B's credential. Its runs use the OpenAI adapter against :class:`QuotingModel`,
a stand-in on loopback. **A**, the caller, knows B as the remote A2A agent ``peer`` (the
token in ``HANDOFF_A2A_SECRET_PEER`` of A's environment) and as ``impostor``, the same card
with a token B never issued. Each has its own fresh SQLite database, prepared in a
subprocess of this module (the caller's own Django is bound to the test database).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import IO, Any

import httpx

from delegations.protocol.a2a_subagents import remote_ref, remote_tool_name
from tests.conftest import PASSWORD, ROOT, serve, stop_server

SKILL = "review-sentiment@1.2.0"        # built in (the latest, which a card lists): `evidence` is quoted from `review`
PEER, IMPOSTOR = "peer", "impostor"
REVIEW = "The screen is superb, but the battery barely lasts a morning."
ENDED = frozenset({"COMPLETE", "FAILED", "TIMEOUT", "CANCELLED", "REJECTED"})
_PROMPT_INPUT = "Input data (JSON):\n"    # how the runner shows the model a packet's input_data


class QuotingModel(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint that answers each call with one streamed
    ``yield_control``: the review it was shown, its words up to the first comma quoted as
    the evidence. The quote comes from the prompt, so B's criterion holds only when A's
    input really reached B's model."""

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        review = _review_in(request.get("messages", []))
        answer = {"status": "SUCCESS", "summary": "Mixed: praise for the screen, a complaint about the battery.",
                  "output_payload": {"sentiment": "mixed", "evidence": review.split(",")[0]}}
        call = {"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "yield_control", "arguments": json.dumps(answer)}}
        chunks: list[dict[str, Any]] = [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
             "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}}]
        body = "".join(f"data: {json.dumps({'id': 'c1', 'object': 'chat.completion.chunk', 'created': 0,
                                            'model': 'quoting', **chunk})}\n\n" for chunk in chunks)
        encoded = (body + "data: [DONE]\n\n").encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(encoded)))
        self.end_headers()
        self.wfile.write(encoded)

    def log_message(self, *args: object) -> None:
        pass


def _review_in(messages: list[dict[str, Any]]) -> str:
    """The review of the task's own input: the last input shown (the skill's examples,
    shown before it, have reviews of their own)."""
    for message in reversed(messages):
        content = message.get("content")
        if isinstance(content, str) and _PROMPT_INPUT in content:
            data, _ = json.JSONDecoder().raw_decode(content.rsplit(_PROMPT_INPUT, 1)[1])
            return str(data.get("review", ""))
    return ""


@dataclass
class Handoff:
    """One live server: its process, URL and the API tokens of its users by role."""

    database_url: str
    log: IO[str]
    settings: dict[str, str]
    tokens: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    url: str = ""
    agent_ids: dict[str, int] = field(default_factory=dict)

    def start(self) -> None:
        self.process, self.url = serve(self.database_url, self.log, **self.settings)

    def stop(self) -> None:
        if self.process is not None:
            stop_server(self.process)
            self.process = None

    def headers(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}

    def get(self, path: str, role: str = "composer") -> Any:
        answer = httpx.get(f"{self.url}{path}", headers=self.headers(role), timeout=10)
        assert answer.status_code == 200, f"GET {path}: {answer.status_code} {answer.text}"
        return answer.json()

    def post(self, path: str, body: dict[str, Any], role: str = "composer", method: str = "POST") -> Any:
        answer = httpx.request(method, f"{self.url}{path}", headers=self.headers(role), json=body, timeout=10)
        assert answer.status_code in (200, 201), f"{method} {path}: {answer.status_code} {answer.text}"
        return answer.json()


def prepared_database(path: Path, *, builtin_skills: bool) -> dict[str, str]:
    """A migrated SQLite database at ``path`` with a composer (``carol``, who can sign in),
    an approver and a superuser; their API tokens by role."""
    command = [sys.executable, "-m", "tests.integration.handoff_peers"]
    done = subprocess.run(command + (["--builtin-skills"] if builtin_skills else []), cwd=ROOT,
                          env={**os.environ, "DATABASE_URL": f"sqlite:///{path}",
                               "DJANGO_SETTINGS_MODULE": "handoff_site.settings"},
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    tokens: dict[str, str] = json.loads(done.stdout.splitlines()[-1])
    return tokens


def _prepare(builtin_skills: bool) -> dict[str, str]:
    """In the subprocess, against DATABASE_URL."""
    import django

    django.setup()
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command

    from delegations.models import APIToken

    call_command("migrate", verbosity=0)
    if builtin_skills:
        call_command("load_builtin_skills", stdout=io.StringIO())
    users = {"composer": User.objects.create_user(username="carol", password=PASSWORD),
             "approver": User.objects.create_user(username="alice"),
             "admin": User.objects.create_superuser(username="root", email="")}
    for role in ("composer", "approver"):
        users[role].groups.add(Group.objects.get_or_create(name=f"{role}s")[0])
    return {role: APIToken.issue(user=user, name="handoff-peers")[1] for role, user in users.items()}


def start_remote(folder: Path, log: IO[str], model_url: str) -> Handoff:
    """B: the built-in skills, its runs on the stand-in model at ``model_url``."""
    endpoints = {"openai": {"adapter": "openai", "base_url": f"{model_url}/v1", "default_model": "quoting"}}
    remote = Handoff(database_url=f"sqlite:///{folder / 'b.sqlite3'}", log=log,
                     tokens=prepared_database(folder / "b.sqlite3", builtin_skills=True),
                     settings={"HANDOFF_DEFAULT_ADAPTER": "openai",
                               "HANDOFF_MODEL_ENDPOINTS": json.dumps(endpoints)})
    remote.start()
    return remote


def start_caller(folder: Path, log: IO[str], remote: Handoff) -> Handoff:
    """A: B as ``peer`` (B's composer token) and ``impostor`` (a token B never issued),
    added through A's API; calling either needs network_outbound, which an approver on A
    approves first."""
    caller = Handoff(database_url=f"sqlite:///{folder / 'a.sqlite3'}", log=log,
                     tokens=prepared_database(folder / "a.sqlite3", builtin_skills=False),
                     settings={"HANDOFF_A2A_SECRET_PEER": remote.tokens["composer"],
                               "HANDOFF_A2A_SECRET_IMPOSTOR": "hnd_not-a-token-b-issued",
                               "HANDOFF_APPROVAL_REQUIRED_CAPABILITIES": "network_outbound"})
    caller.start()
    for name in (PEER, IMPOSTOR):
        agent = caller.post("/api/remote-agents", {
            "name": name, "card_url": remote.url, "secret_env": f"HANDOFF_A2A_SECRET_{name.upper()}",
            "allowed_skills": [SKILL]}, role="admin")
        caller.agent_ids[name] = agent["id"]
    return caller


def point_agents_at(caller: Handoff, url: str) -> None:
    """After B restarted on another port."""
    for agent_id in caller.agent_ids.values():
        caller.post(f"/api/remote-agents/{agent_id}", {"card_url": url}, role="admin", method="PUT")


def review_run(caller: Handoff, agent: str = PEER, *, with_fallback: bool = False) -> str:
    """A run on A whose scripted model hands :data:`REVIEW` to ``agent``'s review skill and
    finishes with the child's answer; ``with_fallback``: its model answers after the child
    instead, without it when the child failed, as a coordinator does when a subagent lets
    it down."""
    call = {"name": remote_tool_name(agent, SKILL), "arguments": {
        "goal": "Classify this customer review and quote the words that decided it.",
        "input": {"review": REVIEW}}}
    asking: dict[str, Any] = {"text": f"Asking {agent} to classify the review.", "tool_calls": [call]}
    fallback = {"tool_calls": [{"name": "yield_control", "arguments": {
        "status": "SUCCESS", "summary": "The remote classifier failed; no sentiment this time.",
        "output_payload": {"children": []}}}]}
    script = [asking, fallback] if with_fallback else [{**asking, "finish": "children"}]
    packet = {"goal": "Find out how a customer feels about their tablet, with a remote classifier",
              "label": "review-triage",
              "subagent_type": "researcher", "capabilities": ["network_outbound"],
              "instruction_set": "Hand the review to the remote review-sentiment skill and report what it found.",
              "input_data": {"review": REVIEW}, "allowed_inputs": ["review"],
              "expected_output_schema": {"children": "array"}, "success_criteria": ["JSON is schema-valid"],
              "timeout_s": 60, "budget": {"max_model_calls": 10, "max_tokens": 100000}}
    run = caller.post("/api/runs", {"packet": packet, "adapter": {"name": "scripted", "config": {"script": script}}})
    return str(run["id"])


def wait_for_run(server: Handoff, run_id: str, states: frozenset[str] = ENDED,
                 timeout_s: float = 30) -> dict[str, Any]:
    """The run once its state is one of ``states``."""
    deadline = time.monotonic() + timeout_s
    while True:
        run: dict[str, Any] = server.get(f"/api/runs/{run_id}")
        if run["state"] in states:
            return run
        assert time.monotonic() < deadline, f"run {run_id} still {run['state']} after {timeout_s:g} s"
        time.sleep(0.1)


def approve_remote_call(caller: Handoff, run_id: str) -> dict[str, Any]:
    """Wait for the run's tree to park on A's inbox, and approve the item as A's approver:
    the item, as it was before the decision."""
    wait_for_run(caller, run_id, frozenset({"AWAITING_APPROVAL"}))
    [item] = caller.get(f"/api/approvals?status=pending&run={run_id}", role="approver")["results"]
    caller.post(f"/api/approvals/{item['id']}/decision", {"decision": "approve"}, role="approver")
    return dict(item)


def remote_child(caller: Handoff, run_id: str, agent: str = PEER) -> dict[str, Any]:
    """The child run labelled ``<agent>/<skill>`` in the run's tree, in full."""
    [node] = caller.get(f"/api/runs/{run_id}/tree")["children"]
    assert node["label"] == remote_ref(agent, SKILL), node
    return dict(caller.get(f"/api/runs/{node['id']}"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Prepare the database at DATABASE_URL for a peer.")
    parser.add_argument("--builtin-skills", action="store_true")
    print(json.dumps(_prepare(parser.parse_args().builtin_skills)))
