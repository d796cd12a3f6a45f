"""What the runner does with each decision a person takes: per kind, always-allow across the
tree and across resumes, raised budgets, and results that failed validation."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from delegations.protocol.adapters.scripted import ScriptedAdapter
from delegations.protocol.approvals import (
    ApprovalDecision,
    ApprovalKind,
    Decision,
    allowed_decisions,
    ancestors_left,
    raised_budget,
)
from delegations.protocol.budgets import Budget, Usage
from delegations.protocol.checkpoints import MemoryCheckpointStore
from delegations.protocol.events import MemorySink
from delegations.protocol.lifecycle import RunState
from delegations.protocol.packet import parse_packet
from delegations.protocol.runner import Runner, RunnerSettings, RunOutcome

from .conftest import ParkingGate, call_turn, delegate_args, root_packet, yield_turn


def runner_with(gate: Any, store: MemoryCheckpointStore, settings: RunnerSettings,
                sink: MemorySink | None = None) -> Runner:
    return Runner(sink=sink or MemorySink(), gate=gate, checkpoints=store, settings=settings)


async def park_then(decision: ApprovalDecision, *, config: dict[str, Any], packet: dict[str, Any],
                    store: MemoryCheckpointStore, settings: RunnerSettings, workspace: Path,
                    run_id: str = "r1", sink: MemorySink | None = None) -> tuple[RunOutcome, ParkingGate]:
    """Start a run until it parks, decide its question with ``decision``, resume it."""
    gate = ParkingGate()
    parked = await runner_with(gate, store, settings).start(
        parse_packet(packet), adapter=ScriptedAdapter(config), run_id=run_id, workspace=workspace)
    assert parked.state is RunState.AWAITING_APPROVAL and parked.parked is not None
    gate.decide_key(parked.parked.key, decision)
    return await runner_with(gate, store, settings, sink).resume(run_id), gate


def test_each_kind_allows_its_own_decisions_from_one_table() -> None:
    assert allowed_decisions(ApprovalKind.CAPABILITY) == (Decision.APPROVE, Decision.EDIT, Decision.REJECT)
    assert allowed_decisions("capability_request") == (Decision.APPROVE, Decision.REJECT)
    assert allowed_decisions("clarification") == (Decision.ANSWER, Decision.REJECT)
    assert allowed_decisions("budget") == (Decision.APPROVE, Decision.REJECT)
    assert allowed_decisions("invalid_result") == (Decision.APPROVE, Decision.RETRY, Decision.REJECT)
    assert allowed_decisions("bribe") == ()


async def test_a_rejected_tool_call_returns_err_constraint_violation_with_the_comment(
        store: MemoryCheckpointStore, settings: RunnerSettings, workspace: Path) -> None:
    (workspace / "keep.txt").write_text("precious\n")
    sink = MemorySink()
    outcome, _ = await park_then(
        ApprovalDecision(Decision.REJECT, comment="Keep it, the report reads it", decided_by="alice"),
        config={"script": [call_turn("delete_file", {"path": "keep.txt"}), yield_turn()]},
        packet=root_packet(capabilities=["file_delete"]), store=store, settings=settings,
        workspace=workspace, sink=sink)
    assert outcome.state is RunState.COMPLETE and (workspace / "keep.txt").exists()
    [refused] = [e.data for e in sink.of_type("tool_result")]
    assert refused["ok"] is False and refused["error"]["code"] == "ERR_CONSTRAINT_VIOLATION"
    assert "Keep it, the report reads it" in refused["error"]["message"]
    decided = [e.data for e in sink.of_type("approval") if "decision" in e.data]
    assert decided[-1]["decision"] == "reject" and decided[-1]["decided_by"] == "alice"


async def test_always_allow_covers_later_calls_of_the_tool_in_the_run_and_its_subagents(
        store: MemoryCheckpointStore, settings: RunnerSettings, workspace: Path) -> None:
    for name in ("a.txt", "b.txt", "c.txt"):
        (workspace / name).write_text("x\n")
    config = {
        "script": [call_turn("delete_file", {"path": "a.txt"}),
                   call_turn("delete_file", {"path": "b.txt"}),
                   call_turn("delegate_task", delegate_args("cleaner", capabilities=["file_delete"])),
                   yield_turn({"answer": 42})],
        "children": {"cleaner": {"script": [call_turn("delete_file", {"path": "c.txt"}),
                                            yield_turn({"answer": 42})]}}}
    sink = MemorySink()
    outcome, gate = await park_then(
        ApprovalDecision(Decision.APPROVE, decided_by="alice", always_allow=True), config=config,
        packet=root_packet(capabilities=["file_delete"]), store=store, settings=settings,
        workspace=workspace, sink=sink)
    assert outcome.state is RunState.COMPLETE, outcome.error
    assert not any((workspace / name).exists() for name in ("a.txt", "b.txt", "c.txt"))
    assert {request.key for request in gate.asked} == {gate.asked[0].key}   # one question only
    skipped = [e for e in sink.of_type("log") if e.data.get("always_allowed_by") == "alice"]
    assert len(skipped) == 2 and {e.run_id for e in skipped} != {"r1"}       # the root's and the child's
    checkpoint = await store.load("r1")
    assert checkpoint is not None and checkpoint.always_allowed == {"delete_file": "alice"}


async def test_always_allow_survives_a_park_and_resume_and_is_kept_out_of_other_tools(
        store: MemoryCheckpointStore, settings: RunnerSettings, workspace: Path) -> None:
    (workspace / "a.txt").write_text("x\n")
    (workspace / "b.txt").write_text("x\n")
    config = {"script": [call_turn("delete_file", {"path": "a.txt"}),
                         call_turn("http_get", {"url": "http://127.0.0.1:9/"}),
                         call_turn("delete_file", {"path": "b.txt"}),
                         yield_turn()]}
    gate = ParkingGate()
    packet = parse_packet(root_packet(capabilities=["file_delete", "network_outbound"]))
    first = await runner_with(gate, store, settings).start(
        packet, adapter=ScriptedAdapter(config), run_id="r2", workspace=workspace)
    assert first.parked is not None
    gate.decide_key(first.parked.key, ApprovalDecision(Decision.APPROVE, decided_by="alice", always_allow=True))
    second = await runner_with(gate, store, settings).resume("r2")
    # http_get still asks (always-allow names one tool), and parks the run again
    assert second.state is RunState.AWAITING_APPROVAL and second.parked is not None
    assert second.parked.payload["tool"] == "http_get"
    gate.decide_key(second.parked.key, ApprovalDecision(Decision.REJECT, comment="no network"))
    third = await runner_with(gate, store, settings).resume("r2")
    assert third.state is RunState.COMPLETE
    assert not (workspace / "b.txt").exists()     # allowed from the checkpoint, not asked again
    assert len({request.key for request in gate.asked}) == 2


async def test_an_edit_runs_the_tool_with_the_edited_arguments(
        store: MemoryCheckpointStore, settings: RunnerSettings, workspace: Path) -> None:
    (workspace / "old.log").write_text("x\n")
    (workspace / "keep.txt").write_text("x\n")
    outcome, _ = await park_then(
        ApprovalDecision(Decision.EDIT, edited_arguments={"path": "old.log"}, decided_by="alice"),
        config={"script": [call_turn("delete_file", {"path": "keep.txt"}), yield_turn()]},
        packet=root_packet(capabilities=["file_delete"]), store=store, settings=settings, workspace=workspace)
    assert outcome.state is RunState.COMPLETE
    assert (workspace / "keep.txt").exists() and not (workspace / "old.log").exists()


def budget_config(turns: int = 4) -> dict[str, Any]:
    """Each turn uses 40 tokens: with max_tokens 100 the second crosses 80%."""
    busy = {"tool_calls": [{"name": "list_files", "arguments": {}}],
            "usage": {"input_tokens": 40, "output_tokens": 0}}
    return {"script": [*[busy] * (turns - 1), {**yield_turn(), "usage": {"input_tokens": 1, "output_tokens": 0}}]}


async def test_a_raised_budget_lets_the_run_go_on_and_asks_again_near_the_new_limit(
        store: MemoryCheckpointStore, settings: RunnerSettings, workspace: Path) -> None:
    gate = ParkingGate()
    sink = MemorySink()
    packet = parse_packet(root_packet(capabilities=["fs_read"], budget={"max_tokens": 100}))
    first = await runner_with(gate, store, settings).start(
        packet, adapter=ScriptedAdapter(budget_config(6)), run_id="r3", workspace=workspace)
    assert first.parked is not None and first.parked.kind == "budget"
    assert first.parked.key == "r3:budget:max_tokens"
    gate.decide_key(first.parked.key, ApprovalDecision(Decision.APPROVE, decided_by="alice",
                                                       budget_limit={"max_tokens": 200}))
    second = await runner_with(gate, store, settings, sink).resume("r3")
    raised = [e.data for e in sink.of_type("log") if e.data.get("raised")]
    assert raised and raised[0]["budget"]["max_tokens"] == 200 and "alice" in raised[0]["message"]
    # 160 of 200 tokens: the soft threshold of the new limit asks again, with a key of its own
    assert second.state is RunState.AWAITING_APPROVAL and second.parked is not None
    assert second.parked.key == "r3:budget:max_tokens:200"
    checkpoint = await store.load("r3")
    assert checkpoint is not None and checkpoint.budget["max_tokens"] == 200
    gate.decide_key(second.parked.key, ApprovalDecision(Decision.REJECT, comment="enough"))
    stopped = await runner_with(gate, store, settings).resume("r3")
    assert stopped.state is RunState.FAILED
    assert stopped.error is not None and stopped.error["code"] == "ERR_RESOURCE_EXHAUSTED"
    assert "enough" in stopped.error["message"]


def test_a_raise_never_goes_beyond_what_the_parent_has_left() -> None:
    child = Budget(max_tokens=100)
    left = ancestors_left([(Budget(max_tokens=1000), Usage(input_tokens=700))])
    assert left is not None and left.max_tokens == 300
    ok, problems = raised_budget(child, {"max_tokens": 380}, usage=Usage(input_tokens=80), ancestors=left)
    assert not problems and ok.max_tokens == 380
    same, problems = raised_budget(child, {"max_tokens": 381}, usage=Usage(input_tokens=80), ancestors=left)
    assert same is child and "at most 380" in problems[0]
    _, problems = raised_budget(child, {"max_tokens": 50, "max_concurrency": 3, "max_cost_usd": True,
                                        "max_model_calls": 9}, usage=Usage(), ancestors=None)
    assert len(problems) == 4 and "not above the current limit" in problems[0]
    assert "no max_model_calls limit to raise" in problems[3]


async def test_a_child_raise_above_its_parents_remainder_is_not_taken(
        store: MemoryCheckpointStore, settings: RunnerSettings, workspace: Path) -> None:
    config = {"script": [call_turn("delegate_task", delegate_args("spender", budget={"max_tokens": 100})),
                         yield_turn()],
              "children": {"spender": budget_config(4)}}
    sink = MemorySink()
    await park_then(
        ApprovalDecision(Decision.APPROVE, budget_limit={"max_tokens": 10_000}),
        config=config, packet=root_packet(capabilities=["fs_read"], budget={"max_tokens": 1000}),
        store=store, settings=settings, workspace=workspace, sink=sink)
    refused = [e for e in sink.of_type("log") if e.data.get("problems")]
    assert refused and "above what the parent has left" in refused[0].data["message"]
    child = await store.load(refused[0].run_id)
    assert child is not None and child.budget["max_tokens"] == 100


def invalid_config(*extra_turns: dict[str, Any]) -> dict[str, Any]:
    """Two answers that miss the expected output schema (the first gets the correction turn)."""
    wrong = yield_turn({"answer": "forty-two"})
    return {"script": [wrong, wrong, *extra_turns]}


@pytest.fixture
def asking(settings: RunnerSettings) -> RunnerSettings:
    return dataclasses.replace(settings, invalid_result_inbox=True)


INVALID_PACKET = root_packet(expected_output_schema={"answer": "integer"}, success_criteria=["JSON is schema-valid"])


async def test_an_invalid_result_accepted_as_partial_completes_with_it(
        store: MemoryCheckpointStore, asking: RunnerSettings, workspace: Path) -> None:
    outcome, gate = await park_then(ApprovalDecision(Decision.APPROVE, decided_by="alice", comment="good enough"),
                                    config=invalid_config(), packet=INVALID_PACKET, store=store,
                                    settings=asking, workspace=workspace)
    assert gate.asked[0].kind == "invalid_result" and gate.asked[0].payload["problems"]
    assert outcome.state is RunState.COMPLETE
    assert outcome.result is not None and outcome.result.status == "PARTIAL_COMPLETION"
    assert outcome.result.output_payload == {"answer": "forty-two"}
    assert any("Accepted as partial by alice" in warning for warning in outcome.result.warnings)


async def test_an_invalid_result_retried_starts_a_fresh_context_with_the_failure(
        store: MemoryCheckpointStore, asking: RunnerSettings, workspace: Path) -> None:
    sink = MemorySink()
    outcome, _ = await park_then(ApprovalDecision(Decision.RETRY, decided_by="alice", comment="answer a number"),
                                 config=invalid_config(yield_turn({"answer": 42})), packet=INVALID_PACKET,
                                 store=store, settings=asking, workspace=workspace, sink=sink)
    assert outcome.state is RunState.COMPLETE and outcome.result is not None
    assert outcome.result.status == "SUCCESS" and outcome.result.output_payload == {"answer": 42}
    assert any(e.data.get("action") == "retry" for e in sink.of_type("log"))
    checkpoint = await store.load("r1")
    assert checkpoint is not None
    assert checkpoint.packet["previous_failure"]["fix_instructions"] == "answer a number"


async def test_an_invalid_result_failed_by_a_person_ends_with_err_invalid_result(
        store: MemoryCheckpointStore, asking: RunnerSettings, workspace: Path) -> None:
    outcome, _ = await park_then(ApprovalDecision(Decision.REJECT, comment="wrong type twice"),
                                 config=invalid_config(), packet=INVALID_PACKET, store=store,
                                 settings=asking, workspace=workspace)
    assert outcome.state is RunState.FAILED
    assert outcome.error is not None and outcome.error["code"] == "ERR_INVALID_RESULT"
    assert "wrong type twice" in outcome.error["message"]


async def test_without_the_inbox_policy_an_invalid_result_fails_at_once(
        store: MemoryCheckpointStore, settings: RunnerSettings, workspace: Path) -> None:
    gate = ParkingGate()
    outcome = await runner_with(gate, store, settings).start(
        parse_packet(INVALID_PACKET), adapter=ScriptedAdapter(invalid_config()), run_id="r9", workspace=workspace)
    assert outcome.state is RunState.FAILED and not gate.asked


async def test_an_automatic_approval_never_accepts_an_invalid_result(
        store: MemoryCheckpointStore, asking: RunnerSettings, workspace: Path) -> None:
    from delegations.protocol.approvals import AutoGate

    gate = AutoGate()
    outcome = await runner_with(gate, store, asking).start(
        parse_packet(INVALID_PACKET), adapter=ScriptedAdapter(invalid_config()), run_id="r10", workspace=workspace)
    assert [request.kind for request in gate.asked] == ["invalid_result"]
    assert outcome.state is RunState.FAILED and outcome.error is not None
    assert outcome.error["code"] == "ERR_INVALID_RESULT"
