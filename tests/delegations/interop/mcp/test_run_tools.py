"""The run tools of Handoff's MCP server, called in process through /mcp."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from delegations.models import Run, RunMessage
from delegations.protocol.text_limits import MAX_MESSAGE_CHARS
from delegations.runs.workflows import run_create
from tests.delegations import scripts

pytestmark = pytest.mark.django_db


def call_tool(token_headers: dict[str, str], name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The ``result`` of one tools/call, as an MCP client receives it."""
    headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": name,
               "Accept": "application/json, text/event-stream", **token_headers}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": name, "arguments": arguments,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}}
    response = Client().post("/mcp", json.dumps(body), content_type="application/json", headers=headers)
    assert response.status_code == 200
    result: dict[str, Any] = response.json()["result"]
    return result


@pytest.fixture
def waiting_run(composer: Any, queued_tasks: None) -> Run:
    return run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(), owner=composer)


def test_a_message_past_the_limit_is_refused_naming_it_not_cut(composer_api: dict[str, str],
                                                               waiting_run: Run) -> None:
    result = call_tool(composer_api, "send_message",
                       {"run_id": waiting_run.pk, "text": "x" * (MAX_MESSAGE_CHARS + 1)})
    assert result["isError"]
    assert f"at most {MAX_MESSAGE_CHARS:,} characters" in result["content"][0]["text"]
    assert not RunMessage.objects.exists()


def test_a_message_to_a_run_that_ended_is_refused(composer_api: dict[str, str], waiting_run: Run) -> None:
    Run.objects.filter(pk=waiting_run.pk).update(state="CANCELLED")
    result = call_tool(composer_api, "send_message", {"run_id": waiting_run.pk, "text": "Hello?"})
    assert result["isError"] and "already ended (CANCELLED)" in result["content"][0]["text"]
    assert not RunMessage.objects.exists()
