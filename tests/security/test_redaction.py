"""Redaction at the boundary: a secret a model or a tool repeats is replaced before anything
is stored, so no event, result, checkpoint, export, trace, page, admin page, websocket frame
or log line holds it."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.test import Client, override_settings
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from delegations.live.routing import websocket_urlpatterns
from delegations.models import ImportedRun, Run, RunCheckpoint, RunCheckpointPart, RunEvent
from delegations.protocol.adapters.endpoints import ModelEndpoint
from delegations.protocol.redaction import REDACTED, Redactor
from delegations.runs.database_thread import DatabaseThread
from delegations.runs.export import run_export, run_import
from delegations.runs.redaction import SecretsLogFilter
from delegations.runs.sink import DjangoEventSink
from delegations.runs.trace_export import TraceExporter
from tests.conftest import bearer
from tests.delegations import scripts
from tests.delegations.runs.test_run_pages import make_run
from tests.security.test_endpoints import Host, completion, serve

pytestmark = [pytest.mark.django_db(transaction=True)]

API_KEY = "sk-planted-redaction-0123456789abcdef"
TOKEN = "acme-token-fedcba9876543210"


@pytest.fixture
def planted(monkeypatch: Any, settings: Any) -> tuple[str, ...]:
    """The secrets of this installation: an endpoint's key, one more the operator names,
    and the signing key."""
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("ACME_TOKEN", TOKEN)
    settings.HANDOFF_SECRET_ENV_VARS = ["ACME_TOKEN"]
    return API_KEY, TOKEN, settings.SECRET_KEY


@pytest.fixture
def chatty_provider(planted: tuple[str, ...], settings: Any) -> Iterator[Host]:
    """The operator's OpenAI-compatible server, whose model repeats the key it was sent,
    and the other secrets, in its text and its answer."""

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        key = request["headers"]["authorization"].removeprefix("Bearer ")
        says = f"You sent me {key}; I also know {planted[1]} and {planted[2]}."
        reply = completion("yield_control", {"status": "SUCCESS", "output_payload": {"answer": 42},
                                             "log_summary": says})
        reply["choices"][0]["message"]["content"] = says
        return reply

    for host in serve(answer):
        settings.HANDOFF_MODEL_ENDPOINTS = {**settings.HANDOFF_MODEL_ENDPOINTS, "chatty": ModelEndpoint(
            "chatty", "openai", host.url, "OPENAI_API_KEY")}
        yield host


def _repeating(says: str) -> dict[str, Any]:
    """A coordinator whose model says the secrets, reads a file named after one (the tool's
    error repeats it), delegates to a child that says them too, and answers with them."""
    answer = {"text": says, "tool_calls": [{"name": "yield_control", "arguments": {
        "status": "SUCCESS", "output_payload": {"answer": 42}, "log_summary": says}}]}
    return {"script": [
        {"text": says, "tool_calls": [{"name": "read_file", "arguments": {"path": f"notes-{API_KEY}.txt"}}]},
        scripts.delegate_turn("kid"), answer],
        "children": {"kid": {"script": [answer]}}}


async def _frames(user: Any, run_id: str) -> list[str]:
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), f"/ws/runs/{run_id}/")
    communicator.scope["user"] = user
    connected, _ = await communicator.connect()
    assert connected
    frames = []
    while True:
        frame = await communicator.receive_from(timeout=5)
        frames.append(frame)
        if json.loads(frame).get("type") == "synced":
            break
    await communicator.disconnect()
    return frames


def _everything_about(root: Run, viewer: Any, admin_user: Any, caplog: Any) -> dict[str, str]:
    """What is stored of a run tree, and every page, API answer and frame that shows it."""
    owner, admin, api = Client(), Client(), bearer(viewer)
    owner.force_login(viewer)
    admin.force_login(admin_user)
    tree = [root.pk, *Run.objects.filter(root_id=root.pk).exclude(pk=root.pk).values_list("pk", flat=True)]
    seen = {
        "events": json.dumps(list(RunEvent.objects.filter(run__in=tree).values("type", "data"))),
        "run rows": json.dumps(list(Run.objects.filter(pk__in=tree).values(
            "result", "error", "packet", "adapter_config")), default=str),
        "checkpoints": json.dumps(list(RunCheckpoint.objects.filter(run__in=tree).values("data")))
        + json.dumps(list(RunCheckpointPart.objects.filter(run__in=tree).values("data"))),
        "websocket": "\n".join(async_to_sync(_frames)(viewer, root.pk)),
        "logs": "\n".join(record.getMessage() for record in caplog.records),
    }
    seen["trace"] = _trace_of(root)
    export = owner.get(f"/api/runs/{root.pk}/export", headers=api)
    seen["export"] = b"".join(export.streaming_content).decode()  # type: ignore[attr-defined]
    pages = [f"/runs/{root.pk}/replay/", "/runs/", f"/api/runs/{root.pk}/tree"]
    for run_id in tree:
        pages += [f"/runs/{run_id}/", f"/api/runs/{run_id}", f"/api/runs/{run_id}/events"]
    for path in pages:
        response = owner.get(path, headers=api if path.startswith("/api/") else {})
        assert response.status_code == 200, path
        seen[path] = response.content.decode()
    admin_pages = ["/admin/delegations/run/", f"/admin/delegations/runevent/?run__id__exact={root.pk}"]
    for path in admin_pages + [f"/admin/delegations/run/{run_id}/change/" for run_id in tree]:
        response = admin.get(path)
        assert response.status_code == 200, path
        seen[path] = response.content.decode()
    return seen


def _trace_of(root: Run) -> str:
    """Everything the trace exporter would send of the tree, prompts and outputs included
    (content capture on), as text."""
    with override_settings(HANDOFF_TRACE_CAPTURE_CONTENT=True):
        memory = InMemorySpanExporter()
        exporter = TraceExporter(span_exporter=memory)
        assert exporter.export_now(root.pk) > 0
        assert exporter.flush(10)
        exporter.shutdown()
    return json.dumps([{"name": span.name, "attributes": dict(span.attributes or {}),
                        "status": span.status.description,
                        "events": [dict(event.attributes or {}) for event in span.events]}
                       for span in memory.get_finished_spans()], default=str)


def _leaks(seen: dict[str, str], secrets: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(where, secret[:8]) for where, text in seen.items() for secret in secrets if secret in text]


def test_a_secret_a_scripted_model_or_a_tool_repeats_is_stored_and_shown_nowhere(
        planted: tuple[str, ...], composer: Any, admin_user: Any, immediate_tasks: None,
        workspaces: None, caplog: Any) -> None:
    key, token, signing_key = planted
    says = f"The key is {key}; the token {token}; the signing key {signing_key}."
    started = Client().post("/api/runs", content_type="application/json", headers=bearer(composer), data={
        "packet": scripts.packet(capabilities=["fs_read"]),
        "adapter": {"name": "scripted", "config": _repeating(says)}})

    assert started.status_code == 201, started.content
    root = Run.objects.get(pk=started.json()["id"])
    assert root.state == "COMPLETE" and Run.objects.get(parent=root).state == "COMPLETE", root.error
    seen = _everything_about(root, composer, admin_user, caplog)
    assert "notes-[redacted].txt" in seen["events"] and "The key is [redacted]" in seen["events"]
    assert "The key is [redacted]" in seen["trace"]   # the trace carried the content, redacted
    assert _leaks(seen, planted) == []


def test_a_key_the_providers_model_repeats_is_stored_and_shown_nowhere(
        planted: tuple[str, ...], chatty_provider: Host, composer: Any, admin_user: Any,
        immediate_tasks: None, caplog: Any) -> None:
    started = Client().post("/api/runs", content_type="application/json", headers=bearer(composer), data={
        "packet": scripts.packet(), "adapter": {"name": "openai", "config": {
            "endpoint": "chatty", "model": "m", "stream": False}}})

    assert started.status_code == 201, started.content
    root = Run.objects.get(pk=started.json()["id"])
    assert root.state == "COMPLETE", root.error
    assert chatty_provider.requests   # it was sent the key, and said it back
    seen = _everything_about(root, composer, admin_user, caplog)
    assert "You sent me [redacted]; I also know [redacted] and [redacted]." in seen["events"]
    assert _leaks(seen, planted) == []


def test_an_imported_run_holding_a_secret_is_stored_redacted(planted: tuple[str, ...], composer: Any) -> None:
    document = run_export(make_run(composer, state="COMPLETE", label=f"about {API_KEY}"))
    document["events"].append({"run_id": document["run"]["id"], "seq": 1, "type": "text",
                               "ts": 1.0, "data": {"delta": f"the key {API_KEY}"}})
    document["run"]["last_seq"] = document["runs"][0]["last_seq"] = 1

    imported = run_import(source=document, owner=composer)

    stored = json.dumps(ImportedRun.objects.filter(pk=imported.pk).values("label", "document")[0])
    assert API_KEY not in stored and "the key [redacted]" in stored


async def _stream(sink: DjangoEventSink, run_id: str, deltas: list[str]) -> None:
    for delta in deltas:
        await sink.emit(run_id, "text", {"delta": delta})
        await asyncio.sleep(0.08)   # longer than the sink's coalescing: each is stored alone
    await sink.emit(run_id, "model_call", {"iteration": 1})
    await sink.aclose()


def test_a_secret_streamed_in_pieces_is_never_stored_in_pieces(planted: tuple[str, ...],
                                                               composer: Any) -> None:
    run = make_run(composer, state="WORKING")
    text = f"Here it is: {API_KEY} and that is all"
    deltas = [text[i:i + 5] for i in range(0, len(text), 5)]
    db = DatabaseThread()
    try:
        asyncio.run(_stream(DjangoEventSink(db), run.pk, deltas))
    finally:
        db.close()
    stored = [e.data["delta"] for e in RunEvent.objects.filter(run=run, type="text").order_by("seq")]
    assert len(stored) > 3                                     # it was streamed, not held whole
    assert "".join(stored) == "Here it is: [redacted] and that is all"
    assert not any(API_KEY[:5] in delta for delta in stored)   # no piece of the key either


def test_a_log_line_is_written_redacted(planted: tuple[str, ...]) -> None:
    record = logging.LogRecord("delegations", logging.WARNING, __file__, 1,
                               "provider said %s", (f"bad key {API_KEY}",), None)

    assert SecretsLogFilter().filter(record)
    assert record.getMessage() == "provider said bad key [redacted]"


def test_the_redactor_replaces_secrets_at_any_depth_and_leaves_short_values() -> None:
    redactor = Redactor([API_KEY, "short", None])

    assert redactor.value({"a": [f"x{API_KEY}y", 3], API_KEY: None, "b": "short"}) == {
        "a": ["x[redacted]y", 3], REDACTED: None, "b": "short"}
    assert redactor.in_json(json.dumps({"k": API_KEY})) and not redactor.in_json('{"k": "short"}')
    assert redactor.stream("it is sk-plan") == ("it is ", "sk-plan")


def test_the_trace_collectors_header_value_is_a_secret_as_well(settings: Any, composer: Any) -> None:
    collector_key = "hcaik_planted-collector-key-0123456789"
    settings.HANDOFF_OTLP_HEADER_SECRETS = [collector_key]
    run = make_run(composer, state="WORKING")
    db = DatabaseThread()
    try:
        asyncio.run(_stream(DjangoEventSink(db), run.pk, [f"the collector key is {collector_key}"]))
    finally:
        db.close()
    stored = "".join(e.data["delta"] for e in RunEvent.objects.filter(run=run, type="text"))
    assert stored == "the collector key is [redacted]"
