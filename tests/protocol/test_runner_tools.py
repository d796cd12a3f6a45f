"""The tools a run is offered: scope checks, approvals, workspace confinement, each tool's work."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from delegations.protocol.adapters.scripted import ScriptedAdapter
from delegations.protocol.approvals import AutoGate, Decision
from delegations.protocol.checkpoints import MemoryCheckpointStore
from delegations.protocol.errors import ProtocolError
from delegations.protocol.events import MemorySink
from delegations.protocol.lifecycle import RunState
from delegations.protocol.packet import parse_packet
from delegations.protocol.runner import Runner, RunnerSettings, RunOutcome
from delegations.protocol.tool_schemas import YIELD_CONTROL_TOOL
from delegations.protocol.tools import ToolContext, confine, offered_tools, read_file

from .conftest import call_turn, delegate_args, root_packet, yield_turn


async def run_calls(runner: Runner, calls: list[dict[str, Any]], capabilities: list[str],
                    workspace: Path, **packet: Any) -> tuple[RunOutcome, ScriptedAdapter]:
    adapter = ScriptedAdapter({"script": [{"tool_calls": calls}, yield_turn()]})
    outcome = await runner.start(parse_packet(root_packet(capabilities=capabilities, **packet)),
                                 adapter=adapter, workspace=workspace)
    return outcome, adapter


def tool_results(sink: MemorySink, run_id: str) -> list[dict[str, Any]]:
    return [e.data for e in sink.of_run(run_id) if e.type == "tool_result"]


def offered(adapter: ScriptedAdapter) -> list[str]:
    return [tool["name"] for tool in adapter_tools(adapter)]


def adapter_tools(adapter: ScriptedAdapter) -> list[dict[str, Any]]:
    return adapter.received_tools[0]


async def test_the_model_is_offered_one_tool_set_per_granted_capability(
        runner: Runner, workspace: Path) -> None:
    _outcome, adapter = await run_calls(runner, [], ["fs_read", "fs_write"], workspace)
    names = offered(adapter)
    assert names[:3] == ["yield_control", "delegate_task", "request_capability"]
    assert set(names[3:]) == {"read_file", "list_files", "apply_edit"}
    status = adapter_tools(adapter)[0]["parameters"]["properties"]["status"]
    assert "BLOCKED_AWAITING_CLARIFICATION" in status["enum"]


async def test_the_offered_yield_control_carries_the_packets_expected_output_schema(
        runner: Runner, workspace: Path) -> None:
    expected = {"price": "number", "currency": "string"}
    _outcome, adapter = await run_calls(runner, [], [], workspace, expected_output=expected)
    payload = adapter_tools(adapter)[0]["parameters"]["properties"]["output_payload"]
    assert parse_packet(root_packet(expected_output=expected)).expected_output_schema in payload["anyOf"]
    assert {"const": {}} in payload["anyOf"]   # a FAILURE may still hand back nothing


async def test_without_an_expected_output_the_offered_payload_schema_is_the_hand_off_protocols(
        runner: Runner, workspace: Path) -> None:
    _outcome, adapter = await run_calls(runner, [], [], workspace)
    payload = adapter_tools(adapter)[0]["parameters"]["properties"]["output_payload"]
    assert payload == YIELD_CONTROL_TOOL["parameters"]["output_payload"]


def test_run_command_is_offered_only_when_subprocesses_are_enabled() -> None:
    off = [t["name"] for t in offered_tools(["subprocess_exec"], can_delegate=False, subprocess_enabled=False)]
    on = [t["name"] for t in offered_tools(["subprocess_exec"], can_delegate=False, subprocess_enabled=True)]
    assert "run_command" not in off and "run_command" in on


async def test_read_and_list_work_inside_the_workspace(runner: Runner, sink: MemorySink, workspace: Path) -> None:
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text("print('hi')\n")
    calls = [{"name": "list_files", "arguments": {"path": ".", "recursive": True}},
             {"name": "read_file", "arguments": {"path": "src/app.py"}}]
    outcome, _ = await run_calls(runner, calls, ["fs_read"], workspace)
    listing, content = tool_results(sink, outcome.run_id)
    assert listing["ok"] and {e["path"] for e in listing["result"]["entries"]} == {"src", "src/app.py"}
    assert content["ok"] and content["result"]["content"] == "print('hi')\n"


@pytest.mark.parametrize("path", ["../secret.txt", "/etc/passwd", "src/../../secret.txt", "link/secret.txt"])
async def test_file_tools_refuse_paths_outside_the_workspace(
        runner: Runner, sink: MemorySink, workspace: Path, path: str) -> None:
    (workspace.parent / "secret.txt").write_text("top secret\n")
    (workspace / "link").symlink_to(workspace.parent)
    outcome, _ = await run_calls(runner, [{"name": "read_file", "arguments": {"path": path}}],
                                 ["fs_read"], workspace)
    [result] = tool_results(sink, outcome.run_id)
    assert result["ok"] is False
    assert result["error"]["code"] == "ERR_CONSTRAINT_VIOLATION"
    assert "top secret" not in json.dumps(result)


def test_confine_resolves_paths_inside_the_workspace(workspace: Path) -> None:
    assert confine(workspace, "a/b.txt") == workspace.resolve() / "a" / "b.txt"
    assert confine(workspace, str(workspace / "c.txt")) == workspace.resolve() / "c.txt"
    with pytest.raises(ProtocolError) as caught:
        confine(workspace, "../x")
    assert caught.value.code == "ERR_CONSTRAINT_VIOLATION"


async def test_apply_edit_takes_a_targeted_replace_block_and_a_unified_diff(
        runner: Runner, sink: MemorySink, workspace: Path) -> None:
    (workspace / "auth.py").write_text("def login(user):\n    pass\n")
    block = ("FILE: auth.py\nREPLACE_START\ndef login(user):\n    pass\nREPLACE_WITH\n"
             "def login(user):\n    return authenticate(user)\nREPLACE_END\n")
    diff = ("--- /dev/null\n+++ b/notes.md\n@@ -0,0 +1 @@\n+# Notes\n")
    calls = [{"name": "apply_edit", "arguments": {"edit": block}},
             {"name": "apply_edit", "arguments": {"edit": diff}}]
    outcome, _ = await run_calls(runner, calls, ["fs_write"], workspace)
    first, second = tool_results(sink, outcome.run_id)
    assert first["ok"] and second["ok"], (first, second)
    assert (workspace / "auth.py").read_text() == "def login(user):\n    return authenticate(user)\n"
    assert (workspace / "notes.md").read_text() == "# Notes\n"
    assert second["result"]["files"][0]["created"] is True


async def test_an_edit_outside_the_workspace_is_refused(runner: Runner, sink: MemorySink, workspace: Path) -> None:
    block = "FILE: ../evil.py\nREPLACE_START\nx\nREPLACE_WITH\ny\nREPLACE_END\n"
    outcome, _ = await run_calls(runner, [{"name": "apply_edit", "arguments": {"edit": block}}],
                                 ["fs_write"], workspace)
    [result] = tool_results(sink, outcome.run_id)
    assert result["ok"] is False
    assert not (workspace.parent / "evil.py").exists()


async def test_a_tool_outside_the_runs_scope_is_refused_and_recorded(
        runner: Runner, sink: MemorySink, workspace: Path) -> None:
    (workspace / "data.txt").write_text("keep\n")
    outcome, _ = await run_calls(runner, [{"name": "delete_file", "arguments": {"path": "data.txt"}}],
                                 ["fs_read"], workspace)
    assert outcome.state is RunState.COMPLETE
    [result] = tool_results(sink, outcome.run_id)
    assert result["ok"] is False and result["error"]["code"] == "ERR_CONSTRAINT_VIOLATION"
    assert "file_delete" in result["error"]["message"]
    errors = [e.data for e in sink.of_run(outcome.run_id) if e.type == "error"]
    assert errors and errors[0]["tool"] == "delete_file"
    assert (workspace / "data.txt").exists()


async def test_an_unknown_tool_is_refused_with_the_list_of_tools(
        runner: Runner, sink: MemorySink, workspace: Path) -> None:
    outcome, _ = await run_calls(runner, [{"name": "sessions_spawn", "arguments": {}}], [], workspace)
    [result] = tool_results(sink, outcome.run_id)
    assert result["ok"] is False and "yield_control" in result["error"]["message"]


async def test_a_tampered_token_refuses_every_tool(
        runner: Runner, sink: MemorySink, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from delegations.protocol.runner import acceptance

    original = acceptance.issue_token

    def tampered(*args: Any, **kwargs: Any) -> str:
        token = original(*args, **kwargs)
        return token[:-2] + ("AA" if not token.endswith("AA") else "BB")

    monkeypatch.setattr(acceptance, "issue_token", tampered)
    outcome, _ = await run_calls(runner, [{"name": "list_files", "arguments": {}}], ["fs_read"], workspace)
    [result] = tool_results(sink, outcome.run_id)
    assert result["ok"] is False and "signature" in result["error"]["message"]


async def test_an_approval_required_capability_waits_for_the_gate_before_the_tool_runs(
        sink: MemorySink, store: MemoryCheckpointStore, settings: RunnerSettings, workspace: Path) -> None:
    (workspace / "old.txt").write_text("old\n")
    gate = AutoGate(Decision.REJECT)
    runner = Runner(sink=sink, gate=gate, checkpoints=store, settings=settings)
    outcome, _ = await run_calls(runner, [{"name": "delete_file", "arguments": {"path": "old.txt"}}],
                                 ["file_delete"], workspace)
    [request] = gate.asked
    assert request.kind == "capability" and request.risk == "high"
    assert request.key == f"{outcome.run_id}:capability:call_0_0"
    [result] = tool_results(sink, outcome.run_id)
    assert result["ok"] is False and result["error"]["message"].startswith("Refused by a person")
    assert (workspace / "old.txt").exists()
    # a person's refusal is not a scope violation: no error event
    assert not [e for e in sink.of_run(outcome.run_id) if e.type == "error"]


@respx.mock
async def test_http_get_fetches_with_a_size_cap_after_approval(
        sink: MemorySink, store: MemoryCheckpointStore, tmp_path: Path, workspace: Path) -> None:
    respx.get("https://example.org/data").mock(return_value=httpx.Response(200, text="x" * 5000))
    settings = RunnerSettings(token_key=b"k" * 16, workspace_root=tmp_path, http_max_bytes=1000)
    gate = AutoGate()
    runner = Runner(sink=sink, gate=gate, checkpoints=store, settings=settings)
    outcome, _ = await run_calls(runner, [{"name": "http_get", "arguments": {"url": "https://example.org/data"}}],
                                 ["network_outbound"], workspace)
    [result] = tool_results(sink, outcome.run_id)
    assert result["ok"], result
    assert result["result"]["status"] == 200 and result["result"]["truncated"] is True
    assert len(result["result"]["body"]) == 1000
    assert [r.kind for r in gate.asked] == ["capability"]


async def test_run_command_runs_in_the_workspace_when_enabled(
        sink: MemorySink, store: MemoryCheckpointStore, tmp_path: Path, workspace: Path) -> None:
    settings = RunnerSettings(token_key=b"k" * 16, workspace_root=tmp_path, subprocess_enabled=True)
    runner = Runner(sink=sink, gate=AutoGate(), checkpoints=store, settings=settings)
    argv = [sys.executable, "-c", "import os; print(os.getcwd())"]
    outcome, _ = await run_calls(runner, [{"name": "run_command", "arguments": {"argv": argv}}],
                                 ["subprocess_exec"], workspace)
    [result] = tool_results(sink, outcome.run_id)
    assert result["ok"], result
    assert Path(result["result"]["stdout"].strip()).resolve() == workspace.resolve()  # noqa: ASYNC240


async def test_run_command_is_refused_when_subprocesses_are_disabled(
        runner: Runner, sink: MemorySink, workspace: Path) -> None:
    outcome, _ = await run_calls(runner, [{"name": "run_command", "arguments": {"argv": ["true"]}}],
                                 ["subprocess_exec"], workspace)
    [result] = tool_results(sink, outcome.run_id)
    assert result["ok"] is False and result["error"]["code"] == "ERR_CONSTRAINT_VIOLATION"


async def test_an_approved_capability_request_adds_the_capability_for_later_turns(
        sink: MemorySink, store: MemoryCheckpointStore, settings: RunnerSettings, workspace: Path) -> None:
    (workspace / "f.txt").write_text("content\n")
    gate = AutoGate()
    runner = Runner(sink=sink, gate=gate, checkpoints=store, settings=settings)
    adapter = ScriptedAdapter({"script": [
        call_turn("request_capability", {"capability": "fs_read", "reason": "I must read f.txt"}),
        call_turn("read_file", {"path": "f.txt"}),
        yield_turn()]})
    outcome = await runner.start(parse_packet(root_packet()), adapter=adapter, workspace=workspace)
    assert outcome.state is RunState.COMPLETE
    assert [r.kind for r in gate.asked] == ["capability_request"]
    granted, read = tool_results(sink, outcome.run_id)
    assert granted["result"]["granted"] is True and "read_file" in granted["result"]["tools"]
    assert read["ok"] and read["result"]["content"] == "content\n"
    assert "read_file" in [t["name"] for t in adapter.received_tools[1]]


async def test_a_capability_request_beyond_the_parent_is_refused_without_asking(
        sink: MemorySink, store: MemoryCheckpointStore, settings: RunnerSettings) -> None:
    gate = AutoGate()
    runner = Runner(sink=sink, gate=gate, checkpoints=store, settings=settings)
    child = {"script": [call_turn("request_capability", {"capability": "network_outbound", "reason": "x"}),
                        yield_turn()]}
    adapter = ScriptedAdapter({"script": [call_turn("delegate_task", delegate_args("c"), finish="children")],
                               "children": {"c": child}})
    outcome = await runner.start(parse_packet(root_packet(capabilities=["fs_read"])), adapter=adapter)
    assert outcome.state is RunState.COMPLETE
    child_id = next(e.data["child_run_id"] for e in sink.events if e.type == "child")
    [result] = tool_results(sink, child_id)
    assert result["ok"] is False and result["error"]["code"] == "ERR_CONSTRAINT_VIOLATION"
    assert gate.asked == []


async def test_read_file_caps_what_it_returns(workspace: Path) -> None:
    (workspace / "big.txt").write_text("y" * 10_000)
    result = await read_file(ToolContext(workspace=workspace, read_max_bytes=100), {"path": "big.txt"})
    assert result["truncated"] is True and len(result["content"]) == 100 and result["size"] == 10_000
