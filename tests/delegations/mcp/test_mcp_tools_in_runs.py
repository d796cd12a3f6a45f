"""A run started the way the site starts one (run_create, the worker's execution) uses the
tools of an McpServer record: the call parks on the inbox for network_outbound, an
approver's decision lets it through, and the server's secret reaches the server as a
Bearer header but no event, page, export or log line."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.urls import reverse

from delegations.inbox.decisions import approval_decide
from delegations.models import Approval, McpServer, RunEvent
from delegations.protocol.trace_context import run_span_id
from delegations.runs.export import run_export
from delegations.runs.workflows import run_create
from tests.delegations import scripts
from tests.protocol.mcp_servers import Running, Seen, served, weather_server

pytestmark = [pytest.mark.django_db(transaction=True)]

SECRET = "mcp-secret-for-the-weather-0a1b2c3d"


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
def weather(seen: Seen, monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    monkeypatch.setenv("HANDOFF_MCP_SECRET_WEATHER", SECRET)
    with served(weather_server(seen), seen) as running:
        McpServer.objects.create(name="weather", url=running.url, secret_env="HANDOFF_MCP_SECRET_WEATHER",
                                 allowed_tools=["forecast", "whoami"])
        yield running


def calls(*tool_calls: dict[str, Any]) -> dict[str, Any]:
    return {"script": [{"text": "Asking the weather service.", "tool_calls": list(tool_calls)},
                       scripts.yield_turn()]}


def test_an_mcp_call_waits_for_an_approver_then_reaches_the_server_with_its_secret(
        immediate_tasks: None, composer: Any, approver: Any, weather: Running, seen: Seen,
        client: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    run = run_create(packet=scripts.packet(capabilities=["network_outbound"]), adapter="scripted",
                     config=calls({"name": "mcp__weather__whoami", "arguments": {}}), owner=composer)
    assert run.state == "AWAITING_APPROVAL"
    approval = Approval.objects.get(run=run)
    assert approval.payload["tool"] == "mcp__weather__whoami"
    assert seen.calls == []
    approval_decide(approval=approval, user=approver, decision="approve")
    run.refresh_from_db()
    assert run.state == "COMPLETE"
    assert seen.calls == [("whoami", {})]
    assert f"Bearer {SECRET}" in seen.authorization
    [result] = [e.data for e in RunEvent.objects.filter(run=run, type="tool_result")]
    assert result["ok"] and "[redacted]" in result["result"]["content"][0]["text"]
    stored = json.dumps([e.data for e in RunEvent.objects.filter(run__in=[run])])
    assert SECRET not in stored
    client.force_login(composer)
    page = client.get(reverse("delegations:run_detail", args=[run.pk]))
    assert page.status_code == 200 and "mcp__weather__whoami" in page.content.decode()
    assert SECRET not in page.content.decode()
    assert SECRET not in json.dumps(run_export(run), default=str)
    assert SECRET not in caplog.text


def test_a_run_without_network_outbound_is_refused_the_mcp_tool(
        immediate_tasks: None, composer: Any, weather: Running, seen: Seen) -> None:
    run = run_create(packet=scripts.packet(), adapter="scripted",
                     config=calls({"name": "mcp__weather__forecast", "arguments": {"city": "Oslo"}}),
                     owner=composer)
    assert run.state == "COMPLETE"
    [result] = [e.data for e in RunEvent.objects.filter(run=run, type="tool_result")]
    assert result["error"]["code"] == "ERR_CONSTRAINT_VIOLATION"
    assert seen.calls == [] and not Approval.objects.filter(run=run).exists()


def test_a_disabled_server_offers_nothing(immediate_tasks: None, composer: Any, weather: Running,
                                          seen: Seen) -> None:
    McpServer.objects.update(enabled=False)
    run = run_create(packet=scripts.packet(capabilities=["network_outbound"]), adapter="scripted",
                     config=calls({"name": "mcp__weather__forecast", "arguments": {"city": "Oslo"}}),
                     owner=composer)
    [result] = [e.data for e in RunEvent.objects.filter(run=run, type="tool_result")]
    assert "There is no tool 'mcp__weather__forecast'" in result["error"]["message"]
    assert seen.methods == []


def test_an_mcp_call_of_a_traced_run_carries_the_runs_trace_context_in_its_meta(
        immediate_tasks: None, composer: Any, approver: Any, weather: Running, seen: Seen) -> None:
    caller = "00-7bf92f3577b34da6a3ce929d0e0e4736-30f067aa0ba902b7-01"
    run = run_create(packet=scripts.packet(capabilities=["network_outbound"]), adapter="scripted",
                     config=calls({"name": "mcp__weather__forecast", "arguments": {"city": "Oslo"}}),
                     owner=composer, traceparent=caller)
    approval_decide(approval=Approval.objects.get(run=run), user=approver, decision="approve")

    assert seen.calls == [("forecast", {"city": "Oslo"})]
    assert seen.traceparents == [f"00-7bf92f3577b34da6a3ce929d0e0e4736-{run_span_id(run.pk)}-01"]
