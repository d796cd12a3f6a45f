"""Child runs: ``delegate_task`` calls spawned, run concurrently, reattached on resume, stopped.

A turn's ``delegate_task`` calls run concurrently as child runs, bounded by the budget's
``max_concurrency`` (else ``RunnerSettings.max_concurrency``); each child's announce becomes
the tool result its parent's model reads. A child's label is the ``label`` argument, else
``subagent_type``, else ``child-N``; its adapter is ``adapter.for_child(label)``; its session
key names the packet's ``agent_id``, else the parent's. A parked child makes its parent park
too, once the child's siblings have finished or parked; on resume a parked child continues
from its own checkpoint and is never spawned again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

from ..a2a_subagents import RemoteAgents, is_remote_tool, remote_adapter_of
from ..adapters.base import ModelAdapter, ToolCall
from ..approvals import ApprovalRequest, RunParked
from ..budgets import Budget, remaining
from ..checkpoints import CheckpointStore
from ..errors import ErrorCode, ProtocolError
from ..events import EventType
from ..lifecycle import RunState
from ..packet import HandoffPacket
from ..results import ErrorReport, ResponsePackage, ResultStatus
from ..sessions import new_run_id, session_key
from ..tools import DELEGATE_TASK
from .acceptance import child_scope
from .checkpointing import restore
from .outcome import RunOutcome
from .reporting import Reporter
from .settings import RunnerSettings
from .state import ActiveRun, Turn

_TOOL_CALL = EventType.TOOL_CALL.value
_TOOL_RESULT = EventType.TOOL_RESULT.value
_CHILD = EventType.CHILD.value
_ERROR = EventType.ERROR.value

# runs one run to its end (the orchestrator's); a child gets its own task for it
Drive = Callable[[ActiveRun], Coroutine[Any, Any, RunOutcome]]


class Children:
    """Spawns, runs, reattaches and stops the child runs of a run's ``delegate_task`` calls."""

    def __init__(self, settings: RunnerSettings, reporter: Reporter, checkpoints: CheckpointStore,
                 drive: Drive, remote: RemoteAgents | None = None) -> None:
        self.settings = settings
        self.remote = remote
        self.reporter = reporter
        self.checkpoints = checkpoints
        self.drive = drive
        self._workspace_root = str(settings.workspace_root)
        # strong references to running child tasks (the event loop keeps only weak ones)
        self._tasks: set[asyncio.Task[RunOutcome]] = set()

    async def delegate(self, run: ActiveRun, calls: list[ToolCall]) -> None:
        """Run the turn's ``delegate_task`` calls as child runs, concurrently, and record
        each child's announce as its call's result. Raises ``RunParked`` when one parked."""
        turn = run.chat.turn
        assert turn is not None
        emit = self.reporter.emit
        started: list[tuple[ToolCall, ActiveRun]] = []
        allowance: tuple[Budget, HandoffPacket] | None = None
        for call in calls:
            if call.id in turn.completed:
                continue
            child_id = run.family.children.get(call.id)
            if child_id is not None:
                child = await self._reattach(run, call, child_id)
                if child is not None:
                    started.append((call, child))
                continue
            await emit(run.run_id, _TOOL_CALL, {"id": call.id, "name": call.name, "arguments": call.arguments})
            if not run.scope.can_delegate:
                await self._refuse(run, call)
                continue
            try:
                if allowance is None:
                    allowance = _allowance(run)
                child = self._spawn(run, call, None, allowance)
            except ProtocolError as exc:
                failure = exc.as_dict()
                turn.completed[call.id] = {"name": call.name, "ok": False, "error": failure}
                await emit(run.run_id, _TOOL_RESULT, {"id": call.id, **turn.completed[call.id]})
                await emit(run.run_id, _ERROR, {**failure, "call_id": call.id})
                continue
            run.family.children[call.id] = child.run_id
            await emit(run.run_id, _CHILD, _child_event(run, call, child))
            started.append((call, child))
        # saved before any child starts: a worker that dies while they run resumes them
        # from their own checkpoints instead of spawning them again
        await self.reporter.save(run)
        if not started:
            return
        limit = max(1, run.scope.budget.max_concurrency or self.settings.max_concurrency)
        if len(started) > limit:
            # one lane per turn: a turn's children all end before the next turn starts
            lane = asyncio.Semaphore(limit)
            for _, child in started:
                child.family.lane = lane
        tasks = [self._start(child) for _, child in started]
        outcomes = (await asyncio.gather(*tasks, return_exceptions=True)
                    if not all(task.done() for task in tasks) else [_task_outcome(task) for task in tasks])
        parked: ApprovalRequest | None = None
        for (call, child), returned in zip(started, outcomes, strict=True):
            if not isinstance(returned, RunOutcome):
                # cancelled before its first step: it never reported anything itself
                await self.reporter.end(child, RunState.CANCELLED, error=child.cancel_error())
            outcome = child.outcome
            assert outcome is not None
            if outcome.state is RunState.AWAITING_APPROVAL:
                parked = parked or outcome.parked
                continue
            record = child_record(str(outcome.state), outcome.announce, call.name)
            turn.completed[call.id] = record
            run.family.active.pop(child.run_id, None)
            await emit(run.run_id, _TOOL_RESULT, {"id": call.id, **record})
        # no checkpoint here: the turn's next step saves one (the next turn, the end, the
        # park), and a worker dying before that resumes from the one above, finding the
        # children's outcomes in their own checkpoints
        if parked is not None:
            raise RunParked(parked)

    async def stop(self, run: ActiveRun, reason: str) -> None:
        """Cancel every unfinished child (and so its descendants) and wait for them."""
        pending = [child for child in run.family.active.values() if child.outcome is None]
        if not pending:
            return
        tasks = []
        for child in pending:
            child.cancel_reason = child.cancel_reason or reason
            if child.task is not None and not child.task.done():
                child.task.cancel()
                tasks.append(child.task)
        if tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait(tasks, timeout=self.settings.cancel_grace_s)
        for child in pending:
            if child.outcome is None:
                await self.reporter.end(child, RunState.CANCELLED, error=child.cancel_error())

    def _start(self, child: ActiveRun) -> asyncio.Task[RunOutcome]:
        """Start a child run as a task of its own, eagerly.

        The task runs at once, inside this call, up to its first real suspension (a model
        call waiting on the network, a slow sink, a full concurrency lane): a child whose
        work never waits finishes without a round trip through the event loop, and one
        that waits lets its siblings start, so children still run concurrently. The run
        is registered before it starts, since it may finish (and unregister) before
        ``create_task`` returns.
        """
        self.reporter.active[child.run_id] = child
        task: asyncio.Task[RunOutcome] = asyncio.Task(
            self.drive(child), loop=asyncio.get_running_loop(), name=f"handoff-run-{child.run_id}",
            eager_start=True)
        child.task = task
        if not task.done():
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return task

    async def _refuse(self, run: ActiveRun, call: ToolCall) -> None:
        turn = run.chat.turn
        assert turn is not None
        depth, max_depth = run.depth, run.scope.max_depth
        why = ("nested delegation is off for this subagent (allow_nested is false)"
               if depth < max_depth else f"depth {depth} is already the limit ({max_depth})")
        failure = {"code": ErrorCode.CONSTRAINT_VIOLATION.value,
                   "message": f"delegate_task is not available to this run: {why}. Do the work yourself."}
        turn.completed[call.id] = {"name": call.name, "ok": False, "error": failure}
        await self.reporter.save(run)
        await self.reporter.emit(run.run_id, _TOOL_RESULT, {"id": call.id, **turn.completed[call.id]})
        await self.reporter.emit(run.run_id, _ERROR, {**failure, "call_id": call.id})

    def _spawn(self, parent: ActiveRun, call: ToolCall, run_id: str | None,
               allowance: tuple[Budget, HandoffPacket] | None = None) -> ActiveRun:
        """A child run for a delegate_task call, scoped by its parent (not started yet)."""
        arguments = call.arguments if isinstance(call.arguments, dict) else {}
        parent.family.spawned += 1
        label = str(arguments.get("label") or arguments.get("subagent_type") or f"child-{parent.family.spawned}")
        remote = self.remote.by_ref(arguments.get("skill")) if self.remote is not None else None
        if remote is not None:
            assert self.remote is not None
            # the remote agent is its model (set up when it is accepted); it asks for the
            # agent's capability unless the call names others (narrowed to the parent's)
            adapter: ModelAdapter = self.remote.adapter(remote)
            arguments = {"capabilities": [remote.capability], **arguments}
        else:
            adapter = parent.adapter.for_child(label)
        depth = parent.depth + 1
        available, view = allowance if allowance is not None else _allowance(parent)
        scope, agent_id = child_scope(arguments, parent.scope, depth=depth, label=label,
                                      available=available, view=view)
        child = ActiveRun(run_id or new_run_id(), parent, adapter, scope)
        child.depth = depth
        child.label = label
        child.workspace = parent.workspace
        child.session_key = session_key(agent_id, child.run_id)
        parent.family.active[child.run_id] = child
        return child

    async def _reattach(self, parent: ActiveRun, call: ToolCall, child_id: str) -> ActiveRun | None:
        """On resume: the child of ``call`` from its checkpoint (None when it had finished)."""
        checkpoint = await self.checkpoints.load(child_id)
        emit = self.reporter.emit
        if checkpoint is None:
            # spawned, but the worker died before the child saved anything: start it again
            child = self._spawn(parent, call, child_id)
            await emit(parent.run_id, _CHILD, _child_event(parent, call, child))
            return child
        if checkpoint.outcome is not None:
            turn = parent.chat.turn
            assert turn is not None
            record = child_record(str(checkpoint.outcome.get("state") or ""), checkpoint.outcome.get("announce"),
                                  call.name)
            turn.completed[call.id] = record
            await emit(parent.run_id, _TOOL_RESULT, {"id": call.id, **record})
            return None
        adapter: ModelAdapter | None = remote_adapter_of(self.remote, checkpoint)
        if adapter is None:
            try:
                # the parent's adapter carries the host's full config (secrets included), which
                # a checkpoint never stores
                adapter = parent.adapter.for_child(checkpoint.label)
            except ProtocolError:
                adapter = None
        child = restore(checkpoint, parent, adapter, workspace_root=self._workspace_root,
                        default_timeout_s=self.settings.default_timeout_s)
        parent.family.active[child.run_id] = child
        return child


def child_record(state: str, announce: dict[str, Any] | None, tool: str = DELEGATE_TASK) -> dict[str, Any]:
    """The ``delegate_task`` result of a child that ended, as its parent's model reads it:
    the child's announce, and for a child that did not complete an ``error`` that says how
    it ended. The model reads only the error of a failed call, so without it a child
    cancelled from the run page (its subtree stopped, the parent going on) would reach the
    parent's model as ``{"error": null}``."""
    record: dict[str, Any] = {"name": tool, "ok": state == RunState.COMPLETE.value,
                              "result": announce}
    if not record["ok"]:
        record["error"] = _child_failure(state, announce if isinstance(announce, dict) else {})
    return record


def _child_failure(state: str, announce: dict[str, Any]) -> dict[str, Any]:
    found = announce.get("error")
    error: dict[str, Any] = found if isinstance(found, dict) else {}
    label = str(announce.get("label") or "the subagent")
    details = {"run_id": announce.get("run_id"), "label": label, "state": state}
    if state == RunState.CANCELLED.value:
        why = str(error.get("message") or "Cancelled.").rstrip(".")
        return {"code": "CANCELLED", "details": details,
                "message": f"Subagent {label} was cancelled before it finished ({why}), so its part "
                           f"is not done. Go on without it or do that part yourself."}
    summary = str(announce.get("summary") or error.get("message") or "no result").rstrip(".")
    return {"code": str(error.get("code") or ErrorCode.TOOL_FAILURE.value), "details": details,
            "message": f"Subagent {label} ended {state}: {summary}."}


def children_result(turn: Turn, calls: list[ToolCall]) -> ResponsePackage:
    """A coordinator's result from its turn's children (``finish: children``):
    ``output_payload = {"children": [{label, run_id, state, result}, ...]}``, SUCCESS when
    every child succeeded, PARTIAL_COMPLETION when some did, FAILURE when none did."""
    entries = []
    succeeded = 0
    for call in calls:
        if call.name != DELEGATE_TASK and not is_remote_tool(call.name):
            continue
        record = turn.completed.get(call.id, {})
        announce = record.get("result")
        if isinstance(announce, dict):
            result = announce.get("result")
            entries.append({"label": announce.get("label"), "run_id": announce.get("run_id"),
                            "state": announce.get("state"), "result": result})
            if announce.get("status") == "success" and isinstance(result, dict) \
                    and result.get("status") == ResultStatus.SUCCESS:
                succeeded += 1
        else:
            entries.append({"label": call.arguments.get("label"), "run_id": None, "state": None,
                            "result": None, "error": record.get("error")})
    total = len(entries)
    if succeeded == total:
        status = ResultStatus.SUCCESS
    elif succeeded:
        status = ResultStatus.PARTIAL_COMPLETION
    else:
        status = ResultStatus.FAILURE
    return ResponsePackage(
        status=status, output_payload={"children": entries},
        summary=f"{succeeded} of {total} subagent{'s' if total != 1 else ''} succeeded.",
        error_report=None if succeeded else ErrorReport(
            code=ErrorCode.TOOL_FAILURE.value, message="No subagent succeeded."))


def _allowance(parent: ActiveRun) -> tuple[Budget, HandoffPacket]:
    """What a child may have: the parent's remaining budget and the parent as lint sees it."""
    packet = parent.scope.packet
    assert packet is not None
    available = remaining(parent.scope.budget, parent.usage)
    view = packet.model_copy(update={"budget": available, "capabilities": list(parent.scope.capabilities)})
    return available, view


def _child_event(parent: ActiveRun, call: ToolCall, child: ActiveRun) -> dict[str, Any]:
    scope = child.scope
    return {"child_run_id": child.run_id, "call_id": call.id, "label": child.label,
            "packet": scope.packet_dict() if scope.packet is not None else call.arguments,
            "depth": child.depth, "session_key": child.session_key,
            "budget": scope.budget_dict(), "capabilities": list(scope.capabilities),
            "parent_run_id": parent.run_id, "root_run_id": child.root_id,
            # composed in advance (a planned child named by its label) or made up by the model
            "planned": parent.scope.packet is not None
                       and parent.scope.packet.planned_child(child.label) is not None}


def _task_outcome(task: asyncio.Task[RunOutcome]) -> RunOutcome | BaseException:
    """What ``asyncio.gather(..., return_exceptions=True)`` reports for a finished task."""
    if task.cancelled():
        return asyncio.CancelledError()
    return task.exception() or task.result()
