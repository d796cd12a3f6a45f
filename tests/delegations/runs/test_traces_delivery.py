"""Traces on the wire and around it: what a real OTLP/HTTP receiver decodes, a collector that
is down, a caller's trace through a real server, the trace context on outgoing model calls,
start-up checks of the OTEL_* variables, and nothing of OpenTelemetry loaded when it is off."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from delegations.models import Run
from delegations.protocol.trace_context import run_span_id
from delegations.runs import traces
from delegations.runs.trace_export import TraceExporter
from delegations.runs.workflows import run_create
from handoff_site import otel_env
from tests.conftest import ROOT, bearer, make_user
from tests.delegations import scripts
from tests.otlp_receiver import Receiver, otlp_receiver
from tests.security.test_endpoints import Host, endpoints, listener, provider  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.django_db(transaction=True)]

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
HONEYCOMB_KEY = "hcaik_planted0123456789abcdef"


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as running:
        yield running


def _start_exporter(settings: Any, monkeypatch: Any, endpoint: str, **variables: str) -> TraceExporter:
    """Tracing on, this process's exporter sending over OTLP/HTTP to ``endpoint`` (the SDK
    reads the OTEL_* variables as it starts)."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    settings.HANDOFF_TRACES_ENABLED = True
    exporter = TraceExporter()
    monkeypatch.setattr(traces, "_exporter", exporter)
    traces.listen()
    return exporter


def test_a_real_collector_receives_the_tree_as_otlp_protobuf(
        receiver: Receiver, settings: Any, monkeypatch: Any, immediate_tasks: None, composer: Any) -> None:
    exporter = _start_exporter(settings, monkeypatch, receiver.url,
                               OTEL_EXPORTER_OTLP_HEADERS=f"x-honeycomb-team={HONEYCOMB_KEY}")
    root = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.with_child(), owner=composer)
    assert root.state == "COMPLETE"
    assert exporter.flush(15)
    exporter.shutdown()

    spans = receiver.wait_for(lambda spans: any(s.trace_id == root.pk for s in spans))
    tree = [span for span in spans if span.trace_id == root.pk]
    names = sorted(span.name.split(" ")[0] if span.name.startswith("chat") else span.name for span in tree)
    assert names == ["chat", "chat", "chat", "execute_tool delegate_task",
                     "invoke_agent researcher", "invoke_agent researcher kid"]
    top = next(span for span in tree if span.name == "invoke_agent researcher")
    assert top.span_id == run_span_id(root.pk) and top.parent_span_id == ""
    assert top.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert top.attributes["handoff.capabilities"] == ()
    assert top.status_code == 1   # STATUS_CODE_OK
    assert top.resource["service.name"] == "handoff"
    assert top.scope == "handoff" and top.schema_url == "https://opentelemetry.io/schemas/1.44.0"
    chat = next(span for span in tree if span.name.startswith("chat"))
    assert chat.kind == 3 and chat.attributes["gen_ai.provider.name"] == "handoff.scripted"   # CLIENT
    assert chat.end_ns > chat.start_ns > 0
    assert receiver.headers[-1]["x-honeycomb-team"] == HONEYCOMB_KEY   # the standard headers variable


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_collector_that_is_down_slows_no_run_and_the_loss_is_counted_and_logged_once(
        settings: Any, monkeypatch: Any, immediate_tasks: None, composer: Any, caplog: Any) -> None:
    exporter = _start_exporter(settings, monkeypatch, f"http://127.0.0.1:{_closed_port()}",
                               OTEL_EXPORTER_OTLP_TIMEOUT="2", OTEL_BSP_MAX_QUEUE_SIZE="4",
                               OTEL_BSP_MAX_EXPORT_BATCH_SIZE="2")
    caplog.set_level(logging.WARNING, logger="handoff.traces")
    started = time.monotonic()
    runs = [run_create(packet=scripts.packet(), adapter="scripted", config=scripts.with_child(), owner=composer)
            for _ in range(3)]
    took = time.monotonic() - started

    assert [run.state for run in runs] == ["COMPLETE"] * 3
    assert took < 2 * 3, f"the runs waited for the collector ({took:.1f} s)"
    exporter.flush(10)
    assert exporter.losses.total >= 3 * 6 - 4   # at most a queue's worth is still waiting
    warnings = [r.getMessage() for r in caplog.records if "Traces not delivered" in r.getMessage()]
    assert len(warnings) == 1, warnings   # once a minute, however many batches failed
    assert "Runs are not affected" in warnings[0]
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry.exporter")]
    exporter.shutdown()


def test_a_model_call_of_a_traced_run_sends_the_runs_traceparent_to_the_provider(
        endpoints: None, provider: Host, composer: Any, immediate_tasks: None, settings: Any,  # noqa: F811
        monkeypatch: Any, receiver: Receiver) -> None:
    exporter = _start_exporter(settings, monkeypatch, receiver.url)
    response = Client().post("/api/runs", content_type="application/json", headers={
        **bearer(composer), "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}, data={
        "packet": scripts.packet(), "adapter": {"name": "openai", "config": {
            "endpoint": "operator", "stream": False, "max_retries": 0}}})

    assert response.status_code == 201, response.content
    root = Run.objects.get(pk=response.json()["id"])
    child = Run.objects.get(parent=root)
    sent = [request["headers"].get("traceparent") for request in provider.requests]
    assert sent == [f"00-{CALLER_TRACE}-{run_span_id(root.pk)}-01",    # the parent, its child, the parent
                    f"00-{CALLER_TRACE}-{run_span_id(child.pk)}-01",
                    f"00-{CALLER_TRACE}-{run_span_id(root.pk)}-01"]
    exporter.shutdown()


def test_an_untraced_run_sends_no_traceparent(endpoints: None, provider: Host, composer: Any,  # noqa: F811
                                              immediate_tasks: None) -> None:
    response = Client().post("/api/runs", content_type="application/json", headers=bearer(composer), data={
        "packet": scripts.packet(), "adapter": {"name": "openai", "config": {
            "endpoint": "operator", "stream": False, "max_retries": 0}}})

    assert response.status_code == 201, response.content
    assert provider.requests and all("traceparent" not in r["headers"] for r in provider.requests)


# -- through a real server ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def live_receiver() -> Iterator[Receiver]:
    with otlp_receiver() as running:
        yield running


@pytest.fixture(scope="module")
def live_server_settings(live_receiver: Receiver) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": live_receiver.url, "OTEL_SERVICE_NAME": "handoff-under-test",
            "OTEL_BSP_SCHEDULE_DELAY": "200"}


def test_a_callers_trace_continues_through_the_server_into_the_run_tree(
        live_url: str, live_receiver: Receiver, django_user_model: Any) -> None:
    carol = make_user(django_user_model, "carol", "composers", password=None)
    started = httpx.post(f"{live_url}/api/runs", headers={**bearer(carol), "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"},
                         json={"packet": scripts.packet(), "adapter": {"name": "scripted", "config": scripts.with_child()}},
                         timeout=30)
    assert started.status_code == 201, started.text
    run_id = started.json()["id"]

    spans = live_receiver.wait_for(lambda spans: sum(s.name.startswith("invoke_agent") for s in spans
                                                     if s.trace_id == CALLER_TRACE) == 2)
    agents = {s.attributes["handoff.run.id"]: s for s in spans if s.name.startswith("invoke_agent")}
    assert agents[run_id].parent_span_id == CALLER_SPAN
    assert agents[run_id].resource["service.name"] == "handoff-under-test"
    page = httpx.get(f"{live_url}/api/runs/{run_id}", headers=bearer(carol), timeout=10).json()
    assert page["state"] == "COMPLETE"


# -- off, and bad settings ----------------------------------------------------------------------

RUN_A_TREE = """
from delegations.protocol.adapters.scripted import ScriptedAdapter
from delegations.protocol.approvals import AutoGate
from delegations.protocol.checkpoints import MemoryCheckpointStore
from delegations.protocol.events import MemorySink
from delegations.protocol.runner import Runner
runner = Runner(sink=MemorySink(), gate=AutoGate(), checkpoints=MemoryCheckpointStore())
adapter = ScriptedAdapter({"script": [{"tool_calls": [{"name": "yield_control", "arguments": {
    "status": "SUCCESS", "output_payload": {"answer": 42}}}]}]})
packet = {"goal": "Answer", "subagent_type": "researcher", "instruction_set": "Answer with JSON.",
          "expected_output_schema": {"answer": "integer"}, "success_criteria": ["JSON is schema-valid"],
          "timeout_s": 30}
outcome = asyncio.run(runner.start(packet, adapter=adapter))
"""
# a server's process: everything it loads (the A2A and MCP SDKs import OpenTelemetry's API
# themselves), then a run tree executed
OFF_PROBE = """
import asyncio, json, sys, django
django.setup()
import handoff_site.asgi
from delegations.runs import traces
""" + RUN_A_TREE + """
loaded = sorted(m for m in sys.modules if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter",
                                                          "delegations.runs.trace_")))
print(json.dumps({"state": str(outcome.state), "loaded": loaded, "enabled": traces.enabled()}))
"""


def _probe(**variables: str) -> dict[str, Any]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    env.update({"DJANGO_SETTINGS_MODULE": "handoff_site.settings", **variables})
    done = subprocess.run([sys.executable, "-c", OFF_PROBE], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_with_no_collector_named_nothing_of_the_sdk_or_the_exporter_is_loaded() -> None:
    report = _probe()
    assert report["state"] == "COMPLETE" and report["enabled"] is False
    assert report["loaded"] == []


def test_with_a_collector_named_the_exporter_loads_with_the_process() -> None:
    report = _probe(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318")
    assert report["enabled"] is True and "delegations.runs.trace_export" in report["loaded"]
    assert "opentelemetry.exporter.otlp.proto.http.trace_exporter" in report["loaded"]


def test_the_runner_executing_a_tree_imports_no_opentelemetry_at_all() -> None:
    code = "import asyncio, sys\n" + RUN_A_TREE + (
        "assert str(outcome.state) == 'COMPLETE', outcome\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(("variables", "named"), [
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "ftp://collector/v1/traces"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
    ({"OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER"),
    ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, "OTEL_TRACES_SAMPLER_ARG"),
    ({"OTEL_EXPORTER_OTLP_HEADERS": f"api-key {HONEYCOMB_KEY}"}, "OTEL_EXPORTER_OTLP_HEADERS"),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
    ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
    ({"OTEL_BSP_MAX_QUEUE_SIZE": "10", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "20"}, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"),
])
def test_a_wrong_otel_variable_stops_start_up_naming_it_and_never_repeating_a_header_value(
        variables: dict[str, str], named: str) -> None:
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", **variables}
    with pytest.raises(ImproperlyConfigured, match=named) as refused:
        otel_env.check(environ)
    assert HONEYCOMB_KEY not in str(refused.value)


def test_the_server_does_not_start_with_a_wrong_otel_variable() -> None:
    env = {**{n: v for n, v in os.environ.items() if not n.startswith("OTEL_")},
           "DJANGO_SETTINGS_MODULE": "handoff_site.settings",
           "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_SAMPLER": "sometimes"}
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0 and "OTEL_TRACES_SAMPLER='sometimes'" in done.stderr


def test_content_capture_is_off_unless_switched_on_and_a_wrong_value_is_refused() -> None:
    assert otel_env.capture_content({}) is False
    assert otel_env.capture_content({"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "True"}) is True
    assert otel_env.capture_content({"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY"}) is True
    with pytest.raises(ImproperlyConfigured, match="OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"):
        otel_env.capture_content({"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "yes please"})


def test_tracing_is_off_without_a_collector_or_when_switched_off_the_standard_ways() -> None:
    on = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert otel_env.traces_enabled(on)
    assert not otel_env.traces_enabled({})
    assert not otel_env.traces_enabled({**on, "OTEL_SDK_DISABLED": "true"})
    assert not otel_env.traces_enabled({**on, "OTEL_TRACES_EXPORTER": "none"})


def test_the_trace_url_template_must_name_the_trace_id() -> None:
    assert otel_env.trace_url_template({"HANDOFF_TRACE_URL_TEMPLATE": "http://127.0.0.1:16686/trace/{trace_id}"})
    with pytest.raises(ImproperlyConfigured, match="HANDOFF_TRACE_URL_TEMPLATE"):
        otel_env.trace_url_template({"HANDOFF_TRACE_URL_TEMPLATE": "http://127.0.0.1:16686/trace/{run}"})
