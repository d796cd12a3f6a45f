"""The runner end to end with the scripted adapter: accept, work, finish, children, budgets."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from delegations.protocol.adapters.base import ModelAdapter, ModelTurn
from delegations.protocol.adapters.scripted import ScriptedAdapter
from delegations.protocol.approvals import AutoGate, Decision
from delegations.protocol.checkpoints import MemoryCheckpointStore
from delegations.protocol.errors import ErrorCode, ProtocolError
from delegations.protocol.events import MemorySink
from delegations.protocol.lifecycle import RunState
from delegations.protocol.packet import parse_packet
from delegations.protocol.results import ResultStatus
from delegations.protocol.runner import Runner, RunnerSettings

from .conftest import busy_turn, call_turn, delegate_args, root_packet, yield_turn
from .protocol_examples import (
    AGLOOP_RESULT_BLOCK,
    DELEGATION_CONTRACT,
    HANDOFF_DELEGATE_TASK_ARGS,
    HANDOFF_SUCCESS_RESPONSE,
)


def states(sink: MemorySink, run_id: str) -> list[str]:
    return [event.data["state"] for event in sink.of_run(run_id) if event.type == "state"]


def types(sink: MemorySink, run_id: str) -> list[str]:
    return [event.type for event in sink.of_run(run_id)]


def child_ids(sink: MemorySink, run_id: str) -> list[str]:
    return [event.data["child_run_id"] for event in sink.of_run(run_id) if event.type == "child"]


async def test_a_leaf_run_goes_pending_accepted_working_complete_with_its_yielded_result(
        runner: Runner, sink: MemorySink) -> None:
    adapter = ScriptedAdapter({"script": [yield_turn(HANDOFF_SUCCESS_RESPONSE["output_payload"])]})
    outcome = await runner.start(parse_packet(root_packet()), adapter=adapter)
    assert outcome.state is RunState.COMPLETE
    assert outcome.result is not None and outcome.result.status is ResultStatus.SUCCESS
    assert outcome.result.output_payload["price"] == 175.22
    assert states(sink, outcome.run_id) == ["PENDING", "ACCEPTED", "WORKING", "COMPLETE"]
    events = types(sink, outcome.run_id)
    assert events[-1] == "result" and "announce" in events and "model_call" in events
    result_event = sink.of_run(outcome.run_id)[-1].data
    assert result_event["state"] == "COMPLETE"
    assert result_event["result"]["output_payload"]["currency"] == "USD"
    assert result_event["usage"]["model_calls"] == 1


async def test_a_packet_in_any_protocol_spelling_is_parsed_before_it_runs(runner: Runner) -> None:
    packet = copy.deepcopy(DELEGATION_CONTRACT)
    packet["completionCriteria"] = []
    adapter = ScriptedAdapter({"script": [yield_turn({"riskMatrix": [
        {"solution": "A", "risk": "isolation", "source": "tool:metrics-query"}]})]})
    outcome = await runner.start(packet, adapter=adapter)
    assert outcome.state is RunState.COMPLETE, outcome.error


async def test_an_invalid_packet_is_rejected_and_never_calls_the_model(
        runner: Runner, sink: MemorySink) -> None:
    adapter = ScriptedAdapter({"script": []})
    outcome = await runner.start({"max_iterations": "many"}, adapter=adapter)
    assert outcome.state is RunState.REJECTED
    assert outcome.error is not None and outcome.error["code"] == "ERR_INVALID_PACKET"
    assert "model_call" not in types(sink, outcome.run_id)
    assert sink.of_run(outcome.run_id)[-1].type == "result"


async def test_lint_errors_reject_the_run_with_the_findings_in_the_outcome_and_events(
        runner: Runner, sink: MemorySink) -> None:
    # the agloop delegation protocol's check 4: an executor delegation without acceptance criteria
    packet = parse_packet(root_packet(subagent_type="executor", depth=4))
    outcome = await runner.start(packet, adapter=ScriptedAdapter({"script": [yield_turn()]}))
    assert outcome.state is RunState.REJECTED
    codes = {finding.code for finding in outcome.findings}
    assert "DEPTH_LIMIT_EXCEEDED" in codes
    error_events = [e for e in sink.of_run(outcome.run_id) if e.type == "error"]
    assert error_events and "DEPTH_LIMIT_EXCEEDED" in error_events[0].data["message"]
    result = sink.of_run(outcome.run_id)[-1]
    assert result.type == "result" and result.data["state"] == "REJECTED"
    assert any(item["code"] == "DEPTH_LIMIT_EXCEEDED" for item in result.data["findings"])
    assert states(sink, outcome.run_id) == ["PENDING", "REJECTED"]


async def test_a_three_level_tree_runs_when_nesting_is_allowed(runner: Runner, sink: MemorySink) -> None:
    leaf = {"script": [yield_turn({"answer": 42})]}
    middle = {"script": [call_turn("delegate_task", delegate_args("leaf"), finish="children")],
              "children": {"leaf": leaf}}
    top = {"script": [call_turn("delegate_task", delegate_args("middle"), finish="children")],
           "children": {"middle": middle}}
    root = ScriptedAdapter({"script": [call_turn("delegate_task", delegate_args("top"), finish="children")],
                            "children": {"top": top}})
    outcome = await runner.start(parse_packet(root_packet(allow_nested=True)), adapter=root)
    assert outcome.state is RunState.COMPLETE, outcome.error
    depth1 = child_ids(sink, outcome.run_id)
    depth2 = child_ids(sink, depth1[0])
    depth3 = child_ids(sink, depth2[0])
    assert len(depth1) == len(depth2) == len(depth3) == 1
    leaf_events = sink.of_run(depth3[0])
    assert leaf_events[0].data["depth"] == 3
    assert leaf_events[-1].data["result"]["output_payload"] == {"answer": 42}
    # a child's first event comes after the child event that announces it on its parent
    child_event = next(i for i, e in enumerate(sink.events) if e.type == "child"
                       and e.data["child_run_id"] == depth3[0])
    first_leaf = next(i for i, e in enumerate(sink.events) if e.run_id == depth3[0])
    assert child_event < first_leaf
    payload = outcome.result.output_payload if outcome.result else {}
    chain = payload["children"][0]["result"]["output_payload"]["children"][0]
    assert chain["result"]["output_payload"]["children"][0]["result"]["output_payload"] == {"answer": 42}
    # the leaf is at max depth: it is not offered delegate_task
    leaf_child = next(e for e in sink.events if e.type == "child" and e.data["child_run_id"] == depth3[0])
    assert leaf_child.data["session_key"] == f"agent:main:subagent:{depth3[0]}"


async def test_a_subagent_without_allow_nested_is_refused_delegate_task(
        runner: Runner, sink: MemorySink) -> None:
    child = {"script": [call_turn("delegate_task", delegate_args("grandchild")),
                        yield_turn({"answer": 42})],
             "children": {"grandchild": {"script": [yield_turn()]}}}
    adapter = ScriptedAdapter({"script": [call_turn("delegate_task", delegate_args("child"),
                                                    finish="children")],
                               "children": {"child": child}})
    outcome = await runner.start(parse_packet(root_packet()), adapter=adapter)
    assert outcome.state is RunState.COMPLETE
    child_id = child_ids(sink, outcome.run_id)[0]
    assert child_ids(sink, child_id) == []
    refused = next(e for e in sink.of_run(child_id) if e.type == "tool_result")
    assert refused.data["ok"] is False
    assert refused.data["error"]["code"] == "ERR_CONSTRAINT_VIOLATION"
    assert any(e.type == "error" for e in sink.of_run(child_id))


async def test_several_delegations_in_one_turn_run_concurrently(runner: Runner) -> None:
    slow = {"script": [{**yield_turn(), "delay_ms": 200}]}
    adapter = ScriptedAdapter({"script": [{"tool_calls": [
        {"name": "delegate_task", "arguments": delegate_args(f"w{i}")} for i in range(4)],
        "finish": "children"}], "children": {f"w{i}": slow for i in range(4)}})
    import time
    started = time.perf_counter()
    outcome = await runner.start(parse_packet(root_packet()), adapter=adapter)
    elapsed = time.perf_counter() - started
    assert outcome.state is RunState.COMPLETE
    assert len(outcome.result.output_payload["children"]) == 4 if outcome.result else False
    assert elapsed < 0.7  # four 200 ms children, concurrently


async def test_max_concurrency_bounds_how_many_children_run_at_once(runner: Runner) -> None:
    slow = {"script": [{**yield_turn(), "delay_ms": 100}]}
    adapter = ScriptedAdapter({"script": [{"tool_calls": [
        {"name": "delegate_task", "arguments": delegate_args(f"w{i}")} for i in range(4)],
        "finish": "children"}], "children": {f"w{i}": slow for i in range(4)}})
    import time
    started = time.perf_counter()
    packet = parse_packet(root_packet(budget={"max_concurrency": 1, "max_model_calls": 50}))
    outcome = await runner.start(packet, adapter=adapter)
    assert outcome.state is RunState.COMPLETE
    assert time.perf_counter() - started >= 0.4


async def test_the_budget_shrinks_down_the_chain(runner: Runner, sink: MemorySink) -> None:
    leaf = {"script": [yield_turn()]}
    middle = {"script": [{**busy_turn(), "usage": {"input_tokens": 100, "output_tokens": 50}},
                         call_turn("delegate_task", delegate_args("leaf"), finish="children")],
              "children": {"leaf": leaf}}
    root = ScriptedAdapter({"script": [
        {"usage": {"input_tokens": 1000, "output_tokens": 0}, **call_turn("delegate_task", delegate_args("middle"),
                                                                           finish="children")}],
        "children": {"middle": middle}})
    packet = parse_packet(root_packet(allow_nested=True, budget={"max_model_calls": 10, "max_tokens": 5000}))
    outcome = await runner.start(packet, adapter=root)
    middle_event = next(e for e in sink.of_run(outcome.run_id) if e.type == "child")
    assert middle_event.data["budget"]["max_model_calls"] == 9
    assert middle_event.data["budget"]["max_tokens"] == 4000
    leaf_event = next(e for e in sink.of_run(middle_event.data["child_run_id"]) if e.type == "child")
    # the middle run and the root both paid for the middle's first call (150 tokens)
    assert leaf_event.data["budget"]["max_model_calls"] == 7
    assert leaf_event.data["budget"]["max_tokens"] == 3850
    # every call is charged to the run and to all its ancestors
    assert outcome.usage.model_calls == 4
    assert outcome.usage.total_tokens == 1150


async def test_a_child_asking_for_more_budget_than_the_parent_has_is_rejected(
        runner: Runner, sink: MemorySink) -> None:
    greedy = delegate_args("greedy", budget={"max_model_calls": 500})
    adapter = ScriptedAdapter({"script": [call_turn("delegate_task", greedy, finish="children")],
                               "children": {"greedy": {"script": [yield_turn()]}}})
    outcome = await runner.start(parse_packet(root_packet()), adapter=adapter)
    child_id = child_ids(sink, outcome.run_id)[0]
    child_result = sink.of_run(child_id)[-1].data
    assert child_result["state"] == "REJECTED"
    assert any(f["code"] == "BUDGET_EXCEEDS_PARENT" for f in child_result["findings"])
    tool_result = next(e for e in sink.of_run(outcome.run_id) if e.type == "tool_result")
    assert tool_result.data["ok"] is False
    assert tool_result.data["result"]["status"] == "error"
    assert outcome.result is not None and outcome.result.status is ResultStatus.FAILURE


async def test_a_child_asking_for_a_capability_the_parent_lacks_is_rejected(
        runner: Runner, sink: MemorySink) -> None:
    escalate = delegate_args("escalate", capabilities=["fs_read", "network_outbound"])
    adapter = ScriptedAdapter({"script": [call_turn("delegate_task", escalate, finish="children")],
                               "children": {"escalate": {"script": [yield_turn()]}}})
    outcome = await runner.start(parse_packet(root_packet(capabilities=["fs_read"])), adapter=adapter)
    child_id = child_ids(sink, outcome.run_id)[0]
    child_result = sink.of_run(child_id)[-1].data
    assert child_result["state"] == "REJECTED"
    assert child_result["error"]["code"] == "ERR_CONSTRAINT_VIOLATION"
    assert any(f["code"] == "CAPABILITY_EXCEEDS_PARENT" for f in child_result["findings"])


async def test_a_child_without_its_own_capabilities_gets_the_parents_narrowed(
        runner: Runner, sink: MemorySink) -> None:
    adapter = ScriptedAdapter({"script": [call_turn("delegate_task", delegate_args("c"), finish="children")],
                               "children": {"c": {"script": [yield_turn()]}}})
    outcome = await runner.start(parse_packet(root_packet(capabilities=["fs_read", "fs_write"])), adapter=adapter)
    child = next(e for e in sink.of_run(outcome.run_id) if e.type == "child")
    assert child.data["capabilities"] == ["fs_read", "fs_write"]


async def test_a_missing_child_script_is_a_clear_error_at_spawn(runner: Runner, sink: MemorySink) -> None:
    adapter = ScriptedAdapter({"script": [call_turn("delegate_task", delegate_args("nobody"), finish="children")]})
    outcome = await runner.start(parse_packet(root_packet()), adapter=adapter)
    result = next(e for e in sink.of_run(outcome.run_id) if e.type == "tool_result")
    assert result.data["ok"] is False
    assert "nobody" in result.data["error"]["message"]
    assert result.data["error"]["code"] == "ERR_INVALID_ADAPTER_CONFIG"


async def test_a_result_that_fails_criteria_gets_one_correction_turn_then_fails(
        runner: Runner, sink: MemorySink) -> None:
    bad = yield_turn({"answer": "forty-two"})
    adapter = ScriptedAdapter({"script": [bad, bad]})
    packet = parse_packet(root_packet(expected_output_schema={"answer": "integer"}))
    outcome = await runner.start(packet, adapter=adapter)
    assert outcome.state is RunState.FAILED
    assert outcome.error is not None and outcome.error["code"] == "ERR_INVALID_RESULT"
    assert outcome.result is not None and outcome.result.error_report is not None
    assert outcome.result.error_report.code == "ERR_INVALID_RESULT"
    assert adapter.position == 2
    correction = adapter.received[1][-1]
    assert correction["role"] == "user" and "answer" in correction["content"]
    # the rejected yield_control call was answered before the correction message
    assert adapter.received[1][-2]["role"] == "tool"


async def test_a_corrected_result_is_accepted(runner: Runner) -> None:
    adapter = ScriptedAdapter({"script": [yield_turn({"answer": "forty-two"}), yield_turn({"answer": 42})]})
    packet = parse_packet(root_packet(expected_output_schema={"answer": "integer"}))
    outcome = await runner.start(packet, adapter=adapter)
    assert outcome.state is RunState.COMPLETE
    assert outcome.result is not None and outcome.result.output_payload == {"answer": 42}


async def test_an_answer_that_is_neither_a_tool_call_nor_a_result_gets_the_correction_turn(
        runner: Runner) -> None:
    adapter = ScriptedAdapter({"script": [{"text": "I think it is 42."}, {"text": AGLOOP_RESULT_BLOCK}]})
    outcome = await runner.start(parse_packet(root_packet()), adapter=adapter)
    assert outcome.state is RunState.COMPLETE
    assert outcome.result is not None and outcome.result.dialect == "result_block"
    assert "src/types/api.ts" in outcome.result.files_modified


async def test_a_result_without_evidence_is_rejected_when_the_criteria_demand_sources(
        runner: Runner) -> None:
    packet = copy.deepcopy(DELEGATION_CONTRACT)
    matrix = {"riskMatrix": [{"solution": "A", "risk": "isolation", "source": "tool:metrics-query"}]}
    adapter = ScriptedAdapter({"script": [yield_turn(matrix), yield_turn(matrix)]})
    outcome = await runner.start(packet, adapter=adapter)
    assert outcome.state is RunState.FAILED
    assert outcome.error is not None and outcome.error["code"] == "ERR_INVALID_RESULT"
    assert outcome.criteria_report is not None
    unmet = [item for item in outcome.criteria_report["items"] if not item["met"]]
    assert unmet and unmet[0]["kind"] == "evidence"


async def test_a_result_with_the_evidence_the_criteria_demand_is_accepted(runner: Runner) -> None:
    packet = copy.deepcopy(DELEGATION_CONTRACT)
    matrix = {"riskMatrix": [{"solution": "A", "risk": "isolation", "source": "tool:metrics-query"}]}
    evidence = [{"source": "tool:metrics-query", "artifact_id": "art_123"},
                {"source": "tool:docs-search", "artifact_id": "art_124"}]
    adapter = ScriptedAdapter({"script": [yield_turn(matrix, evidence=evidence)]})
    outcome = await runner.start(packet, adapter=adapter)
    assert outcome.state is RunState.COMPLETE, outcome.error
    assert outcome.criteria_report is not None and outcome.criteria_report["all_met"]


async def test_partial_completion_completes_with_a_warning(runner: Runner) -> None:
    adapter = ScriptedAdapter({"script": [yield_turn({"modified_files": ["a.py"]}, status="PARTIAL_COMPLETION")]})
    outcome = await runner.start(parse_packet(root_packet()), adapter=adapter)
    assert outcome.state is RunState.COMPLETE
    assert outcome.result is not None and outcome.result.status is ResultStatus.PARTIAL_COMPLETION
    assert any("Partial" in warning for warning in outcome.result.warnings)


async def test_the_retry_table_retries_context_insufficient_twice_with_a_fresh_context(
        runner: Runner, sink: MemorySink) -> None:
    failure = yield_turn({}, status="FAILURE", error_report={
        "code": "ERR_INSUFFICIENT_CONTEXT", "message": "The plan file is missing",
        "failed_reason": "CONTEXT_INSUFFICIENT"})
    adapter = ScriptedAdapter({"script": [failure, failure, failure, yield_turn()]})
    outcome = await runner.start(parse_packet(root_packet()), adapter=adapter)
    assert outcome.state is RunState.FAILED
    assert adapter.position == 3  # the first attempt and two retries, no more
    assert outcome.error is not None and outcome.error["failed_reason"] == "CONTEXT_INSUFFICIENT"
    for attempt, messages in enumerate(adapter.received[1:], start=2):
        assert len(messages) == 2  # fresh context: system + user only
        assert "previous attempt failed" in messages[1]["content"]
        assert f'"attempt_number": {attempt}' in messages[1]["content"]
        assert "The plan file is missing" in messages[1]["content"]
    logs = [e.data for e in sink.of_run(outcome.run_id) if e.type == "log"]
    assert sum(1 for log in logs if log.get("action") == "retry_with_more_context") == 2


async def test_a_retried_run_that_then_succeeds_completes(runner: Runner) -> None:
    failure = yield_turn({}, status="FAILURE", error_report={
        "code": "ERR_TOOL_FAILURE", "message": "shell exited 1", "failed_reason": "TOOL_FAILURE"})
    adapter = ScriptedAdapter({"script": [failure, yield_turn()]})
    outcome = await runner.start(parse_packet(root_packet()), adapter=adapter)
    assert outcome.state is RunState.COMPLETE


async def test_a_failure_the_table_does_not_retry_ends_failed_at_once(runner: Runner) -> None:
    failure = yield_turn({}, status="FAILURE", error_report={
        "code": "ERR_CONSTRAINT_VIOLATION", "message": "needs a redesign",
        "failed_reason": "DESIGN_INCOMPATIBLE"})
    adapter = ScriptedAdapter({"script": [failure, yield_turn()]})
    outcome = await runner.start(parse_packet(root_packet()), adapter=adapter)
    assert outcome.state is RunState.FAILED
    assert adapter.position == 1


async def test_the_termination_trigger_ends_the_run_with_the_text_as_summary(
        runner: Runner, sink: MemorySink) -> None:
    adapter = ScriptedAdapter({"script": [
        {"text": "The answer is 42. TASK_DONE and some trailing words",
         "tool_calls": [{"name": "read_file", "arguments": {"path": "x"}}]},
        yield_turn()]})
    packet = parse_packet(root_packet(termination_trigger="TASK_DONE", capabilities=["fs_read"]))
    outcome = await runner.start(packet, adapter=adapter)
    assert outcome.state is RunState.COMPLETE
    assert outcome.result is not None and outcome.result.summary == "The answer is 42."
    assert adapter.position == 1
    assert "tool_call" not in types(sink, outcome.run_id)


async def test_the_termination_trigger_still_reads_a_result_block_before_it(runner: Runner) -> None:
    adapter = ScriptedAdapter({"script": [{"text": AGLOOP_RESULT_BLOCK + "\nDONE"}]})
    outcome = await runner.start(parse_packet(root_packet(termination_trigger="DONE")), adapter=adapter)
    assert outcome.state is RunState.COMPLETE
    assert outcome.result is not None and outcome.result.dialect == "result_block"


async def test_text_is_streamed_as_coalesced_text_events(runner: Runner, sink: MemorySink) -> None:
    text = "thinking " * 10
    adapter = ScriptedAdapter({"script": [{"text": text}, yield_turn()]})
    outcome = await runner.start(parse_packet(root_packet()), adapter=adapter)
    deltas = [e.data["delta"] for e in sink.of_run(outcome.run_id) if e.type == "text"]
    assert "".join(deltas) == text
    assert len(deltas) == 1  # three small chunks coalesced into one event


async def test_a_message_sent_to_a_running_run_arrives_at_its_next_turn(
        runner: Runner, sink: MemorySink) -> None:
    import asyncio

    adapter = ScriptedAdapter({"script": [busy_turn(delay_ms=100), yield_turn()]})
    task = asyncio.create_task(runner.start(parse_packet(root_packet()), adapter=adapter, run_id="r-msg"))
    await asyncio.sleep(0.03)
    assert runner.send_message("r-msg", "Please use metric units.")
    outcome = await task
    assert outcome.state is RunState.COMPLETE
    second_call = adapter.received[1]
    assert second_call[-1] == {"role": "user", "content": "Please use metric units."}
    messages = [e.data for e in sink.of_run("r-msg") if e.type == "message"]
    assert messages == [{"text": "Please use metric units.", "from": "user"}]
    assert runner.send_message("r-msg", "too late") is False


async def test_model_calls_are_metered_and_charged_to_every_ancestor(runner: Runner, sink: MemorySink) -> None:
    leaf = {"script": [{**yield_turn(), "usage": {"input_tokens": 1_000_000, "output_tokens": 0}}],
            "prices": {"input_per_mtok": 2.0, "output_per_mtok": 8.0}}
    adapter = ScriptedAdapter({"script": [{**call_turn("delegate_task", delegate_args("leaf"), finish="children"),
                                           "usage": {"input_tokens": 0, "output_tokens": 500_000}}],
                               "children": {"leaf": leaf},
                               "prices": {"input_per_mtok": 2.0, "output_per_mtok": 8.0}})
    packet = parse_packet(root_packet(budget={"max_model_calls": 10, "max_tokens": 10_000_000, "max_cost_usd": 100}))
    outcome = await runner.start(packet, adapter=adapter)
    assert outcome.state is RunState.COMPLETE
    assert outcome.usage.cost_usd == pytest.approx(6.0)
    assert outcome.usage.model_calls == 2
    model_calls = [e.data for e in sink.events if e.type == "model_call"]
    assert sorted(call["cost_usd"] for call in model_calls) == pytest.approx([2.0, 4.0])
    assert all("duration_ms" in call for call in model_calls)


async def test_a_hard_budget_limit_fails_the_run_with_resource_exhausted(runner: Runner) -> None:
    chatty = busy_turn(600)
    adapter = ScriptedAdapter({"script": [chatty, chatty, yield_turn()]})
    packet = parse_packet(root_packet(budget={"max_tokens": 1000, "max_model_calls": 10}))
    outcome = await runner.start(packet, adapter=adapter)
    assert outcome.state is RunState.FAILED
    assert outcome.error is not None and outcome.error["code"] == "ERR_RESOURCE_EXHAUSTED"
    assert "max_tokens" in outcome.error["message"]


async def test_the_model_call_limit_stops_the_run_before_another_call(runner: Runner) -> None:
    adapter = ScriptedAdapter({"script": [busy_turn(), busy_turn(), yield_turn()]})
    packet = parse_packet(root_packet(budget={"max_model_calls": 2}, max_iterations=5))
    outcome = await runner.start(packet, adapter=adapter)
    assert outcome.state is RunState.FAILED
    assert outcome.error is not None and outcome.error["code"] == "ERR_RESOURCE_EXHAUSTED"
    assert adapter.position == 2


async def test_the_soft_threshold_asks_a_person_once_per_axis(
        sink: MemorySink, store: MemoryCheckpointStore, settings: RunnerSettings) -> None:
    gate = AutoGate()
    runner = Runner(sink=sink, gate=gate, checkpoints=store, settings=settings)
    turn = busy_turn(450)
    adapter = ScriptedAdapter({"script": [turn, turn, yield_turn()]})
    packet = parse_packet(root_packet(budget={"max_tokens": 1000, "max_model_calls": 10}))
    outcome = await runner.start(packet, adapter=adapter)
    assert outcome.state is RunState.COMPLETE
    budget_asks = [r for r in gate.asked if r.kind == "budget"]
    assert [r.payload["axis"] for r in budget_asks] == ["max_tokens"]
    assert states(sink, outcome.run_id).count("AWAITING_APPROVAL") == 1


async def test_rejecting_the_soft_threshold_ends_the_run_with_resource_exhausted(
        sink: MemorySink, store: MemoryCheckpointStore, settings: RunnerSettings) -> None:
    runner = Runner(sink=sink, gate=AutoGate(Decision.REJECT), checkpoints=store, settings=settings)
    turn = busy_turn(900)
    adapter = ScriptedAdapter({"script": [turn, yield_turn()]})
    packet = parse_packet(root_packet(budget={"max_tokens": 1000, "max_model_calls": 10}))
    outcome = await runner.start(packet, adapter=adapter)
    assert outcome.state is RunState.FAILED
    assert outcome.error is not None and outcome.error["code"] == "ERR_RESOURCE_EXHAUSTED"


async def test_running_out_of_iterations_fails_the_run(runner: Runner) -> None:
    adapter = ScriptedAdapter({"script": [busy_turn()] * 3})
    outcome = await runner.start(parse_packet(root_packet(max_iterations=2)), adapter=adapter)
    assert outcome.state is RunState.FAILED
    assert outcome.error is not None and outcome.error["code"] == "ERR_RESOURCE_EXHAUSTED"
    assert "max_iterations" in outcome.error["message"]
    assert adapter.position == 2


async def test_the_clarification_answer_continues_the_same_run(
        sink: MemorySink, store: MemoryCheckpointStore, settings: RunnerSettings) -> None:
    gate = AutoGate(answer="Use euros.")
    runner = Runner(sink=sink, gate=gate, checkpoints=store, settings=settings)
    blocked = yield_turn({}, status="BLOCKED_AWAITING_CLARIFICATION",
                         open_questions=["Which currency?"])
    adapter = ScriptedAdapter({"script": [blocked, yield_turn({"price": 1.5, "currency": "EUR"})]})
    outcome = await runner.start(parse_packet(root_packet()), adapter=adapter)
    assert outcome.state is RunState.COMPLETE
    assert [r.kind for r in gate.asked] == ["clarification"]
    assert gate.asked[0].payload["questions"] == ["Which currency?"]
    assert adapter.received[1][-1] == {"role": "user", "content": "Answer to your question: Use euros."}
    assert states(sink, outcome.run_id).count("WORKING") == 2  # back to work after the answer


async def test_a_refused_clarification_fails_the_run_with_insufficient_context(
        sink: MemorySink, store: MemoryCheckpointStore, settings: RunnerSettings) -> None:
    runner = Runner(sink=sink, gate=AutoGate(Decision.REJECT), checkpoints=store, settings=settings)
    blocked = yield_turn({}, status="BLOCKED_AWAITING_CLARIFICATION", open_questions=["Which one?"])
    outcome = await runner.start(parse_packet(root_packet()), adapter=ScriptedAdapter({"script": [blocked]}))
    assert outcome.state is RunState.FAILED
    assert outcome.error is not None and outcome.error["code"] == "ERR_INSUFFICIENT_CONTEXT"


class _BrokenAdapter(ModelAdapter):
    name = "broken"

    def __init__(self, error: Exception) -> None:
        super().__init__({})
        self.error = error

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *,
                       on_text: Any = None) -> ModelTurn:
        raise self.error


async def test_a_provider_error_ends_the_run_failed_with_its_code_and_no_exception(
        runner: Runner, sink: MemorySink) -> None:
    adapter = _BrokenAdapter(ProtocolError(ErrorCode.TOOL_FAILURE, "OpenAI: 503 after 3 retries"))
    outcome = await runner.start(parse_packet(root_packet()), adapter=adapter)
    assert outcome.state is RunState.FAILED
    assert outcome.error == {"code": "ERR_TOOL_FAILURE", "message": "OpenAI: 503 after 3 retries"}
    assert any(e.type == "error" for e in sink.of_run(outcome.run_id))


async def test_an_unexpected_exception_becomes_a_failed_run_saying_what_to_do_not_a_crash(
        runner: Runner, sink: MemorySink, caplog: pytest.LogCaptureFixture) -> None:
    outcome = await runner.start(parse_packet(root_packet()), adapter=_BrokenAdapter(KeyError("boom")))
    assert outcome.state is RunState.FAILED
    assert outcome.error is not None and outcome.error["code"] == "ERR_TOOL_FAILURE"
    # a person reads what happened and what to do; the exception is for the log, under the run
    message = outcome.error["message"]
    assert "KeyError" not in message and "boom" not in message
    assert "internal error in Handoff" in message and "Try it again" in message and outcome.run_id in message
    assert "KeyError" in caplog.text and outcome.run_id in caplog.text
    assert sink.of_run(outcome.run_id)[-1].type == "result"


async def test_a_hand_off_protocol_delegate_task_call_spawns_a_child_with_its_announce_as_the_tool_result(
        runner: Runner, sink: MemorySink) -> None:
    arguments = {**HANDOFF_DELEGATE_TASK_ARGS}
    adapter = ScriptedAdapter({
        "script": [call_turn("delegate_task", arguments), yield_turn({"price": 175.22})],
        "children": {"researcher": {"script": [yield_turn(HANDOFF_SUCCESS_RESPONSE["output_payload"])]}}})
    outcome = await runner.start(parse_packet(root_packet()), adapter=adapter)
    assert outcome.state is RunState.COMPLETE
    tool_message = adapter.received[1][-1]
    assert tool_message["role"] == "tool" and tool_message["name"] == "delegate_task"
    import json
    announce = json.loads(tool_message["content"])
    assert announce["status"] == "success"
    assert announce["result"]["output_payload"]["currency"] == "USD"
    assert announce["usage"]["model_calls"] == 1
    assert announce["session_key"].startswith("agent:main:subagent:")


async def test_input_data_is_checked_against_the_skills_input_schema(runner: Runner, sink: MemorySink) -> None:
    from delegations.protocol.manifest import load_manifest

    from .protocol_examples import HANDOFF_MANIFEST

    skill = load_manifest(HANDOFF_MANIFEST)
    packet = parse_packet(root_packet(input_data={"repo_path": 3}))
    outcome = await runner.start(packet, adapter=ScriptedAdapter({"script": [yield_turn()]}), skill=skill)
    assert outcome.state is RunState.REJECTED
    assert outcome.error is not None and outcome.error["code"] == "ERR_INVALID_PACKET"
    assert any(issue["field"].startswith("input_data") for issue in outcome.error["issues"])


async def test_a_skill_gives_its_output_schema_and_capabilities_to_the_run(runner: Runner, sink: MemorySink) -> None:
    from delegations.protocol.manifest import load_manifest

    from .protocol_examples import HANDOFF_MANIFEST

    skill = load_manifest(HANDOFF_MANIFEST)
    packet = parse_packet(root_packet(input_data={"repo_path": "/src", "strict_mode": True}))
    good = yield_turn({"vulnerabilities": [], "sloc": 1200})
    adapter = ScriptedAdapter({"script": [yield_turn({"sloc": "many"}), good]})
    outcome = await runner.start(packet, adapter=adapter, skill=skill)
    assert outcome.state is RunState.COMPLETE, outcome.error
    assert adapter.position == 2  # the first answer broke the skill's output schema
    offered = [tool["name"] for tool in adapter.received_tools[0]]
    assert "read_file" in offered and "run_command" not in offered   # subprocesses are off


async def test_a_packet_naming_a_skill_is_resolved_through_the_registry(
        sink: MemorySink, store: MemoryCheckpointStore, settings: RunnerSettings) -> None:
    from delegations.protocol.manifest import SkillManifest, load_manifest

    from .protocol_examples import HANDOFF_MANIFEST

    asked: list[str] = []

    async def registry(ref: str) -> SkillManifest | None:
        asked.append(ref)
        return load_manifest(HANDOFF_MANIFEST) if ref == "SourceCodeAalyzer@1.2.0" else None

    runner = Runner(sink=sink, gate=AutoGate(), checkpoints=store, settings=settings, skills=registry)
    known = parse_packet(root_packet(skill="SourceCodeAalyzer@1.2.0", input_data={"repo_path": 1}))
    outcome = await runner.start(known, adapter=ScriptedAdapter({"script": [yield_turn()]}))
    assert outcome.state is RunState.REJECTED and outcome.error is not None
    assert "input_schema" in outcome.error["message"]
    unknown = parse_packet(root_packet(skill="Nope@1.0.0"))
    outcome = await runner.start(unknown, adapter=ScriptedAdapter({"script": [yield_turn()]}))
    assert outcome.state is RunState.REJECTED and outcome.error is not None
    assert "Nope@1.0.0" in outcome.error["message"]
    assert asked == ["SourceCodeAalyzer@1.2.0", "Nope@1.0.0"]


def test_run_ids_are_random_version_4_uuids_in_hex() -> None:
    import uuid

    from delegations.protocol.runner import new_run_id

    ids = {new_run_id() for _ in range(100)}
    assert len(ids) == 100
    for run_id in ids:
        parsed = uuid.UUID(run_id)
        assert parsed.hex == run_id and parsed.version == 4 and parsed.variant == uuid.RFC_4122
