"""The Runner: one run's life, accept -> work -> finish, told top to bottom.

The collaborators each hold one side of it: ``acceptance`` (scope and rejection),
``model_turns`` (calling and metering the model), ``tool_calls`` (tool dispatch),
``children`` (child runs), ``judging`` (what an answer means for the run), ``questions``
(asking a person) and ``reporting`` (events, checkpoints, the end).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..a2a_subagents import RemoteAgentAdapter, capability_problem, remote_adapter_of
from ..adapters.base import ModelAdapter, ToolCall
from ..approvals import ApprovalGate, RunParked
from ..budgets import Budget
from ..capabilities import verify_token
from ..checkpoints import CheckpointStore
from ..errors import ErrorCode, ProtocolError, internal_error_message
from ..events import EventSink, EventType
from ..lifecycle import RunState
from ..lint import lint_packet
from ..packet import HandoffPacket, parse_packet
from ..sessions import new_run_id, session_key
from ..tools import DELEGATE_TASK, FINISH_WITH_CHILDREN, YIELD_CONTROL
from ..trace_context import TraceContext, outgoing
from .acceptance import (
    SkillResolver,
    approval_required,
    grant,
    input_issues,
    merge_skill,
    rejection,
    root_scope,
    settle_limits,
    with_role_criteria,
)
from .checkpointing import restore
from .children import Children, children_result
from .judging import Judge
from .model_turns import ModelTurns, check_hard_limits
from .outcome import RunOutcome, outcome_from
from .prompt import initial_messages
from .questions import Questions
from .reporting import Reporter
from .settings import RunnerSettings
from .state import ActiveRun, Scope
from .tool_calls import ToolCalls

if TYPE_CHECKING:
    from ..a2a_subagents import RemoteAgents, RemoteSkill
    from ..manifest import SkillManifest
    from ..mcp_client import McpTools

logger = logging.getLogger(__name__)

_STATE = EventType.STATE.value
_LOG = EventType.LOG.value


class Runner:
    """Executes runs in-process as asyncio tasks. One Runner may run many trees at once."""

    def __init__(self, *, sink: EventSink, gate: ApprovalGate, checkpoints: CheckpointStore,
                 settings: RunnerSettings | None = None, skills: SkillResolver | None = None,
                 mcp: McpTools | None = None, remote: RemoteAgents | None = None) -> None:
        """``skills`` looks up a skill a packet names; ``mcp`` holds the tools of the host's
        MCP servers (None: no MCP server is configured); ``remote`` the skills of its remote
        A2A agents (None: none is configured)."""
        self.sink = sink
        self.gate = gate
        self.checkpoints = checkpoints
        self.settings = settings if settings is not None else RunnerSettings()
        self.skills = skills
        self.mcp = mcp
        self.remote = remote
        self._workspace_root = str(self.settings.workspace_root)
        self._lint_limits = self.settings.lint_limits   # read once: lint runs for every child
        self._runs: dict[str, ActiveRun] = {}     # the runs working in this process now
        self._report = Reporter(sink, checkpoints, self._runs)
        questions = Questions(gate, self._report)
        self._model = ModelTurns(self.settings, self._report, questions)
        self._tools = ToolCalls(self.settings, self._report, questions, mcp, remote)
        self._children = Children(self.settings, self._report, checkpoints, self._drive, remote)
        self._judge = Judge(self.settings, self._report, questions)

    # -- public API -----------------------------------------------------------------------

    async def start(self, packet: HandoffPacket | dict[str, Any] | str, *, adapter: ModelAdapter,
                    run_id: str | None = None, skill: SkillManifest | None = None,
                    parent_packet: HandoffPacket | None = None,
                    parent_budget: Budget | None = None,
                    parent_capabilities: list[str] | None = None,
                    workspace: Path | str | None = None,
                    trace: TraceContext | None = None) -> RunOutcome:
        """Run ``packet`` to a terminal state (or until it parks) and return how it ended.

        ``parent_packet`` / ``parent_budget`` / ``parent_capabilities`` bound a run that a
        host starts on behalf of an existing run: the packet is linted against them and its
        budget and capabilities narrowed to them. ``trace``: the root run's span context
        (its children's follow from it), carried by the calls the tree makes.
        """
        try:
            parsed = parse_packet(packet)    # a HandoffPacket is taken as it is
        except ProtocolError as exc:
            scope = Scope(skill=skill, reject=exc)
        else:
            scope = root_scope(parsed, skill, parent_packet=parent_packet, parent_budget=parent_budget,
                               parent_capabilities=parent_capabilities)
        run = ActiveRun(run_id or new_run_id(), None, adapter, scope)
        run.trace = trace
        run.workspace = str(workspace) if workspace is not None else f"{self._workspace_root}/{run.run_id}"
        accepted = scope.packet
        if accepted is not None:
            run.depth = accepted.depth
            run.label = accepted.label or (str(accepted.subagent_type) if accepted.subagent_type else "root")
            run.session_key = session_key(accepted.agent_id, run.run_id)
        return await self._launch(run)

    async def resume(self, run_id: str, *, adapter: ModelAdapter | None = None,
                     trace: TraceContext | None = None) -> RunOutcome:
        """Continue a parked or orphaned run from its last checkpoint.

        The whole tree resumes from its root (a child's id resumes its root); the root's
        outcome is returned. ``adapter`` replaces the root's adapter (its state is restored
        from the checkpoint); by default it is rebuilt with ``make_adapter`` from the
        checkpoint's adapter name and public config.
        """
        checkpoint = await self.checkpoints.load(run_id)
        if checkpoint is None:
            raise ProtocolError(ErrorCode.WORKER_LOST,
                                f"Run {run_id} has no checkpoint, so it cannot be resumed; mark it "
                                f"failed (ERR_WORKER_LOST) or start it again.")
        if checkpoint.root_run_id != checkpoint.run_id:
            root = await self.checkpoints.load(checkpoint.root_run_id)
            if root is not None:
                checkpoint, adapter = root, None
        if checkpoint.outcome is not None:
            return outcome_from(checkpoint)
        if checkpoint.run_id in self._runs:
            raise ProtocolError(ErrorCode.ILLEGAL_TRANSITION,
                                f"Run {checkpoint.run_id} is already running in this process.")
        adapter = remote_adapter_of(self.remote, checkpoint) or adapter
        run = restore(checkpoint, None, adapter, workspace_root=self._workspace_root,
                      default_timeout_s=self.settings.default_timeout_s)
        run.trace = trace
        return await self._launch(run)

    def cancel(self, run_id: str) -> bool:
        """Cancel a run and, through it, every descendant. False when it is not running here."""
        run = self._runs.get(run_id)
        if run is None or run.outcome is not None or run.task is None or run.task.done():
            return False
        run.cancel_reason = run.cancel_reason or "Cancelled on request."
        run.requested_cancel = True
        run.task.cancel()
        return True

    def send_message(self, run_id: str, text: str) -> bool:
        """Queue ``text`` as a user message for the run's next turn. False when it is not
        running in this process (finished, parked or unknown)."""
        run = self._runs.get(run_id)
        if run is None or run.outcome is not None or not isinstance(text, str) or not text.strip():
            return False
        run.chat.inbox.append(text)
        return True

    def active_runs(self) -> list[str]:
        """Ids of the runs executing in this process now."""
        return list(self._runs)

    # -- one run ----------------------------------------------------------------------------

    async def _launch(self, run: ActiveRun) -> RunOutcome:
        # A root run works in the caller's own task (no extra task on the hot path); cancel()
        # cancels that task, and the cancellation is consumed here once the tree has stopped.
        task = asyncio.current_task()
        assert task is not None, "Runner.start() and resume() must run inside an asyncio task"
        run.task = task
        self._runs[run.run_id] = run
        outcome = await self._drive(run)
        if task.cancelling():
            if not run.requested_cancel:
                # the host itself was cancelled: the run recorded CANCELLED, the host gets its error
                raise asyncio.CancelledError
            task.uncancel()
        return outcome

    async def _drive(self, run: ActiveRun) -> RunOutcome:
        """The whole life of one run; returns its outcome and never raises an Exception."""
        lane = run.family.lane
        # the calls this run makes carry its span context (a child's task has a context of
        # its own; a root's is its host's task, given back as it was below)
        traced = outgoing.set(run.trace)
        try:
            if lane is None:
                await self._live(run)
            else:
                async with lane:
                    await self._live(run)
        except asyncio.CancelledError:
            # cancelled before it started working (waiting for a concurrency slot)
            await self._report.end(run, RunState.CANCELLED, error=run.cancel_error())
        finally:
            outgoing.reset(traced)
        if run.outcome is None:
            # a state the run cannot leave by itself (should not happen): report, never hang
            await self._report.end(run, RunState.FAILED, error={
                "code": ErrorCode.TOOL_FAILURE.value, "message": "The run stopped without an outcome."})
        assert run.outcome is not None
        if isinstance(run.adapter, RemoteAgentAdapter):
            await run.adapter.release(run.outcome.state)
        return run.outcome

    async def _live(self, run: ActiveRun) -> None:
        """Accept (or re-enter) and work, within the run's hard timeout; every way it can
        stop ends in an outcome: timed out, cancelled, parked or failed."""
        report, children = self._report, self._children
        try:
            if run.resumed:
                await self._reenter(run)
            elif not await self._accept(run):
                return
            if self.mcp is not None:
                await self._list_mcp_tools(run)
            self._arm(run)
            if isinstance(run.adapter, RemoteAgentAdapter):
                await self._clear_remote(run, run.adapter)
            if run.parent is not None and run.clock.deadline >= run.parent.clock.deadline:
                # no earlier deadline than its parent's: the parent's timeout cancels it
                await self._work(run)
                return
            window = asyncio.timeout_at(run.clock.deadline)
            try:
                async with window:
                    await self._work(run)
            except TimeoutError:
                if not window.expired():
                    raise
                await children.stop(run, f"Cancelled: parent run {run.run_id} timed out.")
                await report.end(run, RunState.TIMEOUT, error={
                    "code": ErrorCode.TIMEOUT.value,
                    "message": f"The run hit its hard timeout of {run.clock.timeout_s:g} s before "
                               f"returning a result; its unfinished children were cancelled."})
        except asyncio.CancelledError:
            await children.stop(run, f"Cancelled: parent run {run.run_id} was cancelled.")
            await report.end(run, RunState.CANCELLED, error=run.cancel_error())
        except RunParked as parked:
            await report.park(run, parked.request)
        except ProtocolError as exc:
            await children.stop(run, f"Cancelled: parent run {run.run_id} failed.")
            await report.end(run, RunState.FAILED, error=exc.as_dict())
        except Exception:
            # a fault of Handoff's, not of the subagent's work: the person reads what happened
            # and what to do; the log (which the message points to) keeps the traceback
            logger.exception("run %s failed unexpectedly", run.run_id)
            await children.stop(run, f"Cancelled: parent run {run.run_id} failed.")
            await report.end(run, RunState.FAILED, error={
                "code": ErrorCode.TOOL_FAILURE.value, "message": internal_error_message("The run", run.run_id)})

    # -- accept -----------------------------------------------------------------------------

    async def _accept(self, run: ActiveRun) -> bool:
        """PENDING -> ACCEPTED -> WORKING, or REJECTED (False)."""
        report, scope = self._report, run.scope
        remote = self.remote.by_ref(scope.packet.skill) if self.remote is not None and scope.packet else None
        if scope.reject is not None:
            refused: dict[str, Any] | None = scope.reject.as_dict()
        elif remote is not None:
            refused = self._hand_to_remote(run, remote)
        else:
            refused = await self._resolve_skill(scope)
        run.state = RunState.PENDING
        pending = {"state": "PENDING", "previous": None, "depth": run.depth, "label": run.label,
                   "parent_run_id": run.parent.run_id if run.parent is not None else None,
                   "root_run_id": run.root_id}
        if scope.packet is not None and scope.packet.skill:
            pending["skill"] = scope.packet.skill    # name@version once the skill resolved
        await report.emit(run.run_id, _STATE, pending)
        if refused is not None:
            await report.end(run, RunState.REJECTED, error=refused)
            return False
        packet = scope.packet
        assert packet is not None
        if (with_role := with_role_criteria(packet)) is not packet:
            scope.replace_packet(with_role)
            packet = with_role
        scope.approval_required = approval_required(
            run.parent.scope.approval_required if run.parent is not None else self.settings.approval_required,
            scope.skill)
        findings = lint_packet(scope.requested or packet, scope.parent_view, max_depth=self.settings.max_depth,
                               approval_required=scope.approval_required,
                               input_schema=scope.skill.input_schema if scope.skill is not None else None,
                               **self._lint_limits)
        scope.max_depth = min(packet.max_depth, self.settings.max_depth)
        scope.findings = findings
        error = rejection(findings, input_issues(scope.skill, packet))
        if error is not None:
            await report.end(run, RunState.REJECTED, error=error)
            return False
        # the run keeps the narrowed scope from here on (lint saw what was asked for)
        scope.requested = None
        if packet.budget is not scope.budget or packet.capabilities != scope.capabilities:
            packet = packet.model_copy(update={"budget": scope.budget, "capabilities": list(scope.capabilities)})
            scope.replace_packet(packet)
        settle_limits(scope, run.clock, depth=run.depth, default_timeout_s=self.settings.default_timeout_s)
        run.checkpoint_base = None
        await report.set_state(run, RunState.ACCEPTED,
                               {"findings": [f.as_dict() for f in findings]} if findings else None)
        run.chat.messages = initial_messages(packet, scope.packet_dict(), examples=scope.examples,
                                             compact=run.adapter.compact_prompt)
        await report.set_state(run, RunState.WORKING)
        return True

    async def _resolve_skill(self, scope: Scope) -> dict[str, Any] | None:
        """Look up the skill the packet names (unless the host gave it) and merge it in,
        pinned to the version found; the rejection when the registry has no such skill or
        refuses to run it (the resolver's ProtocolError)."""
        packet = scope.packet
        if scope.skill is not None or packet is None or not packet.skill or self.skills is None:
            return None
        try:
            skill = await self.skills(packet.skill)
        except ProtocolError as exc:
            return exc.as_dict()
        if skill is None:
            return {"code": ErrorCode.INVALID_PACKET.value,
                    "message": f"Skill '{packet.skill}' is not in the registry; import it or "
                               f"name an existing skill@version."}
        scope.skill = skill
        scope.replace_packet(merge_skill(packet, skill))
        if scope.requested is not None:
            scope.requested = merge_skill(scope.requested, skill)
        return None

    def _hand_to_remote(self, run: ActiveRun, remote: RemoteSkill) -> dict[str, Any] | None:
        """A run of a remote agent's skill: the agent stands in for its model (or the
        rejection, when the run lacks the agent's capability)."""
        packet = run.scope.packet
        assert packet is not None and self.remote is not None
        problem = capability_problem(remote.ref, remote.capability, run.scope.capabilities)
        if problem is not None:
            return {"code": ErrorCode.CONSTRAINT_VIOLATION.value, "message": problem}
        run.adapter = self.remote.adapter(remote, goal=packet.goal or packet.instruction_set or "",
                                          input_data=dict(packet.input_data))
        run.adapter_name, run.adapter_config, run.checkpoint_base = run.adapter.name, None, None
        return None

    async def _clear_remote(self, run: ActiveRun, adapter: RemoteAgentAdapter) -> None:
        """Before a remote run's first message: its token must hold the agent's capability,
        and a person approves it when that capability requires approval. The adapter
        checkpoints the remote task's id (and logs it) the moment it is known."""
        remote = adapter.remote

        async def sent(task_id: str) -> None:
            await self._report.save(run)
            await self._report.emit(run.run_id, _LOG, {
                "level": "info", "remote_agent": remote.agent.name, "remote_task_id": task_id,
                "message": f"Sent to the remote A2A agent '{remote.agent.name}' as its task {task_id}."})

        adapter.on_task = sent
        if adapter.state["task_id"]:
            return
        verify_token(self.settings.token_key, run.scope.token, capability=remote.capability)
        if remote.capability in run.scope.approval_required:
            await self._tools.approve(run, ToolCall("remote", remote.tool, {
                "goal": adapter.state["goal"], "input": adapter.state["input"]}), remote.capability,
                f"send its task to the remote A2A agent '{remote.agent.name}'")

    def _arm(self, run: ActiveRun) -> None:
        """Deadline, token and tools for the time the run works in this process; time spent
        parked does not count, and a child's deadline never passes its parent's."""
        clock = run.clock
        now = asyncio.get_running_loop().time()
        clock.started_at = now
        deadline = now + max(0.0, clock.timeout_s - clock.elapsed_before)
        if run.parent is not None:
            deadline = min(deadline, run.parent.clock.deadline)
        clock.deadline = deadline
        grant(run, self.settings, self.mcp, self.remote)

    async def _list_mcp_tools(self, run: ActiveRun) -> None:
        """The MCP servers' tools as they are now (a recent listing is reused); a server
        that did not list them is logged on the root run, and its tools are not offered."""
        assert self.mcp is not None
        problems = await self.mcp.refresh()
        if run.parent is None:
            for problem in problems:
                await self._report.emit(run.run_id, _LOG, {"level": "warning", "message": problem})

    async def _reenter(self, run: ActiveRun) -> None:
        if run.state is RunState.AWAITING_APPROVAL:
            if run.attempts.asked:
                # parked on its own question: the state changes once the gate answers it,
                # not before, so a decision still pending leaves no trace
                return
            await self._report.set_state(run, RunState.WORKING, {"resumed": True})
        else:
            await self._report.emit(run.run_id, _LOG, {
                "level": "info", "message": f"Resumed from the checkpoint in state {run.state}."})

    # -- work -------------------------------------------------------------------------------

    async def _work(self, run: ActiveRun) -> None:
        """Model turns until one finishes the run (at most ``max_iterations`` model calls)."""
        chat, model = run.chat, self._model
        while True:
            if chat.turn is None:
                if run.state is RunState.AWAITING_APPROVAL:
                    # resumed, and the turn that asked did not ask again: working anyway
                    run.attempts.asked.clear()
                    await self._report.set_state(run, RunState.WORKING, {"resumed": True})
                if chat.iteration >= run.scope.max_iterations:
                    raise ProtocolError(
                        ErrorCode.RESOURCE_EXHAUSTED,
                        f"The run used all {run.scope.max_iterations} iterations (max_iterations) "
                        f"without returning a result.")
                check_hard_limits(run, before_call=True)
                if chat.inbox:
                    await model.deliver_messages(run)
                await model.call(run)
                turn = chat.turn
                assert turn is not None
                # a forced last turn's hand-off is kept even when that call overshot: it is
                # paid for, and it is what the limit's last turn was for
                if not turn.forced or not any(call.name == YIELD_CONTROL for call in turn.calls):
                    check_hard_limits(run, before_call=False)
            await model.check_soft_threshold(run)
            if await self._process_turn(run):
                return

    async def _process_turn(self, run: ActiveRun) -> bool:
        """Handle the model turn in hand; True when the run has finished.

        When the text holds the packet's ``termination_trigger`` the run ends with this
        turn: tool calls other than ``yield_control`` are not executed, and the answer is
        the ``yield_control`` call, else the text before the trigger (no correction turn).
        On a forced last turn, other tool calls without ``yield_control`` end the run
        FAILED (ERR_RESOURCE_EXHAUSTED) unexecuted; plain text is still read as an answer.
        """
        turn, packet = run.chat.turn, run.scope.packet
        assert turn is not None and packet is not None
        calls = turn.calls
        trigger = packet.termination_trigger
        triggered = trigger is not None and trigger != "" and trigger in turn.text
        yield_call: ToolCall | None = None
        work: list[ToolCall] = []
        for call in calls:
            if call.name == YIELD_CONTROL:
                if yield_call is None:
                    yield_call = call
            else:
                work.append(call)
        if turn.forced and work and yield_call is None and not triggered:
            # the last turn offered only yield_control: nothing else is run
            names = ", ".join(sorted({call.name for call in work}))
            raise ProtocolError(
                ErrorCode.RESOURCE_EXHAUSTED,
                f"The run used its last model call allowed ({turn.forced}) without returning a "
                f"result: only yield_control was offered, and the model called {names} instead.")
        if work and not triggered:
            await self._execute(run, work)
        judge = self._judge
        if turn.finish == FINISH_WITH_CHILDREN and yield_call is None and not triggered:
            return await judge.conclude(run, children_result(turn, work), None, False)
        if yield_call is not None:
            return await judge.conclude(run, yield_call.arguments, yield_call, triggered)
        if triggered or not calls:
            answer = turn.text.split(trigger, 1)[0] if triggered and trigger else turn.text
            return await judge.conclude(run, answer, None, triggered)
        run.chat.answer_turn()
        run.chat.next_turn()
        await self._report.save(run)
        return False

    async def _execute(self, run: ActiveRun, calls: list[ToolCall]) -> None:
        """Run the turn's tool calls: others in order, then every delegate_task concurrently."""
        turn = run.chat.turn
        assert turn is not None
        if run.resumed:
            await self._tools.report_interrupted(run, calls)
        delegations = []
        remote = self.remote
        for call in calls:
            if call.name == DELEGATE_TASK:
                delegations.append(call)
            elif remote is not None and (skill := remote.by_tool(call.name)) is not None:
                # a remote agent's skill is a subagent: its call delegates to it
                delegations.append(ToolCall(call.id, call.name, remote.delegation(skill, call.arguments)))
            elif call.id not in turn.completed:
                await self._tools.run(run, call)
        if delegations:
            await self._children.delegate(run, delegations)
