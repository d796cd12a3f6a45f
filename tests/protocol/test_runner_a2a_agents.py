"""A remote A2A agent's skill (served by an A2A server built with the official SDK, on
loopback) runs as a subagent: a child run in the tree when a run's model calls its tool
``a2a__<agent>__<skill>``, or a run of its own when a packet names ``<agent>/<skill>``.
Within the run's capabilities, parked when a person must approve, its questions and
sign-in requests put to the local inbox, its result judged against the output schema,
inside its time and call budget, and a worker that dies after sending follows the remote
task again instead of sending it twice."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from delegations.protocol.a2a_client import RemoteAgentConfig
from delegations.protocol.a2a_subagents import RemoteAgents
from delegations.protocol.adapters.scripted import ScriptedAdapter
from delegations.protocol.approvals import ApprovalDecision, ApprovalKind, AutoGate, Decision
from delegations.protocol.checkpoints import Checkpoint, MemoryCheckpointStore
from delegations.protocol.events import MemorySink
from delegations.protocol.lifecycle import RunState
from delegations.protocol.runner import Runner, RunnerSettings, RunOutcome

from . import test_a2a_client
from .conftest import ParkingGate, call_turn, root_packet, yield_turn
from .test_a2a_client import ENV, SECRET, SKILLS, ScriptedAgent
from .test_runner_interrupted_calls import WorkerDied

remote = test_a2a_client.remote     # the scripted remote agent on loopback, one per module
ANSWER = "a2a__remote__answer"
GOAL = {"goal": "Pick the cheapest option.", "input": {"options": ["a", "b"]}}


def agents(url: str, *, capability: str = "search", price: float = 0.0) -> RemoteAgents:
    config = RemoteAgentConfig(name="remote", card_url=url, skills=SKILLS, capability=capability,
                               secret_env="HANDOFF_A2A_SECRET_REMOTE", price_per_call_usd=price)
    return RemoteAgents([config], environ=ENV)


def a2a_runner(sink: MemorySink, settings: RunnerSettings, remote_agents: RemoteAgents,
               gate: Any = None, checkpoints: Any = None) -> Runner:
    return Runner(sink=sink, gate=gate or AutoGate(), checkpoints=checkpoints or MemoryCheckpointStore(),
                  settings=settings, remote=remote_agents)


async def run_script(runner: Runner, turns: list[dict[str, Any]], capabilities: list[str],
                     workspace: Path, **packet: Any) -> tuple[RunOutcome, ScriptedAdapter]:
    adapter = ScriptedAdapter({"script": [*turns, yield_turn()]})
    outcome = await runner.start(root_packet(capabilities=capabilities, **packet), adapter=adapter,
                                 workspace=workspace)
    return outcome, adapter


def remote_packet(skill: str, **fields: Any) -> dict[str, Any]:
    """A run of the remote agent's ``skill`` itself."""
    fields.setdefault("input_data", GOAL["input"])
    return root_packet(skill=f"remote/{skill}", capabilities=["search"], instruction_set=None,
                       subagent_type=None, **fields)


def child_of(sink: MemorySink, run_id: str) -> str:
    [child] = [e.data["child_run_id"] for e in sink.of_run(run_id) if e.type == "child"]
    return str(child)


def results(sink: MemorySink, run_id: str) -> list[dict[str, Any]]:
    return [event.data for event in sink.of_run(run_id) if event.type == "tool_result"]


def final(sink: MemorySink, run_id: str) -> dict[str, Any]:
    [result] = [event.data for event in sink.of_run(run_id) if event.type == "result"]
    return result


async def test_a_call_of_a_remote_skill_is_a_child_run_in_the_tree_charged_to_its_parent(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, remote: tuple[str, ScriptedAgent]) -> None:
    url, agent = remote
    runner = a2a_runner(sink, settings, agents(url, price=0.25))
    sent_before = len(agent.seen)
    outcome, adapter = await run_script(runner, [call_turn(ANSWER, GOAL)], ["search"], workspace)
    assert outcome.state is RunState.COMPLETE, outcome.error
    assert ANSWER in [tool["name"] for tool in adapter.received_tools[0]]
    child = child_of(sink, outcome.run_id)
    [event] = [e.data for e in sink.of_run(outcome.run_id) if e.type == "child"]
    assert event["label"] == "remote/answer" and event["packet"]["skill"] == "remote/answer"
    [result] = results(sink, outcome.run_id)
    assert result["ok"] and result["name"] == ANSWER, result
    assert result["result"]["run_id"] == child
    assert final(sink, child)["result"]["output_payload"] == {"answer": 42}
    [sent] = [e.data for e in sink.of_run(child) if e.type == "log" and e.data.get("remote_task_id")]
    assert sent["remote_agent"] == "remote" and sent["remote_task_id"] in sent["message"]
    [model_call] = [e.data for e in sink.of_run(child) if e.type == "model_call"]
    assert model_call["model"] == "remote/answer" and model_call["cost_usd"] == pytest.approx(0.25)
    assert len(agent.seen) == sent_before + 1 and "Pick the cheapest option." in agent.seen[-1]["text"]
    assert agent.seen[-1]["headers"]["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in json.dumps([event.data for event in sink.events])
    # the parent's two model turns and the child's one message; the child's declared price
    assert outcome.usage.model_calls == 3 and outcome.usage.cost_usd == pytest.approx(0.25)


async def test_a_run_without_the_agents_capability_is_not_offered_it_and_nothing_is_sent(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, remote: tuple[str, ScriptedAgent]) -> None:
    url, agent = remote
    sent_before = len(agent.seen)
    runner = a2a_runner(sink, settings, agents(url))
    outcome, adapter = await run_script(runner, [call_turn(ANSWER, GOAL)], ["fs_read"], workspace)
    assert not [tool["name"] for tool in adapter.received_tools[0] if tool["name"].startswith("a2a__")]
    [result] = results(sink, outcome.run_id)
    assert not result["ok"] and "needs the capability 'search'" in json.dumps(result["error"])
    assert len(agent.seen) == sent_before and outcome.state is RunState.COMPLETE


async def test_an_approval_required_capability_parks_the_child_until_a_person_approves(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, remote: tuple[str, ScriptedAgent]) -> None:
    url, agent = remote
    sent_before = len(agent.seen)
    gate = ParkingGate()
    runner = a2a_runner(sink, settings, agents(url, capability="network_outbound"), gate=gate)
    parked, _ = await run_script(runner, [call_turn(ANSWER, GOAL)], ["network_outbound"], workspace)
    assert parked.state is RunState.AWAITING_APPROVAL
    [asked] = gate.asked
    assert asked.kind is ApprovalKind.CAPABILITY and asked.payload["tool"] == ANSWER
    assert asked.title == ("remote/answer wants to send its task to the remote A2A agent 'remote' "
                           "(network_outbound)")
    assert asked.payload["arguments"]["input"] == GOAL["input"] and len(agent.seen) == sent_before
    gate.decide_key(asked.key, ApprovalDecision(Decision.APPROVE, decided_by="ana"))
    done = await runner.resume(parked.run_id)
    assert done.state is RunState.COMPLETE
    assert len(agent.seen) == sent_before + 1 and results(sink, parked.run_id)[-1]["ok"]


async def test_a_remote_that_fails_fails_its_child_with_its_words_and_the_parent_goes_on(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, remote: tuple[str, ScriptedAgent]) -> None:
    url, _ = remote
    runner = a2a_runner(sink, settings, agents(url))
    outcome, _ = await run_script(runner, [call_turn("a2a__remote__fail", GOAL)], ["search"], workspace)
    assert outcome.state is RunState.COMPLETE
    [result] = results(sink, outcome.run_id)
    assert not result["ok"] and result["error"]["code"] == "ERR_TOOL_FAILURE"
    assert "TASK_STATE_FAILED: The quote service is down." in result["error"]["message"]


async def test_a_remote_question_is_asked_in_the_inbox_and_the_answer_continues_its_task(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, remote: tuple[str, ScriptedAgent]) -> None:
    url, agent = remote
    gate = ParkingGate()
    runner = a2a_runner(sink, settings, agents(url), gate=gate)
    parked = await runner.start(remote_packet("ask"), adapter=ScriptedAdapter({"script": []}), workspace=workspace)
    assert parked.state is RunState.AWAITING_APPROVAL
    [asked] = gate.asked
    assert asked.kind is ApprovalKind.CLARIFICATION and "Which region?" in asked.title
    gate.decide_key(asked.key, ApprovalDecision(Decision.ANSWER, answer="EU", decided_by="ana"))
    done = await runner.resume(parked.run_id)
    assert done.state is RunState.COMPLETE, done.error
    assert final(sink, parked.run_id)["result"]["output_payload"] == {"region": "EU"}
    assert agent.seen[-1] == {"skill": "follow-up", "text": "EU", "headers": agent.seen[-1]["headers"]}


async def test_a_remote_sign_in_request_is_put_to_the_inbox_and_a_refusal_fails_the_run(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, remote: tuple[str, ScriptedAgent]) -> None:
    url, agent = remote
    cancelled_before = len(agent.cancelled)
    gate = ParkingGate()
    runner = a2a_runner(sink, settings, agents(url), gate=gate)
    parked = await runner.start(remote_packet("auth"), adapter=ScriptedAdapter({"script": []}), workspace=workspace)
    [asked] = gate.asked
    assert "needs an authorization" in asked.title and "https://remote.example/approve" in json.dumps(asked.payload)
    gate.decide_key(asked.key, ApprovalDecision(Decision.REJECT, comment="not today", decided_by="ana"))
    done = await runner.resume(parked.run_id)
    assert done.state is RunState.FAILED and "not today" in json.dumps(done.error)
    assert len(agent.cancelled) == cancelled_before + 1     # not left waiting for nobody


async def test_an_artifact_that_fails_the_output_schema_fails_the_run_with_the_reason(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, remote: tuple[str, ScriptedAgent]) -> None:
    url, _ = remote
    runner = a2a_runner(sink, settings, agents(url))
    schema = {"type": "object", "required": ["region"], "properties": {"region": {"type": "string"}}}
    outcome = await runner.start(remote_packet("answer", expected_output_schema=schema),
                                 adapter=ScriptedAdapter({"script": []}), workspace=workspace)
    assert outcome.state is RunState.FAILED
    assert "region" in json.dumps(outcome.error) and outcome.usage.model_calls == 2


async def test_an_artifact_that_fails_the_schema_the_remote_declares_fails_the_run(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, remote: tuple[str, ScriptedAgent]) -> None:
    url, _ = remote
    runner = a2a_runner(sink, settings, agents(url))
    outcome = await runner.start(remote_packet("wrong"), adapter=ScriptedAdapter({"script": []}),
                                 workspace=workspace)
    assert outcome.state is RunState.FAILED
    assert "does not match the output schema it declares" in json.dumps(outcome.error)


async def test_a_remote_that_hangs_past_the_runs_time_is_cancelled_remotely(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, remote: tuple[str, ScriptedAgent]) -> None:
    url, agent = remote
    cancelled_before = len(agent.cancelled)
    runner = a2a_runner(sink, settings, agents(url))
    outcome = await runner.start(remote_packet("hang", timeout_s=2), adapter=ScriptedAdapter({"script": []}),
                                 workspace=workspace)
    assert outcome.state is RunState.TIMEOUT
    for _ in range(50):
        if len(agent.cancelled) > cancelled_before:
            break
        await asyncio.sleep(0.1)
    assert len(agent.cancelled) == cancelled_before + 1


class DiesAfterSending(MemoryCheckpointStore):
    """A worker killed after the remote task's id was checkpointed, before the answer was."""

    def __init__(self) -> None:
        super().__init__()
        self.saves_with_task = 0

    async def save(self, run_id: str, checkpoint: Checkpoint) -> None:
        if checkpoint.adapter_state.get("task_id"):
            self.saves_with_task += 1
            if self.saves_with_task == 2:
                raise WorkerDied()
        await super().save(run_id, checkpoint)


async def test_a_worker_that_died_after_sending_follows_the_remote_task_instead_of_resending(
        settings: RunnerSettings, workspace: Path, remote: tuple[str, ScriptedAgent]) -> None:
    url, agent = remote
    sent_before = len(agent.seen)
    store = DiesAfterSending()
    with pytest.raises(WorkerDied):
        await a2a_runner(MemorySink(), settings, agents(url), checkpoints=store).start(
            remote_packet("answer"), adapter=ScriptedAdapter({"script": []}), run_id="r-a2a-dies",
            workspace=workspace)
    checkpoint = await store.load("r-a2a-dies")
    assert checkpoint is not None and checkpoint.adapter_state["task_id"]
    sink = MemorySink()
    outcome = await a2a_runner(sink, settings, agents(url), checkpoints=store).resume(
        "r-a2a-dies", adapter=ScriptedAdapter({"script": []}))
    assert outcome.state is RunState.COMPLETE, outcome.error
    assert len(agent.seen) == sent_before + 1                 # sent once
    assert final(sink, "r-a2a-dies")["result"]["output_payload"] == {"answer": 42}


async def test_cancelling_the_local_tree_cancels_its_remote_task(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, remote: tuple[str, ScriptedAgent]) -> None:
    url, agent = remote
    cancelled_before = len(agent.cancelled)
    runner = a2a_runner(sink, settings, agents(url))
    adapter = ScriptedAdapter({"script": [call_turn("a2a__remote__hang", GOAL), yield_turn()]})
    started = asyncio.create_task(runner.start(root_packet(capabilities=["search"]), adapter=adapter,
                                               run_id="r-a2a-cancel", workspace=workspace))
    for _ in range(200):
        if agent.seen and agent.seen[-1]["skill"] == "hang" and [
                e for e in sink.of_run("r-a2a-cancel") if e.type == "child"]:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)       # the remote task exists and its id is known
    assert runner.cancel("r-a2a-cancel")
    outcome = await started
    assert outcome.state is RunState.CANCELLED
    assert len(agent.cancelled) == cancelled_before + 1


def test_a_runner_with_remote_agents_loads_the_a2a_sdk_only_when_one_is_called() -> None:
    program = textwrap.dedent('''
        import asyncio, sys
        from delegations.protocol.a2a_client import RemoteAgentConfig
        from delegations.protocol.a2a_subagents import RemoteAgents
        from delegations.protocol.adapters.scripted import ScriptedAdapter
        from delegations.protocol.approvals import AutoGate
        from delegations.protocol.checkpoints import MemoryCheckpointStore
        from delegations.protocol.events import MemorySink
        from delegations.protocol.runner import Runner
        from tests.protocol.conftest import root_packet, yield_turn

        async def main():
            remote = RemoteAgents([RemoteAgentConfig(name="far", card_url="http://127.0.0.1:9",
                                                     skills=("answer",))])
            runner = Runner(sink=MemorySink(), gate=AutoGate(), checkpoints=MemoryCheckpointStore(),
                            remote=remote)
            outcome = await runner.start(root_packet(capabilities=["network_outbound"]),
                                         adapter=ScriptedAdapter({"script": [yield_turn()]}))
            print(outcome.state.value, "a2a" in sys.modules)

        asyncio.run(main())
    ''')
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.split() == ["COMPLETE", "False"], done.stderr


async def test_a_delegate_task_naming_a_remote_skill_gets_the_agents_capability_from_its_parent(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, remote: tuple[str, ScriptedAgent]) -> None:
    url, _ = remote
    runner = a2a_runner(sink, settings, agents(url))
    delegation = {"label": "quote", "skill": "remote/answer", "goal": "Pick one.", "input_data": GOAL["input"]}
    outcome, _ = await run_script(runner, [call_turn("delegate_task", delegation)], ["search"], workspace)
    child = child_of(sink, outcome.run_id)
    assert final(sink, child)["state"] == "COMPLETE"
    assert final(sink, child)["result"]["output_payload"] == {"answer": 42}
