"""Runs executing through django.tasks: the tree, parking, lost workers, lanes, cancel,
messages and archiving."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, ClassVar

import pytest
from django.utils import timezone
from django_tasks_db.models import DBTaskResult

from delegations.inbox.decisions import approval_decide
from delegations.models import Approval, Run, RunCheckpoint, RunEvent, RunMessage
from delegations.protocol.adapters import register_adapter
from delegations.protocol.adapters.base import Message, ModelTurn, TextCallback, ToolSchema
from delegations.protocol.adapters.scripted import ScriptedAdapter
from delegations.protocol.errors import ProtocolError
from delegations.runs.execution import execute, finish_execution
from delegations.runs.maintenance import archive_runs, sweep_runs
from delegations.runs.workflows import run_cancel, run_create, run_retry, run_send_message
from tests.delegations import scripts
from tests.skills.factories import add_skill

pytestmark = [pytest.mark.django_db(transaction=True)]


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the run")
        time.sleep(0.05)


def events_of(run: Run) -> list[RunEvent]:
    return list(RunEvent.objects.filter(run=run).order_by("seq"))


def state_of(run: Run) -> str:
    run.refresh_from_db()
    return run.state


@pytest.mark.services
def test_a_run_with_a_child_completes_and_records_the_whole_tree(immediate_tasks: None, composer: Any) -> None:
    run = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.with_child(),
                     owner=composer)
    assert run.state == "COMPLETE" and run.result["output_payload"] == {"answer": 42}
    child = Run.objects.get(parent=run)
    assert child.state == "COMPLETE" and child.root_id == run.pk and child.depth == 1
    assert child.session_key == f"agent:main:subagent:{child.pk}"
    events = events_of(run)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-1].type == "result" and events[-1].data["state"] == "COMPLETE"
    child_event = next(e for e in events if e.type == "child")
    assert child_event.data["child_run_id"] == child.pk
    assert run.usage["model_calls"] == 3  # its own two calls and its child's
    assert run.lease_owner == "" and run.started_at and run.finished_at


def delegate_to_skill(ref: str, label: str = "kid") -> dict[str, Any]:
    """A coordinator whose one child names skill ``ref`` and leaves the rest to it."""
    call = {"name": "delegate_task", "arguments": {
        "label": label, "skill": ref, "goal": "Study the caching options",
        "input_data": {"options": ["a", "b"]}, "timeout_s": 30}}
    return {"script": [{"text": "Delegating.", "tool_calls": [call]}, scripts.yield_turn()],
            "children": {label: scripts.leaf(scripts.SKILL_OUTPUT)}}


@pytest.mark.services
def test_a_child_naming_a_registered_skill_gets_its_instructions_and_output_schema(
        immediate_tasks: None, composer: Any) -> None:
    scripts.add_caching_skill("1.0.0")
    run = run_create(packet=scripts.packet(), adapter="scripted",
                     config=delegate_to_skill("caching@1.0.0"), owner=composer)
    assert run.state == "COMPLETE"
    child = Run.objects.get(parent=run)
    assert child.state == "COMPLETE" and child.skill == "caching@1.0.0"
    assert child.result["output_payload"] == scripts.SKILL_OUTPUT
    first = scripts.first_system_message(child.pk)
    assert scripts.SKILL_INSTRUCTIONS in first and '"currency"' in first


@pytest.mark.services
def test_a_child_naming_a_skill_the_registry_lacks_is_rejected(immediate_tasks: None, composer: Any) -> None:
    run = run_create(packet=scripts.packet(), adapter="scripted",
                     config=delegate_to_skill("no-such-skill@9.9.9"), owner=composer)
    child = Run.objects.get(parent=run)
    assert child.state == "REJECTED" and "no-such-skill@9.9.9" in child.error["message"]


@pytest.mark.services
def test_a_child_naming_a_skill_by_name_is_recorded_with_the_version_that_ran(
        immediate_tasks: None, composer: Any, composer_client: Any) -> None:
    scripts.add_caching_skill("1.0.0")
    scripts.add_caching_skill("1.1.0")
    run = run_create(packet=scripts.packet(), adapter="scripted",
                     config=delegate_to_skill("caching"), owner=composer)
    assert run.state == "COMPLETE"
    child = Run.objects.get(parent=run)
    assert child.state == "COMPLETE"
    assert child.skill == "caching@1.1.0" and child.packet["skill"] == "caching@1.1.0"
    page = composer_client.get(f"/runs/{child.pk}/").content.decode()
    assert 'href="/skills/caching/1.1.0/">caching@1.1.0</a>' in page


@pytest.mark.services
def test_a_child_naming_a_skill_without_its_instruction_file_is_rejected_as_a_root_run_is(
        immediate_tasks: None, composer: Any) -> None:
    add_skill("caching", "1.0.0", input_schema={"options": ["string"]})  # manifest.json alone
    with pytest.raises(ProtocolError) as root_refusal:
        run_create(packet=scripts.skill_packet("caching@1.0.0"), adapter="scripted",
                   config=scripts.leaf(), owner=composer)
    run = run_create(packet=scripts.packet(), adapter="scripted",
                     config=delegate_to_skill("caching@1.0.0"), owner=composer)
    child = Run.objects.get(parent=run)
    assert child.state == "REJECTED" and child.usage.get("model_calls", 0) == 0
    assert child.error["code"] == "ERR_INVALID_PACKET"
    assert child.error["message"] == root_refusal.value.message
    assert "instruction file instructions.md is missing from its bundle" in child.error["message"]


@pytest.mark.services
def test_an_approval_parks_the_run_without_a_worker_and_the_decision_resumes_it(
        immediate_tasks: None, composer: Any, approver: Any) -> None:
    run = run_create(packet=scripts.approval_packet(), adapter="scripted",
                     config=scripts.needs_approval(), owner=composer)
    assert run.state == "AWAITING_APPROVAL" and run.lease_owner == ""
    approval = Approval.objects.get(run=run)
    assert approval.kind == "capability" and approval.status == "pending"
    assert RunCheckpoint.objects.get(run=run).data["parked"]["key"] == approval.key
    approval_decide(approval=approval, user=approver, decision="approve")
    assert state_of(run) == "COMPLETE"
    decided = [e.data for e in events_of(run) if e.type == "approval" and e.data.get("decision")]
    assert decided and decided[-1]["decision"] == "approve"


@pytest.mark.services
def test_a_child_that_waits_for_approval_parks_its_whole_tree(
        immediate_tasks: None, composer: Any, approver: Any) -> None:
    config = scripts.with_child(scripts.needs_approval())
    config["script"][0]["tool_calls"][0]["arguments"]["capabilities"] = ["file_delete"]
    run = run_create(packet=scripts.approval_packet(), adapter="scripted", config=config, owner=composer)
    child = Run.objects.get(parent=run)
    assert (run.state, state_of(child)) == ("AWAITING_APPROVAL", "AWAITING_APPROVAL")
    approval = Approval.objects.get()
    assert approval.run_id == child.pk
    approval_decide(approval=approval, user=approver, decision="approve")
    assert (state_of(run), state_of(child)) == ("COMPLETE", "COMPLETE")
    assert Run.objects.filter(root=run).count() == 2  # resumed, not spawned again


class WorkerDied(BaseException):
    """Stands for the process dying: not an Exception, so nothing on the way catches it."""


class CrashOnceAdapter(ScriptedAdapter):
    """Plays its script, but the first process 'dies' during the second model call."""

    name: ClassVar[str] = "crash-once"
    crashed: ClassVar[bool] = False

    async def complete(self, messages: list[Message], tools: list[ToolSchema], *,
                       on_text: TextCallback | None = None) -> ModelTurn:
        if self.position == 1 and not CrashOnceAdapter.crashed:
            CrashOnceAdapter.crashed = True
            await asyncio.sleep(0.2)
            raise WorkerDied
        return await super().complete(messages, tools, on_text=on_text)


def expire_lease(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def run_whose_worker_dies(owner: Any) -> Run:
    """A run that writes a note, then its worker 'dies' during its second model call (the
    immediate backend runs it in the caller)."""
    register_adapter(CrashOnceAdapter)
    CrashOnceAdapter.crashed = False
    config = {"script": [
        {"text": "Writing notes.", "tool_calls": [{"name": "apply_edit", "arguments": {
            "edits": "notes.txt\n<<<<<<< SEARCH\n=======\nfirst line\n>>>>>>> REPLACE\n"}}]},
        scripts.yield_turn()]}
    run = run_create(packet=scripts.packet(capabilities=["fs_write"]), adapter="crash-once",
                     config=config, owner=owner)
    assert CrashOnceAdapter.crashed
    return run


@pytest.mark.services
def test_a_run_whose_worker_died_is_resumed_from_its_checkpoint(immediate_tasks: None, composer: Any) -> None:
    run = run_whose_worker_dies(composer)
    run.refresh_from_db()
    assert run.state == "WORKING" and run.lease_owner  # the dead worker still "holds" it
    # the checkpoint holds the first turn and its tool result
    checkpoint = RunCheckpoint.data_of(run.pk)
    assert checkpoint is not None and checkpoint["iteration"] == 1
    assert any(m["role"] == "tool" for m in checkpoint["messages"])
    assert sweep_runs()["resumed"] == []  # its lease has not expired yet
    expire_lease(run)
    report = sweep_runs()
    assert report["resumed"] == [run.pk]
    run.refresh_from_db()
    assert run.state == "COMPLETE" and run.recoveries == 1
    calls = [e for e in events_of(run) if e.type == "model_call"]
    assert len(calls) == 2  # the first turn was not played again
    assert any(e.type == "log" and "resuming" in e.data["message"] for e in events_of(run))


@pytest.mark.services
def test_a_run_whose_worker_died_before_its_first_checkpoint_fails_with_err_worker_lost(composer: Any) -> None:
    run = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(),
                     owner=composer, start=False)
    Run.objects.filter(pk=run.pk).update(state="WORKING", lease_owner="gone-1",
                                         lease_expires_at=timezone.now() - timedelta(seconds=5))
    assert sweep_runs()["failed"] == [run.pk]
    run.refresh_from_db()
    assert run.state == "FAILED" and run.error["code"] == "ERR_WORKER_LOST"
    assert [e.type for e in events_of(run)][-4:] == ["error", "state", "announce", "result"]


@pytest.mark.services
def test_a_run_that_keeps_losing_its_worker_is_failed_instead_of_resumed_forever(composer: Any) -> None:
    run = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(),
                     owner=composer, start=False)
    Run.objects.filter(pk=run.pk).update(state="WORKING", lease_owner="gone-1", recoveries=3,
                                         lease_expires_at=timezone.now() - timedelta(seconds=5))
    RunCheckpoint.objects.create(run=run, data={"run_id": run.pk, "root_run_id": run.pk})
    assert sweep_runs()["failed"] == [run.pk]
    run.refresh_from_db()
    assert run.error["code"] == "ERR_WORKER_LOST" and "resumed 3 times" in run.error["message"]


@pytest.mark.services
def test_a_parked_tree_whose_item_was_decided_while_no_worker_ran_is_resumed_by_the_sweeper(
        queued_tasks: None, composer: Any, approver: Any) -> None:
    run = run_create(packet=scripts.approval_packet(), adapter="scripted",
                     config=scripts.needs_approval(), owner=composer)
    # waiting for the whole turn: once the lease is released, the worker still checks
    # whether the inbox item was decided meanwhile (and would enqueue the run itself)
    assert execute(run.pk, wait=True) == "AWAITING_APPROVAL"
    Approval.objects.filter(run=run).update(status="approved", decision="approve")
    DBTaskResult.objects.all().delete()  # the decision's task got lost
    assert sweep_runs()["unparked"] == [run.pk]
    assert DBTaskResult.objects.count() == 1


def test_the_lane_runs_at_most_lane_size_runs_per_owner_and_starts_the_next_when_one_ends(
        queued_tasks: None, settings: Any, composer: Any, approver: Any) -> None:
    settings.HANDOFF_LANE_SIZE = 2
    runs = [run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(),
                       owner=composer) for _ in range(3)]
    other = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(), owner=approver)
    allocated = [r.allocated_at is not None for r in runs]
    assert allocated == [True, True, False]
    assert other.allocated_at is not None  # another owner's lane
    assert DBTaskResult.objects.count() == 3
    run_cancel(run=runs[0])
    runs[2].refresh_from_db()
    assert runs[2].allocated_at is not None and runs[2].state == "PENDING"
    assert DBTaskResult.objects.count() == 4


def test_a_waiting_run_is_not_executed_before_it_gets_a_lane_slot(queued_tasks: None, settings: Any,
                                                                   composer: Any) -> None:
    settings.HANDOFF_LANE_SIZE = 1
    run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(), owner=composer)
    waiting = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(), owner=composer)
    assert execute(waiting.pk, wait=True) == "skipped"
    assert state_of(waiting) == "PENDING" and waiting.lease_owner == ""


def test_finished_trees_are_archived_after_the_set_age_and_cleanup_delete_ones_removed(
        immediate_tasks: None, composer: Any) -> None:
    kept = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.with_child(), owner=composer)
    doomed = run_create(packet=scripts.packet(cleanup="delete"), adapter="scripted",
                        config=scripts.with_child(), owner=composer)
    fresh = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(), owner=composer)
    old = timezone.now() - timedelta(minutes=61)
    Run.objects.filter(root__in=[kept, doomed]).update(finished_at=old)
    assert archive_runs() == {"archived": 2, "deleted": 2}
    assert all(r.archived_at is not None for r in Run.objects.filter(root=kept))
    assert not Run.objects.filter(root_id=doomed.pk).exists()
    assert not RunEvent.objects.filter(run_id=doomed.pk).exists()
    fresh.refresh_from_db()
    assert fresh.archived_at is None


@pytest.mark.services
def test_cancelling_a_parked_tree_cancels_every_descendant_and_its_items(
        immediate_tasks: None, composer: Any) -> None:
    config = scripts.with_child(scripts.needs_approval())
    config["script"][0]["tool_calls"][0]["arguments"]["capabilities"] = ["file_delete"]
    run = run_create(packet=scripts.approval_packet(), adapter="scripted", config=config, owner=composer)
    child = Run.objects.get(parent=run)
    run_cancel(run=run, reason="Not needed any more.")
    assert (state_of(run), state_of(child)) == ("CANCELLED", "CANCELLED")
    assert Approval.objects.get().status == "cancelled"
    assert run.error["message"] == "Not needed any more."


def test_a_cancel_asked_for_while_the_worker_parked_the_tree_is_not_lost(
        immediate_tasks: None, composer: Any) -> None:
    # run_cancel found the lease held (the worker was parking the tree): it only asked; the
    # worker's last look for requests was before that, so its finish must end the runs
    run = run_create(packet=scripts.approval_packet(), adapter="scripted", config=scripts.needs_approval(),
                     owner=composer)
    assert state_of(run) == "AWAITING_APPROVAL"
    Run.objects.filter(pk=run.pk).update(cancel_requested_at=timezone.now())
    finish_execution(run, "a-worker", "AWAITING_APPROVAL", None)
    assert state_of(run) == "CANCELLED"
    assert Approval.objects.get().status == "cancelled"


def _slow_tree() -> dict[str, Any]:
    slow_leaf = {"script": [scripts.yield_turn(delay_ms=20000)]}
    return {"script": [scripts.delegate_turn("kid"), scripts.yield_turn()], "children": {"kid": slow_leaf}}


@pytest.mark.services
def test_cancelling_a_run_a_worker_executes_stops_it_and_its_children_within_seconds(
        queued_tasks: None, composer: Any) -> None:
    run = run_create(packet=scripts.packet(), adapter="scripted", config=_slow_tree(), owner=composer)
    assert execute(run.pk, wait=False) == "started"
    wait_for(lambda: Run.objects.filter(parent=run, state="WORKING").exists())
    requested = run_cancel(run=run)
    assert requested.cancel_requested_at is not None and not requested.is_terminal
    started = time.monotonic()
    wait_for(lambda: state_of(run) == "CANCELLED", timeout=5)
    assert time.monotonic() - started < 3
    assert Run.objects.get(parent=run).state == "CANCELLED"
    wait_for(lambda: Run.objects.get(pk=run.pk).lease_owner == "")


@pytest.mark.services
def test_a_message_reaches_the_running_subagent_at_its_next_turn(queued_tasks: None, composer: Any) -> None:
    config = {"script": [{"text": "Thinking...", "delay_ms": 1500, "tool_calls": [
        {"name": "list_files", "arguments": {}}]}, scripts.yield_turn()]}
    run = run_create(packet=scripts.packet(capabilities=["fs_read"]), adapter="scripted",
                     config=config, owner=composer)
    execute(run.pk, wait=False)
    wait_for(lambda: state_of(run) == "WORKING")
    message = run_send_message(run=run, text="Prefer option b.", sender=composer)
    wait_for(lambda: state_of(run) == "COMPLETE")
    types = [(e.type, e.data) for e in events_of(run)]
    delivered = [i for i, (kind, data) in enumerate(types) if kind == "message"]
    calls = [i for i, (kind, _) in enumerate(types) if kind == "model_call"]
    assert len(delivered) == 1 and types[delivered[0]][1]["text"] == "Prefer option b."
    assert calls[0] < delivered[0] < calls[1]
    message.refresh_from_db()
    assert message.delivered_at is not None


def test_a_missing_local_model_fails_the_run_with_err_tool_failure(immediate_tasks: None, composer: Any,
                                                                   tmp_path: Any, settings: Any) -> None:
    settings.HANDOFF_LOCAL_MODEL_PATH = str(tmp_path / "missing.gguf")
    run = run_create(packet=scripts.packet(), adapter="local", config={}, owner=composer)
    assert run.state == "FAILED" and run.error["code"] == "ERR_TOOL_FAILURE"
    assert "missing.gguf" in run.error["message"]
    assert RunMessage.objects.count() == 0


def test_a_run_may_not_name_a_model_file_on_the_server(composer: Any, tmp_path: Any) -> None:
    with pytest.raises(ProtocolError) as refused:
        run_create(packet=scripts.packet(), adapter="local",
                   config={"model_path": "/etc/passwd.gguf"}, owner=composer)
    assert refused.value.details == {"adapter": "local", "key": "model_path"}
    assert "HANDOFF_LOCAL_MODEL_PATH" in refused.value.message
    assert not Run.objects.exists()


def test_a_run_handed_to_a_worker_that_died_before_starting_it_is_enqueued_again(
        queued_tasks: None, composer: Any) -> None:
    run = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(), owner=composer)
    DBTaskResult.objects.all().delete()  # the worker took the task and died
    assert sweep_runs()["requeued"] == []  # not stale yet
    Run.objects.filter(pk=run.pk).update(allocated_at=timezone.now() - timedelta(minutes=5))
    assert sweep_runs()["requeued"] == [run.pk]
    assert DBTaskResult.objects.count() == 1
    assert sweep_runs()["requeued"] == []  # once per lease period


def test_retrying_a_failed_subagent_runs_it_again_on_its_own(immediate_tasks: None, composer: Any) -> None:
    failing_child = {"script": [scripts.yield_turn(status="FAILURE", payload={})]}
    run = run_create(packet=scripts.packet(), adapter="scripted",
                     config=scripts.with_child(failing_child), owner=composer)
    child = Run.objects.get(parent=run)
    assert child.state == "COMPLETE" or child.is_terminal
    retried = run_retry(run=child, user=composer, fix_instructions="Try the other source.")
    assert retried.is_root and retried.depth == 0 and retried.attempt == 2
    assert retried.previous_failure["fix_instructions"] == "Try the other source."
    assert retried.retry_of_id == child.pk
