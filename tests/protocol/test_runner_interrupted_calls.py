"""A worker that dies while a tool with an effect runs, before its result is saved: the
resumed run does not run that call again, and tells the model its outcome is unknown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from delegations.protocol.adapters.scripted import ScriptedAdapter
from delegations.protocol.approvals import AutoGate
from delegations.protocol.checkpoints import Checkpoint, MemoryCheckpointStore
from delegations.protocol.events import MemorySink
from delegations.protocol.lifecycle import RunState
from delegations.protocol.packet import parse_packet
from delegations.protocol.runner import Runner, RunnerSettings

from .conftest import root_packet, yield_turn

EDIT = "FILE: notes.txt\nREPLACE_START\none\nREPLACE_WITH\none\ntwo\nREPLACE_END\n"


class WorkerDied(BaseException):
    """Stands for the worker process dying: not an Exception, so nothing catches it."""


class DyingStore(MemoryCheckpointStore):
    """Dies when asked to save the result of ``tool``, as a worker killed after the tool
    ran and before its checkpoint was written: what it holds is the checkpoint before."""

    def __init__(self, tool: str) -> None:
        super().__init__()
        self.tool = tool

    async def save(self, run_id: str, checkpoint: Checkpoint) -> None:
        if any(record.get("name") == self.tool and record.get("ok")
               for record in checkpoint.completed.values()):
            raise WorkerDied()
        await super().save(run_id, checkpoint)


@pytest.fixture
def crashed(settings: RunnerSettings, workspace: Path) -> Any:
    async def crash(config: dict[str, Any]) -> DyingStore:
        store = DyingStore("apply_edit")
        packet = parse_packet(root_packet(capabilities=["fs_read", "fs_write"]))
        runner = Runner(sink=MemorySink(), gate=AutoGate(), checkpoints=store, settings=settings)
        with pytest.raises(WorkerDied):
            await runner.start(packet, adapter=ScriptedAdapter(config), run_id="r-dies",
                               workspace=workspace)
        return store
    return crash


async def test_an_edit_interrupted_by_the_worker_dying_is_not_applied_again_on_resume(
        crashed: Any, settings: RunnerSettings, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("one\n")
    config = {"script": [{"tool_calls": [{"name": "apply_edit", "arguments": {"edit": EDIT}}]},
                         yield_turn({"done": True})]}
    store = await crashed(config)
    assert (workspace / "notes.txt").read_text() == "one\ntwo\n"

    sink = MemorySink()
    outcome = await Runner(sink=sink, gate=AutoGate(), checkpoints=store, settings=settings).resume("r-dies")
    assert outcome.state is RunState.COMPLETE, outcome.error
    assert (workspace / "notes.txt").read_text() == "one\ntwo\n"   # applied once
    assert not sink.of_type("tool_call")
    (result,) = sink.of_type("tool_result")
    assert result.data["name"] == "apply_edit" and result.data["ok"] is False
    assert result.data["error"]["code"] == "ERR_WORKER_LOST"
    assert "interrupted" not in result.data


async def test_the_model_is_told_to_check_what_an_interrupted_call_did(
        crashed: Any, settings: RunnerSettings, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("one\n")
    config = {"script": [{"tool_calls": [{"name": "apply_edit", "arguments": {"edit": EDIT}}]},
                         {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
                         yield_turn({"done": True})]}
    store = await crashed(config)
    outcome = await Runner(sink=MemorySink(), gate=AutoGate(), checkpoints=store, settings=settings).resume("r-dies")
    assert outcome.state is RunState.COMPLETE, outcome.error
    checkpoint = await store.load("r-dies")
    assert checkpoint is not None
    told = [m for m in checkpoint.messages if m.get("role") == "tool" and "not run again" in str(m)]
    assert len(told) == 1, checkpoint.messages
