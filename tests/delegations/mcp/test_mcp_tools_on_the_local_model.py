"""End to end on the default local model: a run started the way the site starts one, with
an MCP server configured, is offered the server's tool through the real model's
constrained decoding (the server's own input schema, not one of ours) and completes with
a schema-valid result; whatever the model calls reaches the server once, under the rules.

gemma3-270m answers this task without calling the tool in every try so far (it invents a
price): what is pinned here is what must hold whichever it does, not its choice."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from mcp.server.mcpserver import MCPServer

from delegations.models import McpServer, RunEvent
from delegations.protocol.adapters.local import LocalAdapter
from delegations.runs.workflows import run_create
from tests.protocol.mcp_servers import Running, Seen, served

pytestmark = [pytest.mark.local_model, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PRICE_TOOL = "mcp__shop__price"
OUTPUT = {"type": "object", "properties": {"price": {"type": "number"}, "currency": {"type": "string"}},
          "required": ["price", "currency"]}
PACKET = {
    "goal": "Look up the current price of the product with SKU LAMP-7 in the shop and report "
            "its price and currency.",
    "instruction_set": "You do not know the price yet. Call mcp__shop__price with the sku from "
                       "the input data, then hand back the price and currency it reported.",
    "subagent_type": "researcher",
    "input_data": {"sku": "LAMP-7"},
    "expected_output_schema": OUTPUT,
    "success_criteria": ["JSON is schema-valid"],
    "capabilities": ["search"],
    "max_depth": 0,
    "timeout_s": 300,
    "budget": {"max_model_calls": 4},
}


@pytest.fixture
def default_model() -> None:
    from delegations.protocol.adapters.local_models import DEFAULT_LOCAL_MODEL
    from tests.protocol.conftest import local_model_or_skip

    local_model_or_skip(DEFAULT_LOCAL_MODEL)


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
def shop(seen: Seen) -> Iterator[Running]:
    server = MCPServer("shop")

    @server.tool()
    def price(sku: str) -> str:
        """The current price of a product in the shop, by its SKU."""
        seen.calls.append(("price", {"sku": sku}))
        return "LAMP-7 costs 24.50 EUR today." if sku.strip().upper() == "LAMP-7" else f"No product {sku}."

    with served(server, seen) as running:
        McpServer.objects.create(name="shop", url=running.url, allowed_tools=["price"],
                                 tool_capabilities={"price": "search"})
        yield running


def test_a_run_on_the_default_local_model_is_offered_the_mcp_tool_and_completes(
        immediate_tasks: None, composer: Any, default_model: None, shop: Running, seen: Seen,
        monkeypatch: pytest.MonkeyPatch) -> None:
    offered: list[list[str]] = []
    complete = LocalAdapter.complete

    async def noting_the_tools(self: LocalAdapter, messages: Any, tools: Any, **options: Any) -> Any:
        offered.append([tool["name"] for tool in tools])
        return await complete(self, messages, tools, **options)

    monkeypatch.setattr(LocalAdapter, "complete", noting_the_tools)
    run = run_create(packet=PACKET, adapter="local", config={}, owner=composer)

    assert run.state == "COMPLETE", run.error
    assert run.result is not None
    jsonschema.validate(run.result["output_payload"], OUTPUT)
    assert PRICE_TOOL in offered[0]
    assert "tools/list" in seen.methods
    events = list(RunEvent.objects.filter(run=run).order_by("seq"))
    asked = [e.data for e in events if e.type == "tool_call" and e.data["name"] == PRICE_TOOL]
    assert [("price", call["arguments"]) for call in asked] == seen.calls
    answered = {e.data["id"]: e.data for e in events if e.type == "tool_result"}
    assert all(answered[call["id"]]["ok"] for call in asked)
