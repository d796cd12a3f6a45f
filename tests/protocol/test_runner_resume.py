"""Stopping and continuing runs: parking on approvals, resume, crashes, cancellation, timeouts."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

from delegations.protocol.adapters.scripted import ScriptedAdapter
from delegations.protocol.approvals import ApprovalDecision, Decision
from delegations.protocol.checkpoints import Checkpoint, MemoryCheckpointStore
from delegations.protocol.events import MemorySink
from delegations.protocol.lifecycle import RunState
from delegations.protocol.packet import parse_packet
from delegations.protocol.runner import Runner, RunnerSettings

from .conftest import ParkingGate, call_turn, delegate_args, root_packet, yield_turn


def runner_with(gate: Any, store: MemoryCheckpointStore, settings: RunnerSettings,
                sink: MemorySink | None = None) -> Runner:
    return Runner(sink=sink or MemorySink(), gate=gate, checkpoints=store, settings=settings)


class WatchedSink(MemorySink):
    """A MemorySink a test can wait on until the events it expects have arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = asyncio.Event()

    async def emit(self, run_id: str, type: str, data: dict[str, Any]) -> None:
        await super().emit(run_id, type, data)
        self.changed.set()

    def count(self, type: str) -> int:
        return len(self.of_type(type))

    async def until(self, done: Any) -> None:
        while not done():
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), timeout=5)


def runner_tasks() -> set[asyncio.Task[Any]]:
    return {task for task in asyncio.all_tasks() if task.get_name().startswith("handoff-run-")}


async def test_an_approval_parks_the_run_and_resume_continues_with_the_decision(
        store: MemoryCheckpointStore, settings: RunnerSettings, workspace: Path) -> None:
    (workspace / "old.log").write_text("stale\n")
    gate = ParkingGate()
    config = {"script": [call_turn("delete_file", {"path": "old.log"}), yield_turn({"deleted": True})]}
    packet = parse_packet(root_packet(capabilities=["fs_read", "file_delete"]))
    first = runner_with(gate, store, settings)
    outcome = await first.start(packet, adapter=ScriptedAdapter(config), run_id="r-park", workspace=workspace)
    assert outcome.state is RunState.AWAITING_APPROVAL
    assert outcome.parked is not None and outcome.parked.kind == "capability"
    assert outcome.parked.payload["tool"] == "delete_file"
    assert (workspace / "old.log").exists()
    checkpoint = await store.load("r-park")
    assert checkpoint is not None and checkpoint.state == "AWAITING_APPROVAL"
    assert checkpoint.parked is not None and checkpoint.parked["key"] == outcome.parked.key

    gate.decide_key(outcome.parked.key, ApprovalDecision(Decision.APPROVE, decided_by="alice"))
    sink = MemorySink()
    second = runner_with(gate, store, settings, sink)   # a new worker picks the run up
    resumed = await second.resume("r-park")
    assert resumed.state is RunState.COMPLETE
    assert not (workspace / "old.log").exists()
    assert [request.key for request in gate.asked] == [outcome.parked.key] * 2
    states = [e.data["state"] for e in sink.of_run("r-park") if e.type == "state"]
    assert states[0] == "WORKING" and states[-1] == "COMPLETE"


async def test_a_rejected_approval_tells_the_model_it_was_refused_by_a_person(
        store: MemoryCheckpointStore, settings: RunnerSettings, workspace: Path) -> None:
    (workspace / "keep.txt").write_text("precious\n")
    gate = ParkingGate()
    adapter = ScriptedAdapter({"script": [call_turn("delete_file", {"path": "keep.txt"}), yield_turn()]})
    packet = parse_packet(root_packet(capabilities=["file_delete"]))
    parked = await runner_with(gate, store, settings).start(packet, adapter=adapter, run_id="r-no",
                                                            workspace=workspace)
    assert parked.parked is not None
    gate.decide_key(parked.parked.key, ApprovalDecision(Decision.REJECT, comment="we still need it"))
    outcome = await runner_with(gate, store, settings).resume("r-no")
    assert outcome.state is RunState.COMPLETE
    assert (workspace / "keep.txt").exists()
    checkpoint = await store.load("r-no")
    assert checkpoint is not None
    tool_message = next(m for m in checkpoint.messages if m.get("role") == "tool")
    assert "Refused by a person: we still need it" in tool_message["content"]


async def test_an_edit_decision_replaces_the_tool_arguments(
        sink: MemorySink, store: MemoryCheckpointStore, settings: RunnerSettings, workspace: Path) -> None:
    (workspace / "a.txt").write_text("a\n")
    (workspace / "b.txt").write_text("b\n")
    gate = ParkingGate()
    adapter = ScriptedAdapter({"script": [call_turn("delete_file", {"path": "a.txt"}), yield_turn()]})
    packet = parse_packet(root_packet(capabilities=["file_delete"]))
    parked = await runner_with(gate, store, settings, sink).start(packet, adapter=adapter, run_id="r-edit",
                                                                  workspace=workspace)
    assert parked.parked is not None
    gate.decide_key(parked.parked.key, ApprovalDecision(Decision.EDIT, edited_arguments={"path": "b.txt"}))
    outcome = await runner_with(gate, store, settings).resume("r-edit")
    assert outcome.state is RunState.COMPLETE
    assert (workspace / "a.txt").exists() and not (workspace / "b.txt").exists()


async def test_a_parked_child_parks_its_parent_and_resume_continues_it_from_its_checkpoint(
        store: MemoryCheckpointStore, settings: RunnerSettings, workspace: Path) -> None:
    (workspace / "tmp.txt").write_text("x\n")
    gate = ParkingGate()
    config = {
        "script": [{"tool_calls": [
            {"name": "delegate_task", "arguments": delegate_args("cleaner")},
            {"name": "delegate_task", "arguments": delegate_args("reader")}], "finish": "children"}],
        "children": {
            "cleaner": {"script": [call_turn("delete_file", {"path": "tmp.txt"}), yield_turn({"clean": True})]},
            "reader": {"script": [yield_turn({"answer": 42})]},
        }}
    packet = parse_packet(root_packet(capabilities=["fs_read", "file_delete"]))
    sink = MemorySink()
    outcome = await runner_with(gate, store, settings, sink).start(
        packet, adapter=ScriptedAdapter(config), run_id="r-tree", workspace=workspace)
    assert outcome.state is RunState.AWAITING_APPROVAL
    assert outcome.parked is not None and outcome.parked.kind == "capability"
    children = {e.data["label"]: e.data["child_run_id"] for e in sink.events if e.type == "child"}
    reader_state = [e.data["state"] for e in sink.of_run(children["reader"]) if e.type == "state"]
    assert reader_state[-1] == "COMPLETE"   # the sibling finished before the parent parked
    assert outcome.parked.run_id == children["cleaner"]
    root_checkpoint = await store.load("r-tree")
    assert root_checkpoint is not None and root_checkpoint.state == "AWAITING_APPROVAL"

    gate.decide_key(outcome.parked.key, ApprovalDecision(Decision.APPROVE))
    sink2 = MemorySink()
    # resuming the child's id resumes the whole tree from its root
    resumed = await runner_with(gate, store, settings, sink2).resume(children["cleaner"])
    assert resumed.run_id == "r-tree"
    assert resumed.state is RunState.COMPLETE, resumed.error
    assert not (workspace / "tmp.txt").exists()
    assert not [e for e in sink2.events if e.type == "child"]          # nothing spawned anew
    assert not [e for e in sink2.of_run(children["reader"])]           # the sibling did not run again
    results = resumed.result.output_payload["children"] if resumed.result else []
    assert [entry["state"] for entry in results] == ["COMPLETE", "COMPLETE"]


class WorkerDied(BaseException):
    """Stands for the worker process dying: not an Exception, so nothing catches it."""


class DyingSink(MemorySink):
    def __init__(self, die_on: str) -> None:
        super().__init__()
        self.die_on = die_on

    async def emit(self, run_id: str, type: str, data: dict[str, Any]) -> None:
        await super().emit(run_id, type, data)
        if type == "tool_result" and data.get("name") == self.die_on:
            raise WorkerDied()


async def test_resume_after_a_crash_never_repeats_a_completed_side_effect(
        store: MemoryCheckpointStore, settings: RunnerSettings, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("one\n")
    (workspace / "junk.txt").write_text("junk\n")
    edit = "FILE: notes.txt\nREPLACE_START\none\nREPLACE_WITH\none\ntwo\nREPLACE_END\n"
    config = {"script": [
        {"tool_calls": [{"name": "apply_edit", "arguments": {"edit": edit}},
                        {"name": "delete_file", "arguments": {"path": "junk.txt"}}]},
        yield_turn({"done": True})]}
    packet = parse_packet(root_packet(capabilities=["fs_read", "fs_write", "file_delete"]))
    gate = ParkingGate()
    gate.decisions = _approve_everything()
    crashing = runner_with(gate, store, settings, DyingSink(die_on="delete_file"))
    try:
        await crashing.start(packet, adapter=ScriptedAdapter(config), run_id="r-crash", workspace=workspace)
    except WorkerDied:
        pass
    else:
        raise AssertionError("the simulated crash did not happen")
    assert (workspace / "notes.txt").read_text() == "one\ntwo\n"
    assert not (workspace / "junk.txt").exists()
    # the junk file comes back: deleting it again would show that the call ran twice
    (workspace / "junk.txt").write_text("junk again\n")

    sink = MemorySink()
    outcome = await runner_with(gate, store, settings, sink).resume("r-crash")
    assert outcome.state is RunState.COMPLETE, outcome.error
    assert (workspace / "notes.txt").read_text() == "one\ntwo\n"       # edited once
    assert (workspace / "junk.txt").read_text() == "junk again\n"      # deleted once
    assert not [e for e in sink.events if e.type == "tool_call"]


def _approve_everything() -> dict[str, ApprovalDecision]:
    class Always(dict[str, ApprovalDecision]):
        def __contains__(self, key: object) -> bool:
            return True

        def __getitem__(self, key: str) -> ApprovalDecision:
            return ApprovalDecision(Decision.APPROVE)

    return Always()


async def test_checkpoints_are_saved_after_every_model_call_and_tool_call(
        runner: Runner, store: MemoryCheckpointStore, workspace: Path) -> None:
    config = {"script": [call_turn("list_files", {}), yield_turn()]}
    packet = parse_packet(root_packet(capabilities=["fs_read"]))
    outcome = await runner.start(packet, adapter=ScriptedAdapter(config), workspace=workspace)
    assert outcome.state is RunState.COMPLETE
    # model call, tool call, turn end, model call, end
    assert store.saves >= 5
    checkpoint = await store.load(outcome.run_id)
    assert checkpoint is not None and checkpoint.outcome is not None
    assert Checkpoint.model_validate_json(checkpoint.model_dump_json()).run_id == outcome.run_id
    assert checkpoint.adapter_state == {"position": 2}


async def test_resuming_a_finished_run_returns_its_outcome_without_running_it(
        runner: Runner, store: MemoryCheckpointStore, settings: RunnerSettings) -> None:
    outcome = await runner.start(parse_packet(root_packet()), adapter=ScriptedAdapter({"script": [yield_turn()]}))
    again = await runner_with(ParkingGate(), store, settings).resume(outcome.run_id)
    assert again.state is RunState.COMPLETE
    assert again.result == outcome.result


async def test_cancelling_a_tree_stops_every_run_within_a_second_and_leaves_no_task(
        store: MemoryCheckpointStore, settings: RunnerSettings) -> None:
    sink = WatchedSink()
    runner = runner_with(ParkingGate(), store, settings, sink)
    slow_leaf = {"script": [{**yield_turn(), "delay_ms": 30_000}]}
    middle = {"script": [{"tool_calls": [{"name": "delegate_task", "arguments": delegate_args(f"leaf{i}")}
                                         for i in range(2)], "finish": "children"}],
              "children": {f"leaf{i}": slow_leaf for i in range(2)}}
    config = {"script": [{"tool_calls": [{"name": "delegate_task", "arguments": delegate_args(f"mid{i}")}
                                         for i in range(2)], "finish": "children"}],
              "children": {f"mid{i}": middle for i in range(2)}}
    packet = parse_packet(root_packet(allow_nested=True))
    before = runner_tasks()
    task = asyncio.create_task(runner.start(packet, adapter=ScriptedAdapter(config), run_id="r-cancel"))
    await sink.until(lambda: sink.count("model_call") >= 3 and sink.count("child") >= 6)
    assert runner.cancel("r-cancel")
    started = time.perf_counter()
    outcome = await asyncio.wait_for(task, timeout=1.0)
    assert time.perf_counter() - started < 1.0
    assert outcome.state is RunState.CANCELLED
    run_ids = {e.run_id for e in sink.events}
    assert len(run_ids) == 7
    for run_id in run_ids:
        final = [e.data["state"] for e in sink.of_run(run_id) if e.type == "state"][-1]
        assert final == "CANCELLED", run_id
        assert sink.of_run(run_id)[-1].type == "result"
    assert runner_tasks() <= before
    assert runner.active_runs() == []
    assert runner.cancel("r-cancel") is False


async def test_cancelling_one_child_reports_it_to_the_parent(
        store: MemoryCheckpointStore, settings: RunnerSettings) -> None:
    sink = WatchedSink()
    runner = runner_with(ParkingGate(), store, settings, sink)
    config = {"script": [{"tool_calls": [
        {"name": "delegate_task", "arguments": delegate_args("slow")},
        {"name": "delegate_task", "arguments": delegate_args("fast")}], "finish": "children"}],
        "children": {"slow": {"script": [{**yield_turn(), "delay_ms": 30_000}]},
                     "fast": {"script": [yield_turn()]}}}
    task = asyncio.create_task(runner.start(parse_packet(root_packet()), adapter=ScriptedAdapter(config)))
    await sink.until(lambda: sink.count("child") >= 2)
    slow = next(e.data["child_run_id"] for e in sink.events if e.type == "child" and e.data["label"] == "slow")
    await asyncio.sleep(0.02)
    assert runner.cancel(slow)
    outcome = await asyncio.wait_for(task, timeout=1.0)
    assert outcome.state is RunState.COMPLETE
    assert outcome.result is not None and outcome.result.status == "PARTIAL_COMPLETION"
    states = {entry["label"]: entry["state"] for entry in outcome.result.output_payload["children"]}
    assert states == {"slow": "CANCELLED", "fast": "COMPLETE"}


async def test_a_timeout_ends_the_run_with_err_timeout_and_cancels_its_descendants(
        runner: Runner, sink: MemorySink) -> None:
    slow_leaf = {"script": [{**yield_turn(), "delay_ms": 30_000}]}
    middle = {"script": [call_turn("delegate_task", delegate_args("leaf"), finish="children")],
              "children": {"leaf": slow_leaf}}
    config = {"script": [call_turn("delegate_task", delegate_args("mid"), finish="children")],
              "children": {"mid": middle}}
    packet = parse_packet(root_packet(allow_nested=True, timeout_s=0.3))
    before = runner_tasks()
    started = time.perf_counter()
    outcome = await runner.start(packet, adapter=ScriptedAdapter(config), run_id="r-timeout")
    assert time.perf_counter() - started < 1.5
    assert outcome.state is RunState.TIMEOUT
    assert outcome.error is not None and outcome.error["code"] == "ERR_TIMEOUT"
    assert outcome.announce is not None and outcome.announce["status"] == "timeout"
    descendants = {e.run_id for e in sink.events} - {"r-timeout"}
    assert len(descendants) == 2
    for run_id in descendants:
        final = [e.data["state"] for e in sink.of_run(run_id) if e.type == "state"][-1]
        assert final in {"CANCELLED", "TIMEOUT"}
    assert runner_tasks() <= before


async def test_a_child_timeout_is_reported_to_the_parent_as_a_timeout_announce(
        runner: Runner, sink: MemorySink) -> None:
    config = {"script": [call_turn("delegate_task", delegate_args("slow", timeout_s=0.1)), yield_turn()],
              "children": {"slow": {"script": [{**yield_turn(), "delay_ms": 30_000}]}}}
    outcome = await runner.start(parse_packet(root_packet()), adapter=ScriptedAdapter(config))
    assert outcome.state is RunState.COMPLETE
    announce = next(e.data for e in sink.events if e.type == "tool_result" and e.run_id == outcome.run_id)
    assert announce["result"]["status"] == "timeout"
    assert announce["result"]["error"]["code"] == "ERR_TIMEOUT"
    # the child hands its parent a FAILURE result the runner wrote for it, not null
    assert announce["result"]["result"]["status"] == "FAILURE"
    assert announce["result"]["result"]["error_report"]["code"] == "ERR_TIMEOUT"


async def test_the_host_cancelling_start_cancels_the_run(runner: Runner, sink: MemorySink) -> None:
    config = {"script": [{**yield_turn(), "delay_ms": 30_000}]}
    task = asyncio.create_task(runner.start(parse_packet(root_packet()), adapter=ScriptedAdapter(config),
                                            run_id="r-host"))
    await asyncio.sleep(0.05)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    final = [e.data["state"] for e in sink.of_run("r-host") if e.type == "state"][-1]
    assert final == "CANCELLED"
    assert runner_tasks() == set()


def test_a_trusted_checkpoint_equals_one_pydantic_builds() -> None:
    values = {name: (field.default_factory() if field.default_factory else field.default)  # type: ignore[call-arg]
              for name, field in Checkpoint.model_fields.items()}
    values.update(run_id="r1", root_run_id="r1", messages=[{"role": "user", "content": "hi"}])
    trusted = Checkpoint.trusted(dict(values))
    assert trusted == Checkpoint.model_construct(**values)
    assert Checkpoint.model_validate_json(trusted.model_dump_json()) == trusted
    assert trusted.model_copy(update={"state": "WORKING"}).state == "WORKING"


async def test_a_clarification_parks_the_run_and_the_answer_resumes_the_same_run(
        store: MemoryCheckpointStore, settings: RunnerSettings) -> None:
    gate = ParkingGate()
    blocked = yield_turn({}, status="BLOCKED_AWAITING_CLARIFICATION", open_questions=["Which currency?"])
    config = {"script": [blocked, yield_turn({"price": 1.5, "currency": "EUR"})]}
    parked = await runner_with(gate, store, settings).start(
        parse_packet(root_packet()), adapter=ScriptedAdapter(config), run_id="r-ask")
    assert parked.state is RunState.AWAITING_APPROVAL
    assert parked.parked is not None and parked.parked.kind == "clarification"
    assert parked.parked.key == "r-ask:clarification:1"
    gate.decide_key(parked.parked.key, ApprovalDecision(Decision.ANSWER, answer="Euros, please."))
    sink = MemorySink()
    outcome = await runner_with(gate, store, settings, sink).resume("r-ask")
    assert outcome.run_id == "r-ask" and outcome.state is RunState.COMPLETE
    assert outcome.result is not None and outcome.result.output_payload["currency"] == "EUR"
    checkpoint = await store.load("r-ask")
    assert checkpoint is not None
    assert {"role": "user", "content": "Answer to your question: Euros, please."} in checkpoint.messages


# --- H9: an approval is announced once, however often the run parks and resumes ------------

def _timeline(sink: MemorySink, run_id: str) -> list[tuple[str, str]]:
    """(type, what) per event of the run: the state, the tool, or request/decision."""
    out = []
    for event in sink.of_run(run_id):
        data = event.data
        if event.type == "state":
            out.append(("state", data["state"]))
        elif event.type in ("tool_call", "tool_result"):
            out.append((event.type, data["name"]))
        elif event.type == "approval":
            out.append(("approval", "decision" if "decision" in data else "request"))
    return out


async def test_a_parked_approval_appears_once_in_the_timeline_across_park_and_resume(
        store: MemoryCheckpointStore, settings: RunnerSettings, workspace: Path) -> None:
    (workspace / "old.log").write_text("stale\n")
    gate = ParkingGate()
    sink = MemorySink()   # one timeline for both workers, as the host's event log keeps it
    config = {"script": [call_turn("delete_file", {"path": "old.log"}), yield_turn({"deleted": True})]}
    packet = parse_packet(root_packet(capabilities=["file_delete"]))
    parked = await runner_with(gate, store, settings, sink).start(
        packet, adapter=ScriptedAdapter(config), run_id="r-once", workspace=workspace)
    assert parked.parked is not None
    # a resume before anyone decided parks again without adding a single event
    before = len(sink.events)
    again = await runner_with(gate, store, settings, sink).resume("r-once")
    assert again.state is RunState.AWAITING_APPROVAL and len(sink.events) == before

    gate.decide_key(parked.parked.key, ApprovalDecision(Decision.APPROVE, decided_by="alice"))
    outcome = await runner_with(gate, store, settings, sink).resume("r-once")
    assert outcome.state is RunState.COMPLETE, outcome.error
    assert not (workspace / "old.log").exists()
    assert _timeline(sink, "r-once") == [
        ("state", "PENDING"), ("state", "ACCEPTED"), ("state", "WORKING"),
        ("tool_call", "delete_file"), ("approval", "request"), ("state", "AWAITING_APPROVAL"),
        ("state", "WORKING"), ("approval", "decision"), ("tool_result", "delete_file"),
        ("state", "COMPLETE")]
    decision = next(e.data for e in sink.of_run("r-once") if e.type == "approval" and "decision" in e.data)
    assert decision["decision"] == "approve" and decision["decided_by"] == "alice"
    resumed = next(e.data for e in sink.of_run("r-once")
                   if e.type == "state" and e.data["previous"] == "AWAITING_APPROVAL")
    assert resumed.get("resumed") is True
    assert [request.key for request in gate.asked] == [parked.parked.key] * 3


async def test_a_clarification_is_asked_once_in_the_timeline_across_park_and_resume(
        store: MemoryCheckpointStore, settings: RunnerSettings) -> None:
    gate = ParkingGate()
    sink = MemorySink()
    blocked = yield_turn({}, status="BLOCKED_AWAITING_CLARIFICATION", open_questions=["Which currency?"])
    config = {"script": [blocked, yield_turn({"price": 1.5, "currency": "EUR"})]}
    parked = await runner_with(gate, store, settings, sink).start(
        parse_packet(root_packet()), adapter=ScriptedAdapter(config), run_id="r-ask-once")
    assert parked.parked is not None
    gate.decide_key(parked.parked.key, ApprovalDecision(Decision.ANSWER, answer="Euros."))
    outcome = await runner_with(gate, store, settings, sink).resume("r-ask-once")
    assert outcome.state is RunState.COMPLETE, outcome.error
    timeline = _timeline(sink, "r-ask-once")
    assert timeline.count(("approval", "request")) == 1
    assert timeline.count(("approval", "decision")) == 1
    assert timeline.count(("state", "AWAITING_APPROVAL")) == 1
    assert [state for kind, state in timeline if kind == "state"] == [
        "PENDING", "ACCEPTED", "WORKING", "AWAITING_APPROVAL", "WORKING", "COMPLETE"]
    answers = [e.data["text"] for e in sink.of_run("r-ask-once") if e.type == "message"]
    assert answers == ["Euros."]


class DiesWhileDeciding:
    """A gate whose worker dies while a person is still deciding; later it answers."""

    def __init__(self) -> None:
        self.dying = True

    async def decide(self, request: Any) -> ApprovalDecision:
        if self.dying:
            raise WorkerDied()
        return ApprovalDecision(Decision.APPROVE)


async def test_a_worker_dying_during_an_approval_does_not_announce_it_again_on_resume(
        store: MemoryCheckpointStore, settings: RunnerSettings, workspace: Path) -> None:
    (workspace / "junk.txt").write_text("junk\n")
    gate = DiesWhileDeciding()
    sink = MemorySink()
    config = {"script": [call_turn("delete_file", {"path": "junk.txt"}), yield_turn({"done": True})]}
    packet = parse_packet(root_packet(capabilities=["file_delete"]))
    try:
        await runner_with(gate, store, settings, sink).start(
            packet, adapter=ScriptedAdapter(config), run_id="r-died", workspace=workspace)
    except WorkerDied:
        pass
    else:
        raise AssertionError("the simulated crash did not happen")
    checkpoint = await store.load("r-died")
    assert checkpoint is not None and checkpoint.approvals_asked == ["r-died:capability:call_0_0"]
    gate.dying = False
    outcome = await runner_with(gate, store, settings, sink).resume("r-died")
    assert outcome.state is RunState.COMPLETE, outcome.error
    timeline = _timeline(sink, "r-died")
    assert timeline.count(("tool_call", "delete_file")) == 1
    assert timeline.count(("approval", "request")) == 1
    assert timeline.count(("approval", "decision")) == 1
    assert timeline.count(("state", "AWAITING_APPROVAL")) == 1
    assert not (workspace / "junk.txt").exists()
