"""A run always hands back a result: the forced last turn, the runner's own FAILURE result,
and the hint on a failed tool call tried again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from delegations.protocol.adapters.scripted import ScriptedAdapter
from delegations.protocol.events import MemorySink
from delegations.protocol.lifecycle import RunState
from delegations.protocol.packet import parse_packet
from delegations.protocol.results import ResultStatus
from delegations.protocol.runner import Runner

from .conftest import busy_turn, call_turn, root_packet, yield_turn


def offered_names(adapter: ScriptedAdapter) -> list[list[str]]:
    return [[tool["name"] for tool in tools] for tools in adapter.received_tools]


def last_event(sink: MemorySink, run_id: str, type: str) -> dict[str, Any]:
    return [event.data for event in sink.of_run(run_id) if event.type == type][-1]


async def test_a_script_that_never_yields_ends_failed_with_a_failure_result_not_null(
        runner: Runner, sink: MemorySink) -> None:
    adapter = ScriptedAdapter({"script": [busy_turn()] * 3})
    outcome = await runner.start(parse_packet(root_packet(max_iterations=3)), adapter=adapter)

    assert outcome.state is RunState.FAILED
    assert outcome.error is not None and outcome.error["code"] == "ERR_RESOURCE_EXHAUSTED"
    result = outcome.result
    assert result is not None and result.status is ResultStatus.FAILURE
    assert result.error_report is not None and result.error_report.code == "ERR_RESOURCE_EXHAUSTED"
    assert result.error_report.message == outcome.error["message"]
    assert result.summary is not None
    assert "Done so far: 3 model calls and 2 tool calls (the last: list_files failed, list_files failed)" in result.summary
    # the last turn offered only yield_control, and forced it
    assert offered_names(adapter)[-1] == ["yield_control"]
    assert adapter.received_tool_choices == [None, None, "yield_control"]
    assert adapter.received[-1][-1]["content"].startswith(
        "This is your last turn: you have used 2 of 3 model calls")
    # the list_files the model called instead on its last turn was not run
    assert len([e for e in sink.of_run(outcome.run_id) if e.type == "tool_call"]) == 2
    assert last_event(sink, outcome.run_id, "result")["result"]["status"] == "FAILURE"
    assert last_event(sink, outcome.run_id, "announce")["result"]["status"] == "FAILURE"


async def test_a_script_that_runs_out_before_yielding_still_gets_a_failure_result(runner: Runner) -> None:
    adapter = ScriptedAdapter({"script": [busy_turn()]})
    outcome = await runner.start(parse_packet(root_packet()), adapter=adapter)

    assert outcome.state is RunState.FAILED
    assert outcome.error is not None and outcome.error["code"] == "ERR_TOOL_FAILURE"
    assert outcome.result is not None and outcome.result.status is ResultStatus.FAILURE
    report = outcome.result.error_report
    assert report is not None and report.code == "ERR_TOOL_FAILURE"
    assert report.failed_reason == "TOOL_FAILURE"
    assert "Scripted adapter" in report.message


async def test_a_run_at_max_iterations_gets_a_forced_last_turn_and_its_yield_is_used(
        runner: Runner, sink: MemorySink) -> None:
    adapter = ScriptedAdapter({"script": [busy_turn(), busy_turn(),
                                          yield_turn({"done": "half"}, status="PARTIAL_COMPLETION")]})
    outcome = await runner.start(parse_packet(root_packet(max_iterations=3)), adapter=adapter)

    assert outcome.state is RunState.COMPLETE
    assert outcome.result is not None and outcome.result.status is ResultStatus.PARTIAL_COMPLETION
    assert outcome.result.output_payload == {"done": "half"}
    assert offered_names(adapter)[1] != ["yield_control"]
    assert offered_names(adapter)[2] == ["yield_control"]
    assert adapter.received_tool_choices[-1] == "yield_control"
    logs = [e.data for e in sink.of_run(outcome.run_id) if e.type == "log" and e.data.get("last_turn")]
    assert len(logs) == 1 and logs[0]["limit"] == "max_iterations"


async def test_the_last_call_of_a_model_call_budget_is_forced(runner: Runner) -> None:
    adapter = ScriptedAdapter({"script": [busy_turn(), yield_turn()]})
    packet = parse_packet(root_packet(budget={"max_model_calls": 2}, max_iterations=5))
    outcome = await runner.start(packet, adapter=adapter)

    assert outcome.state is RunState.COMPLETE
    assert adapter.received_tool_choices == [None, "yield_control"]
    assert "you have used 1 of 2 model calls" in adapter.received[-1][-1]["content"]


async def test_a_call_like_the_last_one_that_would_use_up_the_tokens_is_forced(runner: Runner) -> None:
    adapter = ScriptedAdapter({"script": [busy_turn(600), yield_turn()]})
    packet = parse_packet(root_packet(budget={"max_tokens": 1000, "max_model_calls": 10}))
    outcome = await runner.start(packet, adapter=adapter)

    assert outcome.state is RunState.COMPLETE
    assert adapter.received_tool_choices == [None, "yield_control"]
    assert "you have used 600 of 1000 tokens, and your last call took 600" in adapter.received[-1][-1]["content"]


async def test_runs_that_yield_normally_are_never_forced(runner: Runner) -> None:
    adapter = ScriptedAdapter({"script": [busy_turn(), yield_turn()]})
    outcome = await runner.start(parse_packet(root_packet()), adapter=adapter)

    assert outcome.state is RunState.COMPLETE
    assert adapter.received_tool_choices == [None, None]
    assert all("last turn" not in str(m.get("content")) for m in adapter.received[-1])


async def test_a_timeout_still_produces_a_failure_result(runner: Runner, sink: MemorySink) -> None:
    adapter = ScriptedAdapter({"script": [busy_turn(), {**yield_turn(), "delay_ms": 30_000}]})
    outcome = await runner.start(parse_packet(root_packet(timeout_s=0.2)), adapter=adapter)

    assert outcome.state is RunState.TIMEOUT
    assert outcome.error is not None and outcome.error["code"] == "ERR_TIMEOUT"
    result = outcome.result
    assert result is not None and result.status is ResultStatus.FAILURE
    assert result.error_report is not None and result.error_report.code == "ERR_TIMEOUT"
    assert result.summary is not None and "1 model call and 1 tool call (the last: list_files failed)" in result.summary
    announce = last_event(sink, outcome.run_id, "announce")
    assert announce["status"] == "timeout"
    assert announce["result"]["error_report"]["code"] == "ERR_TIMEOUT"
    assert last_event(sink, outcome.run_id, "result")["result"]["status"] == "FAILURE"


async def test_a_cancelled_run_still_produces_a_failure_result_and_keeps_its_error(
        runner: Runner, sink: MemorySink) -> None:
    adapter = ScriptedAdapter({"script": [{**yield_turn(), "delay_ms": 30_000}]})
    task = asyncio.create_task(runner.start(parse_packet(root_packet()), adapter=adapter, run_id="r-c"))
    await asyncio.sleep(0.05)
    assert runner.cancel("r-c")
    outcome = await asyncio.wait_for(task, timeout=1.0)

    assert outcome.state is RunState.CANCELLED
    assert outcome.error == {"code": "CANCELLED", "message": "Cancelled on request."}
    assert outcome.result is not None and outcome.result.status is ResultStatus.FAILURE
    assert outcome.result.error_report is not None and outcome.result.error_report.code == "CANCELLED"
    assert "error" not in [e.type for e in sink.of_run("r-c")]   # a cancellation is not a failure
    assert last_event(sink, "r-c", "result")["result"]["status"] == "FAILURE"


async def test_a_repeated_identical_failing_call_is_pointed_out(
        runner: Runner, sink: MemorySink, workspace: Path) -> None:
    missing = call_turn("list_files", {"path": "made/up"})
    other = call_turn("list_files", {"path": "also/made/up"})
    adapter = ScriptedAdapter({"script": [missing, other, missing, yield_turn()]})
    packet = parse_packet(root_packet(capabilities=["fs_read"]))
    outcome = await runner.start(packet, adapter=adapter, workspace=workspace)

    assert outcome.state is RunState.COMPLETE
    results = [e.data for e in sink.of_run(outcome.run_id) if e.type == "tool_result"]
    assert [r["ok"] for r in results] == [False, False, False]
    assert "hint" not in results[0] and "hint" not in results[1]
    assert results[2]["hint"] == (
        "You already tried this exact call; it failed because 'made/up' is not a folder in the "
        "workspace; try something else or call yield_control.")
    # the model reads the error and the hint
    tool_message = adapter.received[3][-1]
    assert tool_message["role"] == "tool"
    assert "is not a folder" in tool_message["content"]
    assert "You already tried this exact call" in tool_message["content"]


async def test_the_same_failing_call_twice_in_one_turn_is_pointed_out_too(
        runner: Runner, sink: MemorySink, workspace: Path) -> None:
    missing = {"name": "read_file", "arguments": {"path": "nowhere.txt"}}
    adapter = ScriptedAdapter({"script": [{"tool_calls": [missing, missing]}, yield_turn()]})
    packet = parse_packet(root_packet(capabilities=["fs_read"]))
    outcome = await runner.start(packet, adapter=adapter, workspace=workspace)

    results = [e.data for e in sink.of_run(outcome.run_id) if e.type == "tool_result"]
    assert "hint" not in results[0]
    assert results[1]["hint"].startswith("You already tried this exact call; it failed because No file")


async def test_a_forced_hand_off_is_kept_even_when_its_call_overshot_the_tokens(runner: Runner) -> None:
    forced_yield = {**yield_turn(), "usage": {"input_tokens": 600, "output_tokens": 0}}
    adapter = ScriptedAdapter({"script": [busy_turn(600), forced_yield]})
    packet = parse_packet(root_packet(budget={"max_tokens": 1000, "max_model_calls": 10}))
    outcome = await runner.start(packet, adapter=adapter)

    assert outcome.state is RunState.COMPLETE
    assert outcome.result is not None and outcome.result.status is ResultStatus.SUCCESS
    assert outcome.usage.total_tokens == 1200
