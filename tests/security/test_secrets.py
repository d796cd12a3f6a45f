"""A secret never leaves the process that holds it: an API key planted in the environment
(and offered in an adapter config) appears in no event, log line, page, API response or
admin page, even when the operator's model provider echoes it back in an error."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.test import Client

from delegations.models import Run, RunEvent
from delegations.protocol.adapters.endpoints import ModelEndpoint
from tests.conftest import bearer

pytestmark = [pytest.mark.django_db(transaction=True)]

PLANTED = "sk-test-planted-0000111122223333444455556666"


class _EchoingProvider(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that refuses the key and, carelessly, repeats it."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"error": {"message": f"Incorrect API key provided: {self.headers.get('Authorization')}",
                                     "type": "invalid_request_error", "code": "invalid_api_key"}}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def echoing_provider() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EchoingProvider)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_a_planted_key_appears_nowhere(monkeypatch: Any, caplog: Any, settings: Any, composer: Any,
                                       admin_user: Any, echoing_provider: str, immediate_tasks: None) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", PLANTED)
    settings.HANDOFF_MODEL_ENDPOINTS = {**settings.HANDOFF_MODEL_ENDPOINTS, "echoing": ModelEndpoint(
        "echoing", "openai", echoing_provider, "OPENAI_API_KEY")}
    caplog.set_level(logging.DEBUG)
    owner, admin = Client(), Client()
    owner.force_login(composer)
    admin.force_login(admin_user)
    api = bearer(composer)
    packet = {"goal": "Say hello in JSON", "instruction_set": "Answer with JSON.", "input_data": {},
              "expected_output_schema": {"greeting": "string"}, "success_criteria": ["JSON is schema-valid"],
              "budget": {"max_model_calls": 2}, "timeout_s": 30}

    # offered in the config: refused, and the refusal does not repeat it
    offered = owner.post("/api/runs", content_type="application/json", headers=api, data={
        "packet": packet, "adapter": {"name": "openai", "config": {"model": "gpt-test", "api_key": PLANTED}}})
    assert offered.status_code == 422

    # read from the environment, sent to a provider that echoes it back in its error
    started = owner.post("/api/runs", content_type="application/json", headers=api, data={
        "packet": packet, "adapter": {"name": "openai", "config": {
            "model": "gpt-test", "endpoint": "echoing", "max_retries": 0}}})
    assert started.status_code == 201, started.content
    run = Run.objects.get(pk=started.json()["id"])
    assert run.state == "FAILED"
    assert "Incorrect API key" in json.dumps(run.error)   # the provider's words came through, redacted

    seen = {
        "offered refusal": offered.content.decode(),
        "events": json.dumps(list(RunEvent.objects.filter(run=run).values("type", "data"))),
        "run row": json.dumps({"error": run.error, "result": run.result, "adapter": run.adapter_config}, default=str),
        "logs": "\n".join(record.getMessage() + repr(record.args) for record in caplog.records),
    }
    for path in (f"/runs/{run.pk}/", "/runs/", f"/api/runs/{run.pk}", f"/api/runs/{run.pk}/events",
                 f"/api/runs/{run.pk}/tree"):
        response = owner.get(path, headers=api if path.startswith("/api/") else {})
        assert response.status_code == 200, path
        seen[path] = response.content.decode()
    for path in (f"/admin/delegations/run/{run.pk}/change/", "/admin/delegations/run/",
                 f"/admin/delegations/runevent/?run__id__exact={run.pk}"):
        response = admin.get(path)
        assert response.status_code == 200, path
        seen[path] = response.content.decode()
    leaked = [where for where, text in seen.items() if PLANTED in text]
    assert leaked == [], f"the planted key leaked into {leaked}"
