"""A run delegates to a remote A2A agent (built with the official SDK, on loopback) as a tool
``a2a__<agent>__<skill>``: within its capabilities, parked when a person must approve, inside
its time and model-call budget, its failures an ERR_TOOL_FAILURE while the run goes on, and a
worker that dies after sending reads the remote task again instead of sending it twice."""

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
from delegations.protocol.a2a_tools import RemoteAgents
from delegations.protocol.adapters.scripted import ScriptedAdapter
from delegations.protocol.approvals import ApprovalDecision, AutoGate, Decision
from delegations.protocol.checkpoints import Checkpoint, MemoryCheckpointStore
from delegations.protocol.events import MemorySink
from delegations.protocol.lifecycle import RunState
from delegations.protocol.runner import Runner, RunnerSettings, RunOutcome

from . import test_a2a_client
from .conftest import ParkingGate, call_turn, root_packet, yield_turn
from .test_a2a_client import ENV, SECRET, SKILLS, ScriptedAgent
from .test_runner_interrupted_calls import DyingStore, WorkerDied

remote = test_a2a_client.remote     # the scripted remote agent on loopback, one per module
ANSWER = "a2a__remote__answer"
GOAL = {"goal": "Pick the cheapest option.", "input": {"options": ["a", "b"]}}


class DiesOnce(DyingStore):
    """A worker killed once, after the remote answered and before its result was saved."""

    died = False

    async def save(self, run_id: str, checkpoint: Checkpoint) -> None:
        if self.died:
            await MemoryCheckpointStore.save(self, run_id, checkpoint)
            return
        try:
            await super().save(run_id, checkpoint)
        except WorkerDied:
            self.died = True
            raise


def agents(url: str, *, capability: str = "search", price: float = 0.0) -> RemoteAgents:
    config = RemoteAgentConfig(name="remote", card_url=url, skills=SKILLS, capability=capability,
                               secret_env="HANDOFF_A2A_SECRET_REMOTE", price_per_call_usd=price)
    return RemoteAgents([config], result_max_bytes=65536, environ=ENV)


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


def results(sink: MemorySink, run_id: str) -> list[dict[str, Any]]:
    return [event.data for event in sink.of_run(run_id) if event.type == "tool_result"]


async def test_a_run_delegates_to_a_remote_skill_its_capabilities_cover_and_is_charged_for_it(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, remote: tuple[str, ScriptedAgent]) -> None:
    url, agent = remote
    runner = a2a_runner(sink, settings, agents(url, price=0.25))
    sent_before = len(agent.seen)
    outcome, adapter = await run_script(runner, [call_turn(ANSWER, GOAL)], ["search"], workspace)
    assert outcome.state is RunState.COMPLETE, outcome.error
    assert ANSWER in [tool["name"] for tool in adapter.received_tools[0]]
    [call] = [e.data for e in sink.of_run(outcome.run_id) if e.type == "tool_call"]
    assert call["name"] == ANSWER
    [result] = results(sink, outcome.run_id)
    assert result["ok"], result
    assert result["result"]["result"] == {"status": "SUCCESS", "output_payload": {"answer": 42}}
    assert result["result"]["task_id"]
    assert len(agent.seen) == sent_before + 1 and "Pick the cheapest option." in agent.seen[-1]["text"]
    assert agent.seen[-1]["headers"]["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in json.dumps([event.data for event in sink.events])
    # two model turns plus the one message sent to the remote; its declared price
    assert outcome.usage.model_calls == 3 and outcome.usage.cost_usd == pytest.approx(0.25)


async def test_a_run_without_the_agents_capability_is_not_offered_it_and_nothing_is_sent(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, remote: tuple[str, ScriptedAgent]) -> None:
    url, agent = remote
    sent_before = len(agent.seen)
    runner = a2a_runner(sink, settings, agents(url))
    outcome, adapter = await run_script(runner, [call_turn(ANSWER, GOAL)], ["fs_read"], workspace)
    assert not [tool["name"] for tool in adapter.received_tools[0] if tool["name"].startswith("a2a__")]
    [result] = results(sink, outcome.run_id)
    assert result["error"]["code"] == "ERR_CONSTRAINT_VIOLATION"
    assert len(agent.seen) == sent_before and outcome.state is RunState.COMPLETE


async def test_an_approval_required_capability_parks_the_call_until_a_person_approves(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, remote: tuple[str, ScriptedAgent]) -> None:
    url, agent = remote
    sent_before = len(agent.seen)
    gate = ParkingGate()
    runner = a2a_runner(sink, settings, agents(url, capability="network_outbound"), gate=gate)
    parked, _ = await run_script(runner, [call_turn(ANSWER, GOAL)], ["network_outbound"], workspace)
    assert parked.state is RunState.AWAITING_APPROVAL
    [asked] = gate.asked
    assert asked.payload["tool"] == ANSWER and len(agent.seen) == sent_before
    gate.decide_key(asked.key, ApprovalDecision(Decision.APPROVE, decided_by="ana"))
    done = await runner.resume(parked.run_id)
    assert done.state is RunState.COMPLETE
    assert len(agent.seen) == sent_before + 1 and results(sink, parked.run_id)[-1]["ok"]


@pytest.mark.parametrize(("skill", "says"), [
    ("fail", "TASK_STATE_FAILED: The quote service is down."),
    ("ask", "TASK_STATE_INPUT_REQUIRED: Which region?"),
    ("auth", "TASK_STATE_AUTH_REQUIRED: Sign in at https://remote.example/approve"),
])
async def test_a_remote_that_fails_or_waits_for_someone_fails_the_call_with_its_words_and_the_run_goes_on(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, remote: tuple[str, ScriptedAgent],
        skill: str, says: str) -> None:
    url, agent = remote
    cancelled_before = len(agent.cancelled)
    runner = a2a_runner(sink, settings, agents(url))
    outcome, _ = await run_script(runner, [call_turn(f"a2a__remote__{skill}", GOAL)], ["search"], workspace)
    assert outcome.state is RunState.COMPLETE
    [result] = results(sink, outcome.run_id)
    assert result["error"]["code"] == "ERR_TOOL_FAILURE"
    assert "'remote'" in result["error"]["message"] and says in result["error"]["message"]
    # a task left waiting for someone is cancelled; a failed one has ended already
    assert len(agent.cancelled) == cancelled_before + (skill != "fail")


async def test_a_remote_that_hangs_past_the_runs_time_is_cancelled_remotely_before_the_run_times_out(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, remote: tuple[str, ScriptedAgent]) -> None:
    url, agent = remote
    cancelled_before = len(agent.cancelled)
    runner = a2a_runner(sink, settings, agents(url))
    outcome, _ = await run_script(runner, [call_turn("a2a__remote__hang", GOAL)], ["search"], workspace,
                                  timeout_s=3)
    [result] = results(sink, outcome.run_id)
    assert result["error"]["code"] == "ERR_TOOL_FAILURE" and "was cancelled" in result["error"]["message"]
    assert len(agent.cancelled) == cancelled_before + 1
    assert outcome.state is RunState.COMPLETE, outcome.error


async def test_a_remote_call_whose_worker_died_reads_the_remote_task_again_instead_of_resending(
        settings: RunnerSettings, workspace: Path, remote: tuple[str, ScriptedAgent]) -> None:
    url, agent = remote
    sent_before = len(agent.seen)
    store = DiesOnce(ANSWER)
    script = {"script": [call_turn(ANSWER, GOAL), yield_turn()]}
    with pytest.raises(WorkerDied):
        await a2a_runner(MemorySink(), settings, agents(url), checkpoints=store).start(
            root_packet(capabilities=["search"]), adapter=ScriptedAdapter(script), run_id="r-a2a-dies",
            workspace=workspace)
    checkpoint = await store.load("r-a2a-dies")
    assert checkpoint is not None
    [checkpoint_record] = checkpoint.completed.values()
    assert checkpoint_record["remote_task"] and checkpoint_record["interrupted"]
    sink = MemorySink()
    outcome = await a2a_runner(sink, settings, agents(url), checkpoints=store).resume("r-a2a-dies")
    assert outcome.state is RunState.COMPLETE, outcome.error
    assert len(agent.seen) == sent_before + 1                 # sent once
    [result] = results(sink, "r-a2a-dies")
    assert result["ok"] and result["result"]["task_id"] == checkpoint_record["remote_task"]
    assert result["result"]["result"]["output_payload"] == {"answer": 42}


async def test_cancelling_the_local_run_cancels_its_remote_task(
        sink: MemorySink, settings: RunnerSettings, workspace: Path, remote: tuple[str, ScriptedAgent]) -> None:
    url, agent = remote
    cancelled_before = len(agent.cancelled)
    runner = a2a_runner(sink, settings, agents(url))
    adapter = ScriptedAdapter({"script": [call_turn("a2a__remote__hang", GOAL), yield_turn()]})
    started = asyncio.create_task(runner.start(root_packet(capabilities=["search"]), adapter=adapter,
                                               run_id="r-a2a-cancel", workspace=workspace))
    for _ in range(200):
        if [e for e in sink.of_run("r-a2a-cancel") if e.type == "tool_call"] and agent.seen[-1]["skill"] == "hang":
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
        from delegations.protocol.a2a_tools import RemoteAgents
        from delegations.protocol.adapters.scripted import ScriptedAdapter
        from delegations.protocol.approvals import AutoGate
        from delegations.protocol.checkpoints import MemoryCheckpointStore
        from delegations.protocol.events import MemorySink
        from delegations.protocol.runner import Runner
        from tests.protocol.conftest import root_packet, yield_turn

        async def main():
            remote = RemoteAgents([RemoteAgentConfig(name="far", card_url="http://127.0.0.1:9",
                                                     skills=("answer",))], result_max_bytes=65536)
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
