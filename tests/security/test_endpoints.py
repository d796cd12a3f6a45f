"""Endpoints belong to the operator: no run decides which host receives a credential.

A listener on loopback stands for a host a composer would like the server's keys sent to.
Every adapter is offered every key that would pick a host, a header or a variable, on every
way a run starts (the API, a delegation's runs, the run form, a dry run, a retry, an
import, the CLI); each is refused naming the key, and the listener hears nothing. A run on
an operator's endpoint whose model asks ``delegate_task`` for another host gets its child
on the same endpoint.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from delegations.composer.views import DRY_RUN_PREFIX
from delegations.models import Delegation, Run
from delegations.protocol.adapters.endpoints import ModelEndpoint
from delegations.runs.export import run_export
from tests.conftest import bearer
from tests.delegations import scripts
from tests.delegations.runs.test_run_pages import make_run
from tests.services import http_on_loopback

pytestmark = [pytest.mark.django_db(transaction=True)]

OPENAI_KEY = "sk-planted-openai-0000111122223333"
ANTHROPIC_KEY = "sk-ant-planted-4444555566667777"
PRIVATE_VALUE = "private-value-8888999900001111"
SECRETS = (OPENAI_KEY, ANTHROPIC_KEY, PRIVATE_VALUE)
SEEDED = "seeded by the test"   # the label of runs a test stores itself


@dataclass
class Host:
    """An HTTP server on 127.0.0.1 that keeps every request it gets."""

    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)


def serve(answer: Callable[[dict[str, Any]], dict[str, Any]]) -> Iterator[Host]:
    host = Host(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            request = {"path": self.path, "body": body.decode(),
                       "headers": {name.lower(): value for name, value in self.headers.items()}}
            host.requests.append(request)
            reply = json.dumps(answer(request)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        do_GET = do_PUT = do_POST

        def log_message(self, *args: Any) -> None:
            pass

    with http_on_loopback(Handler) as base_url:
        host.url = f"{base_url}/v1"
        yield host


@pytest.fixture
def listener() -> Iterator[Host]:
    """The host nobody may send a key to."""
    yield from serve(lambda request: {})


def completion(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "operator-model",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": None, "tool_calls": [{
                    "id": f"call_{name}", "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)}}]}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


@pytest.fixture
def provider(listener: Host) -> Iterator[Host]:
    """The operator's OpenAI-compatible server. Its model delegates once, asking for the
    child to run on the listener; the child and then the parent answer."""

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        messages = json.loads(request["body"])["messages"]
        if any(m["role"] == "tool" for m in messages) or "CHILD-TASK" in json.dumps(messages):
            return completion("yield_control", {"status": "SUCCESS", "output_payload": {"answer": 42}})
        return completion("delegate_task", {
            "label": "kid", "subagent_type": "researcher", "goal": "Find the part",
            "instruction_set": "CHILD-TASK: answer with JSON.", "input_data": {"part": "a"},
            "expected_output_schema": {"answer": "integer"}, "timeout_s": 30,
            "adapter": {"name": "openai", "config": {"base_url": listener.url,
                                                     "api_key_env": "HANDOFF_TEST_PRIVATE"}},
            "base_url": listener.url, "endpoint": listener.url})

    yield from serve(answer)


@pytest.fixture
def endpoints(settings: Any, monkeypatch: Any, provider: Host) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv("HANDOFF_TEST_PRIVATE", PRIVATE_VALUE)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    settings.HANDOFF_MODEL_ENDPOINTS = {
        **settings.HANDOFF_MODEL_ENDPOINTS,
        "operator": ModelEndpoint("operator", "openai", provider.url, "OPENAI_API_KEY", ("operator-model",))}


def hostile_configs(listener: str) -> list[tuple[str, dict[str, Any], str]]:
    """(adapter, config, the key it must be refused for): each adapter with each key that
    would choose a host, a header, a credential or a variable."""
    base: dict[str, dict[str, Any]] = {
        "openai": {"model": "gpt-test"}, "anthropic": {"model": "claude-test"},
        "scripted": {"script": [scripts.yield_turn()]}, "local": {}}
    offered: dict[str, Any] = {
        "base_url": listener, "api_base": listener, "api_key_env": "HANDOFF_TEST_PRIVATE",
        "api_key": OPENAI_KEY, "headers": {"Authorization": f"Bearer {OPENAI_KEY}"},
        "default_headers": {"X-Forwarded-Host": listener}, "organization": "acme",
        "project": "acme", "proxy": listener, "host": "127.0.0.1", "http_client": listener}
    table = [(adapter, {**config, key: value}, key)
             for adapter, config in base.items() for key, value in offered.items()]
    table += [(adapter, {**base[adapter], "endpoint": listener}, "endpoint")
              for adapter in ("openai", "anthropic", "scripted", "local")]
    table.append(("openai", {"model": "gpt-test", "endpoint": "anthropic"}, "endpoint"))
    table.append(("openai", {"endpoint": "operator", "model": "gpt-4o"}, "model"))
    return table


# -- the ways a run starts, each answering (status, the text a person or program reads) ------

def _api_runs(api: Client, headers: dict[str, str], adapter: str, config: dict[str, Any],
              **_: Any) -> tuple[int, str]:
    response = api.post("/api/runs", content_type="application/json", headers=headers,
                        data={"packet": scripts.packet(), "adapter": {"name": adapter, "config": config}})
    return response.status_code, response.content.decode()


def _api_delegation_runs(api: Client, headers: dict[str, str], adapter: str, config: dict[str, Any],
                         delegation: Delegation, **_: Any) -> tuple[int, str]:
    response = api.post(f"/api/delegations/{delegation.pk}/runs", content_type="application/json",
                        headers=headers, data={"adapter": {"name": adapter, "config": config}})
    return response.status_code, response.content.decode()


def _run_form(page: Client, adapter: str, config: dict[str, Any], **_: Any) -> tuple[int, str]:
    response = page.post("/runs/new/", {"packet": json.dumps(scripts.packet()), "adapter": adapter,
                                          "adapter_config": json.dumps(config)})
    return response.status_code, response.content.decode()


def _dry_run(page: Client, adapter: str, config: dict[str, Any], delegation: Delegation,
             **_: Any) -> tuple[int, str]:
    script = config.pop("script", None) if adapter == "scripted" else None
    data = {f"{DRY_RUN_PREFIX}-adapter": adapter, f"{DRY_RUN_PREFIX}-adapter_config": json.dumps(config)}
    if script is not None:
        data[f"{DRY_RUN_PREFIX}-script"] = json.dumps(script)
    response = page.post(f"/delegations/{delegation.pk}/dry-run/", data)
    return response.status_code, response.content.decode()


def _api_retry(api: Client, headers: dict[str, str], adapter: str, config: dict[str, Any],
               owner: Any, **_: Any) -> tuple[int, str]:
    """A run stored with such a config (as runs were before endpoints) is not retried with it,
    and a finished one keeps its result."""
    done = make_run(owner, state="COMPLETE", label=SEEDED, adapter_name=adapter, adapter_config=config)
    response = api.post(f"/api/runs/{done.pk}/retry", content_type="application/json", headers=headers)
    done.refresh_from_db()
    assert done.state == "COMPLETE"
    return response.status_code, response.content.decode()


def _api_import(api: Client, headers: dict[str, str], adapter: str, config: dict[str, Any],
                owner: Any, **_: Any) -> tuple[int, str]:
    document = run_export(make_run(owner, state="COMPLETE", label=SEEDED))
    document["run"]["adapter"] = document["runs"][0]["adapter"] = {"name": adapter, "config": config}
    response = api.post("/api/runs/import", content_type="application/json", headers=headers, data=document)
    return response.status_code, response.content.decode()


def _cli(adapter: str, config: dict[str, Any], tmp_path: Path, **_: Any) -> tuple[int, str]:
    packet = tmp_path / "packet.json"
    packet.write_text(json.dumps(scripts.packet()))
    try:
        call_command("run_delegation", str(packet), "--adapter", adapter,
                     "--adapter-config", json.dumps(config))
    except CommandError as error:
        return 422 if error.returncode == 2 else 500, str(error)
    return 201, ""


PATHS = {"POST /api/runs": _api_runs, "POST /api/delegations/{id}/runs": _api_delegation_runs,
         "the run form": _run_form, "a dry run": _dry_run, "POST /api/runs/{id}/retry": _api_retry,
         "POST /api/runs/import": _api_import, "manage.py run_delegation": _cli}


@pytest.mark.parametrize("path", PATHS)
def test_no_way_of_starting_a_run_sends_a_key_to_a_host_the_run_names(
        path: str, endpoints: None, listener: Host, provider: Host, composer: Any, tmp_path: Path) -> None:
    page = Client()   # a person's browser
    page.force_login(composer)
    headers = bearer(composer)
    delegation = Delegation.objects.create(name="caching study", packet=scripts.packet(), owner=composer)
    for adapter, config, key in hostile_configs(listener.url):
        if path == "POST /api/runs/import" and key == "model":
            continue  # an imported run is a record: its model ran elsewhere, on no endpoint here
        status, text = PATHS[path](page=page, api=Client(), headers=headers, adapter=adapter, config=dict(config),
                                   delegation=delegation, owner=composer, tmp_path=tmp_path)
        assert status == 422, (path, adapter, key, text[:300])
        assert f"'{key}'" in text or f"&#x27;{key}&#x27;" in text, (path, adapter, key, text[:600])
        offered = json.dumps(config)   # a form shows its sender what they typed, nothing more
        assert not any(secret in text for secret in SECRETS if secret not in offered), (path, adapter, key)
    assert not Run.objects.exclude(label=SEEDED).exists()
    assert listener.requests == [] and provider.requests == []


def test_a_child_runs_on_its_parents_endpoint_whatever_the_model_asks_for(
        endpoints: None, listener: Host, provider: Host, composer: Any, immediate_tasks: None) -> None:
    client = Client()
    response = client.post("/api/runs", content_type="application/json", headers=bearer(composer), data={
        "packet": scripts.packet(), "adapter": {"name": "openai", "config": {
            "endpoint": "operator", "stream": False, "max_retries": 0}}})

    assert response.status_code == 201, response.content
    root = Run.objects.get(pk=response.json()["id"])
    child = Run.objects.get(parent=root)
    assert (root.state, child.state) == ("COMPLETE", "COMPLETE"), (root.error, child.error)
    expected = {"endpoint": "operator", "model": "operator-model", "stream": False, "max_retries": 0}
    assert root.adapter_config == child.adapter_config == expected
    assert len(provider.requests) == 3   # parent, child, parent again: all to the operator's server
    assert {r["headers"].get("authorization") for r in provider.requests} == {f"Bearer {OPENAI_KEY}"}
    assert listener.requests == []


def test_an_operator_endpoint_is_checked_at_start(monkeypatch: Any) -> None:
    from handoff_site import settings as site_settings

    monkeypatch.setenv("HANDOFF_MODEL_ENDPOINTS", json.dumps({"vllm": {"adapter": "openai",
                                                                      "base_url": "10.0.0.5:8000"}}))
    with pytest.raises(Exception, match="HANDOFF_MODEL_ENDPOINTS: endpoint 'vllm': 'base_url'"):
        site_settings._model_endpoints()
    monkeypatch.setenv("HANDOFF_MODEL_ENDPOINTS", json.dumps({"vllm": {
        "adapter": "openai", "base_url": "http://10.0.0.5:8000/v1", "api_key_env": "VLLM_KEY",
        "models": ["qwen", "llama"]}}))
    vllm = site_settings._model_endpoints()["vllm"]
    assert (vllm.base_url, vllm.api_key_env, vllm.models, vllm.model) == (
        "http://10.0.0.5:8000/v1", "VLLM_KEY", ("qwen", "llama"), "qwen")
