"""A run uses the tools of MCP servers (built with the official SDK, on loopback) within its
capabilities: offered and called when its token covers them, refused when not, parked when
a person must approve, and every failure of a server an ERR_TOOL_FAILURE naming the server
and the tool while the run goes on."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from mcp.server.mcpserver import MCPServer

from delegations.protocol.adapters.scripted import ScriptedAdapter
from delegations.protocol.approvals import ApprovalDecision, AutoGate, Decision
from delegations.protocol.checkpoints import MemoryCheckpointStore
from delegations.protocol.errors import ProtocolError
from delegations.protocol.events import MemorySink
from delegations.protocol.lifecycle import RunState
from delegations.protocol.mcp_client import McpServerConfig, McpTools
from delegations.protocol.runner import Runner, RunnerSettings, RunOutcome
from tests.services import http_on_loopback

from .conftest import ParkingGate, call_turn, root_packet, yield_turn
from .mcp_servers import Running, Seen, free_port_url, served, weather_server

SECRET = "mcp-test-secret-7f3a9c01"
FORECAST = "mcp__weather__forecast"


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
def weather(seen: Seen) -> Iterator[Running]:
    with served(weather_server(seen), seen) as running:
        yield running


def config(url: str, *, capability: str = "search", **extra: Any) -> McpServerConfig:
    tools = tuple((name, capability) for name in ("forecast", "whoami", "slow", "big", "broken"))
    return McpServerConfig(name="weather", url=url, tools=tools, **extra)


def mcp_runner(sink: MemorySink, settings: RunnerSettings, *servers: McpServerConfig,
               gate: Any = None, result_max_bytes: int = 65536,
               environ: dict[str, str] | None = None) -> Runner:
    tools = McpTools(servers, result_max_bytes=result_max_bytes, environ=environ or {})
    return Runner(sink=sink, gate=gate or AutoGate(), checkpoints=MemoryCheckpointStore(),
                  settings=settings, mcp=tools)


async def run_script(runner: Runner, turns: list[dict[str, Any]], capabilities: list[str],
                     workspace: Path, **packet: Any) -> tuple[RunOutcome, ScriptedAdapter]:
    adapter = ScriptedAdapter({"script": [*turns, yield_turn()]})
    outcome = await runner.start(root_packet(capabilities=capabilities, **packet), adapter=adapter,
                                 workspace=workspace)
    return outcome, adapter


def results(sink: MemorySink, run_id: str) -> list[dict[str, Any]]:
    return [event.data for event in sink.of_run(run_id) if event.type == "tool_result"]


def offered(adapter: ScriptedAdapter) -> list[str]:
    return [tool["name"] for tool in adapter.received_tools[0]]


async def test_a_run_calls_an_mcp_tool_its_capabilities_cover(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, weather: Running, seen: Seen) -> None:
    runner = mcp_runner(sink, settings, config(weather.url))
    outcome, adapter = await run_script(runner, [call_turn(FORECAST, {"city": "Oslo"})], ["search"], workspace)
    assert outcome.state is RunState.COMPLETE
    assert FORECAST in offered(adapter)
    schema = next(tool for tool in adapter.received_tools[0] if tool["name"] == FORECAST)
    assert schema["parameters"]["properties"]["city"]["type"] == "string"
    assert "weather" in schema["description"]
    [call] = [e.data for e in sink.of_run(outcome.run_id) if e.type == "tool_call"]
    assert call["name"] == FORECAST and call["arguments"] == {"city": "Oslo"}
    [result] = results(sink, outcome.run_id)
    assert result["ok"], result
    assert result["result"]["content"] == [{"type": "text", "text": "Sunny and 21 C in Oslo tomorrow."}]
    assert seen.calls == [("forecast", {"city": "Oslo"})]
    # the call adopts how the listing connected: the server is not asked what it speaks again
    assert seen.methods.count("server/discover") == 1 and "tools/call" in seen.methods


async def test_a_run_without_the_tools_capability_is_not_offered_it_and_its_call_is_refused(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, weather: Running, seen: Seen) -> None:
    runner = mcp_runner(sink, settings, config(weather.url))
    outcome, adapter = await run_script(runner, [call_turn(FORECAST, {"city": "Oslo"})], ["fs_read"], workspace)
    assert not [name for name in offered(adapter) if name.startswith("mcp__")]
    [result] = results(sink, outcome.run_id)
    assert result["error"]["code"] == "ERR_CONSTRAINT_VIOLATION"
    assert seen.calls == []
    assert outcome.state is RunState.COMPLETE


async def test_a_child_may_use_only_the_mcp_tools_of_its_narrowed_capabilities(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, weather: Running, seen: Seen) -> None:
    servers = McpServerConfig(name="weather", url=weather.url,
                              tools=(("forecast", "search"), ("whoami", "compute")))
    runner = mcp_runner(sink, settings, servers)
    child = {"label": "reader", "subagent_type": "researcher", "capabilities": ["compute"],
             "instruction_set": "Hand back.", "input_data": {}}
    child_script = [{"tool_calls": [{"name": FORECAST, "arguments": {"city": "Oslo"}},
                                    {"name": "mcp__weather__whoami", "arguments": {}}]}, yield_turn()]
    adapter = ScriptedAdapter({"script": [call_turn("delegate_task", child), yield_turn()],
                               "children": {"reader": {"script": child_script}}})
    outcome = await runner.start(root_packet(capabilities=["search", "compute"]), adapter=adapter,
                                 workspace=workspace)
    assert {FORECAST, "mcp__weather__whoami"} <= set(offered(adapter))
    [child_run] = [e.run_id for e in sink.events if e.run_id != outcome.run_id and e.type == "tool_result"][:1]
    refused, allowed = results(sink, child_run)
    assert refused["error"]["code"] == "ERR_CONSTRAINT_VIOLATION"
    assert allowed["ok"]
    assert [name for name, _ in seen.calls] == ["whoami"]


async def test_an_approval_required_capability_parks_the_call_until_a_person_approves(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, weather: Running, seen: Seen) -> None:
    gate = ParkingGate()
    runner = mcp_runner(sink, settings, config(weather.url, capability="network_outbound"), gate=gate)
    parked, _ = await run_script(runner, [call_turn(FORECAST, {"city": "Lima"})], ["network_outbound"], workspace)
    assert parked.state is RunState.AWAITING_APPROVAL
    [asked] = gate.asked
    assert asked.payload["tool"] == FORECAST and asked.payload["arguments"] == {"city": "Lima"}
    assert seen.calls == []
    gate.decide_key(asked.key, ApprovalDecision(Decision.APPROVE, decided_by="ana"))
    done = await runner.resume(parked.run_id)
    assert done.state is RunState.COMPLETE
    assert seen.calls == [("forecast", {"city": "Lima"})]
    assert results(sink, parked.run_id)[-1]["ok"]


async def test_a_server_that_is_down_fails_the_call_naming_server_and_tool_and_the_run_goes_on(
        sink: MemorySink, settings: RunnerSettings, workspace: Path) -> None:
    runner = mcp_runner(sink, settings, config(free_port_url()))
    outcome, adapter = await run_script(runner, [call_turn(FORECAST, {"city": "Oslo"})], ["search"], workspace)
    assert outcome.state is RunState.COMPLETE
    assert FORECAST not in offered(adapter)
    warnings = [e.data["message"] for e in sink.of_run(outcome.run_id) if e.type == "log"]
    assert any("MCP server 'weather'" in message and "could not be listed" in message for message in warnings)
    [result] = results(sink, outcome.run_id)
    assert result["error"]["code"] == "ERR_TOOL_FAILURE"
    assert "'forecast' of server 'weather'" in result["error"]["message"]


async def test_a_server_that_stops_after_listing_fails_the_call_cleanly(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, seen: Seen) -> None:
    with served(weather_server(seen), seen) as running:
        tools = McpTools([config(running.url)], result_max_bytes=65536, environ={})
        await tools.refresh()
        running.stop()
        forecast = tools.get(FORECAST)
        assert forecast is not None
        with pytest.raises(ProtocolError) as caught:
            await forecast.run(None, {"city": "Oslo"})  # type: ignore[arg-type]
    assert caught.value.code == "ERR_TOOL_FAILURE"
    assert "'forecast' of server 'weather'" in caught.value.message


class Garbage(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = b"<html>Welcome to the weather portal</html>"
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


async def test_a_server_that_answers_garbage_fails_cleanly(
        sink: MemorySink, settings: RunnerSettings, workspace: Path) -> None:
    with http_on_loopback(Garbage) as base:
        runner = mcp_runner(sink, settings, config(base + "/mcp"))
        outcome, _ = await run_script(runner, [call_turn(FORECAST, {"city": "Oslo"})], ["search"], workspace)
    assert outcome.state is RunState.COMPLETE
    [result] = results(sink, outcome.run_id)
    assert result["error"]["code"] == "ERR_TOOL_FAILURE"
    assert "server 'weather'" in result["error"]["message"]


@pytest.mark.parametrize(("turn", "said"), [
    (call_turn("mcp__weather__slow", {"seconds": 5}), "no answer within 1 s"),
    (call_turn("mcp__weather__big", {"size": 5000}), "over the limit of 2000 bytes"),
    (call_turn("mcp__weather__broken", {}), "the weather station is offline"),
])
async def test_a_slow_oversized_or_failing_tool_is_a_tool_failure_and_the_run_goes_on(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, weather: Running,
        turn: dict[str, Any], said: str) -> None:
    runner = mcp_runner(sink, settings, config(weather.url, timeout_s=1.0), result_max_bytes=2000)
    outcome, _ = await run_script(runner, [turn], ["search"], workspace)
    assert outcome.state is RunState.COMPLETE
    [result] = results(sink, outcome.run_id)
    assert result["error"]["code"] == "ERR_TOOL_FAILURE"
    assert said in result["error"]["message"]
    assert result["error"]["details"]["mcp_server"] == "weather"


async def test_a_tool_hanging_past_the_runs_timeout_ends_the_run_with_the_reason(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, weather: Running) -> None:
    runner = mcp_runner(sink, settings, config(weather.url, timeout_s=30.0))
    outcome, _ = await run_script(runner, [call_turn("mcp__weather__slow", {"seconds": 20})], ["search"],
                                  workspace, timeout_s=1.5)
    assert outcome.state is RunState.TIMEOUT
    assert outcome.error is not None and "hard timeout of 1.5 s" in outcome.error["message"]


async def test_the_secret_goes_out_as_a_bearer_header_and_never_into_an_event(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, weather: Running, seen: Seen) -> None:
    server = config(weather.url, secret_env="HANDOFF_MCP_SECRET_WEATHER")
    runner = mcp_runner(sink, settings, server, environ={"HANDOFF_MCP_SECRET_WEATHER": SECRET})
    outcome, _ = await run_script(runner, [call_turn("mcp__weather__whoami", {})], ["search"], workspace)
    assert f"Bearer {SECRET}" in seen.authorization
    [result] = results(sink, outcome.run_id)
    assert result["ok"] and "[redacted]" in result["result"]["content"][0]["text"]
    assert SECRET not in json.dumps([event.data for event in sink.events])


async def test_a_secret_variable_that_is_not_set_fails_the_call_without_asking_the_server(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, weather: Running, seen: Seen) -> None:
    runner = mcp_runner(sink, settings, config(weather.url, secret_env="HANDOFF_MCP_SECRET_WEATHER"))
    outcome, _ = await run_script(runner, [call_turn(FORECAST, {"city": "Oslo"})], ["search"], workspace)
    [result] = results(sink, outcome.run_id)
    assert "HANDOFF_MCP_SECRET_WEATHER, which is not set" in result["error"]["message"]
    assert seen.methods == []


async def test_tool_lists_are_reused_briefly_across_runs(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, weather: Running, seen: Seen) -> None:
    server = config(weather.url)
    for _ in range(2):
        runner = mcp_runner(sink, settings, server)
        _outcome, adapter = await run_script(runner, [], ["search"], workspace)
        assert FORECAST in offered(adapter)
    assert seen.methods.count("tools/list") == 1


STDIO_SERVER = textwrap.dedent('''
    import os
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("clock")

    @server.tool()
    def secret_length() -> str:
        """How long the secret this server was started with is."""
        return f"{len(os.environ.get('HANDOFF_MCP_SECRET_CLOCK', ''))} characters"

    server.run("stdio")
''')


async def test_a_stdio_server_gets_its_secret_in_its_environment(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, tmp_path: Path) -> None:
    script = tmp_path / "clock_server.py"
    script.write_text(STDIO_SERVER)
    server = McpServerConfig(name="clock", command=(sys.executable, str(script)),
                             tools=(("secret_length", "compute"),), secret_env="HANDOFF_MCP_SECRET_CLOCK",
                             timeout_s=60.0)
    runner = mcp_runner(sink, settings, server, environ={"HANDOFF_MCP_SECRET_CLOCK": SECRET})
    outcome, _ = await run_script(runner, [call_turn("mcp__clock__secret_length", {})], ["compute"], workspace)
    [result] = results(sink, outcome.run_id)
    assert result["ok"], result
    assert result["result"]["content"][0]["text"] == f"{len(SECRET)} characters"


def test_a_runner_without_mcp_servers_never_imports_the_sdk() -> None:
    program = textwrap.dedent('''
        import asyncio, sys
        from delegations.protocol.adapters.scripted import ScriptedAdapter
        from delegations.protocol.approvals import AutoGate
        from delegations.protocol.checkpoints import MemoryCheckpointStore
        from delegations.protocol.events import MemorySink
        from delegations.protocol.runner import Runner
        from tests.protocol.conftest import root_packet, yield_turn

        async def main():
            runner = Runner(sink=MemorySink(), gate=AutoGate(), checkpoints=MemoryCheckpointStore())
            outcome = await runner.start(root_packet(), adapter=ScriptedAdapter({"script": [yield_turn()]}))
            print(outcome.state.value, "mcp" in sys.modules)

        asyncio.run(main())
    ''')
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.split() == ["COMPLETE", "False"], done.stderr


async def test_an_mcp_call_interrupted_by_the_worker_dying_is_not_made_again_on_resume(
        settings: RunnerSettings, workspace: Path, weather: Running, seen: Seen) -> None:
    from .test_runner_interrupted_calls import DyingStore, WorkerDied

    server = config(weather.url)
    store = DyingStore(FORECAST)
    first = Runner(sink=MemorySink(), gate=AutoGate(), checkpoints=store, settings=settings,
                   mcp=McpTools([server], result_max_bytes=65536, environ={}))
    script = {"script": [call_turn(FORECAST, {"city": "Oslo"}), yield_turn()]}
    with pytest.raises(WorkerDied):
        await first.start(root_packet(capabilities=["search"]), adapter=ScriptedAdapter(script),
                          run_id="r-mcp-dies", workspace=workspace)
    assert seen.calls == [("forecast", {"city": "Oslo"})]
    sink = MemorySink()
    again = Runner(sink=sink, gate=AutoGate(), checkpoints=store, settings=settings,
                   mcp=McpTools([server], result_max_bytes=65536, environ={}))
    outcome = await again.resume("r-mcp-dies")
    assert outcome.state is RunState.COMPLETE, outcome.error
    assert seen.calls == [("forecast", {"city": "Oslo"})]     # called once
    [result] = results(sink, "r-mcp-dies")
    assert result["error"]["code"] == "ERR_WORKER_LOST"


async def test_a_secret_a_server_puts_in_a_tool_description_is_redacted_before_the_model_sees_it(
        sink: MemorySink, settings: RunnerSettings, workspace: Path) -> None:
    seen = Seen()
    leaky = MCPServer("leaky")

    @leaky.tool(description=f"Looks things up (debug: token {SECRET}).")
    def lookup(query: str) -> str:
        return query

    with served(leaky, seen) as running:
        server = McpServerConfig(name="leaky", url=running.url, tools=(("lookup", "search"),),
                                 secret_env="HANDOFF_MCP_SECRET_LEAKY")
        runner = mcp_runner(sink, settings, server, environ={"HANDOFF_MCP_SECRET_LEAKY": SECRET})
        _outcome, adapter = await run_script(runner, [], ["search"], workspace)
    [schema] = [tool for tool in adapter.received_tools[0] if tool["name"] == "mcp__leaky__lookup"]
    assert "[redacted]" in schema["description"] and SECRET not in json.dumps(adapter.received_tools)
