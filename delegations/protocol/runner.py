"""The runner: executes a hand-off packet as a run, and its children as child runs (DESIGN §2.10).

One run goes through three phases:

accept
    ``PENDING``: the packet is validated (``parse_packet`` unless it already is a
    HandoffPacket), linted (lint errors -> ``REJECTED`` with the findings in the outcome,
    the ``error`` event and the ``result`` event), ``input_data`` is checked against the
    skill's ``input_schema``, the depth against ``max_depth`` (the smaller of the packet's
    and ``RunnerSettings.max_depth``), and budget and capabilities against the parent's:
    lint's severity for ``BUDGET_EXCEEDS_PARENT`` / ``CAPABILITY_EXCEEDS_PARENT`` decides
    between rejecting and narrowing (``budgets.narrow`` / ``narrow_capabilities``; a child
    never gets more than its parent has left). Then ``ACCEPTED`` -> ``WORKING``; the run
    gets a capability token (``issue_token``, expiring with its timeout).
work
    Up to ``max_iterations`` model calls (the smaller of the packet's and the budget's).
    Text deltas stream as ``text`` events (coalesced: one event per
    ``RunnerSettings.text_flush_chars`` characters or ``text_flush_s`` seconds), every call
    is a ``model_call`` event and is metered and charged to the run and all its
    ancestors. Tool calls run with ``tool_call`` / ``tool_result`` events; every
    capability tool is checked against the run's token first (out of scope ->
    ERR_CONSTRAINT_VIOLATION, recorded as a failed tool result and an ``error`` event),
    approval-required capabilities go through the gate. ``delegate_task`` calls of one
    turn run concurrently as child runs (bounded by the budget's ``max_concurrency``,
    else ``RunnerSettings.max_concurrency``), each child's seed 004 announce becomes the
    tool result its parent's model reads.
finish
    The answer (a ``yield_control`` call, or plain text holding a RESULT block or a JSON
    envelope) is parsed with ``parse_result``, ``output_payload`` validated against the
    expected output schema and every success criterion evaluated. A result that fails
    gets exactly one self-correction turn (seed 000 recovery protocol), then the run ends
    ``FAILED`` with ERR_INVALID_RESULT. ``BLOCKED_AWAITING_CLARIFICATION`` asks the gate
    (kind ``clarification``) and the answer continues the same run. A ``FAILURE`` with a
    seed 001 failed reason follows the coordinator table (``errors.recovery_for``): retried
    ones start a fresh context with ``previous_failure`` attached, at most
    ``min(rule.max_retries, RunnerSettings.retry_limit)`` times. ``PARTIAL_COMPLETION``
    ends ``COMPLETE`` with a warning. The run ends with a ``state`` event, an ``announce``
    event (seed 004: status, summary, error, runtime, usage, result) and the ``result``
    event ``{state, result, criteria_report, usage}``, always the run's last event.

Decisions worth knowing:

- Who may delegate: the root run (depth 0) is the coordinator and is always offered
  ``delegate_task`` while depth < max_depth; a child is offered it only when its packet
  says ``allow_nested`` (seed 004: sub-agents do not spawn by default). A child inherits
  ``allow_nested``, ``max_depth``, the workspace folder and (unless its ``delegate_task``
  arguments name ``capabilities``) the parent's capabilities, all narrowed. A
  ``delegate_task`` call where it is not offered is refused with ERR_CONSTRAINT_VIOLATION.
- Child labels: the ``label`` argument, else ``subagent_type``, else ``child-N``; the
  child's adapter is ``adapter.for_child(label)``; its session key is
  ``agent:<agentId>:subagent:<child run id>`` (agentId: the packet's ``agent_id``, else
  the parent's, else ``main``).
- A model turn whose ``finish_reason`` is :data:`~delegations.protocol.tools.FINISH_WITH_CHILDREN`
  finishes the run, once that turn's ``delegate_task`` calls are done, with
  ``output_payload = {"children": [{label, run_id, state, result}, ...]}`` and no further
  model call (SUCCESS when every child succeeded, PARTIAL_COMPLETION when some did,
  FAILURE when none did). The scripted adapter's ``"finish": "children"`` turn uses it.
- Termination trigger: when the model's text contains the packet's
  ``termination_trigger`` the run ends with that turn: tool calls other than
  ``yield_control`` are not executed; the result is the ``yield_control`` call, else what
  ``parse_result`` reads in the text, else a SUCCESS whose summary is the text before the
  trigger. Validation and criteria still apply, without a correction turn.
- Budgets: before a model call, ``hard_limit_hit`` on the run or any ancestor (usage at
  or beyond a limit) ends the run FAILED with ERR_RESOURCE_EXHAUSTED; after a call, a
  call that overshot a token or cost limit does the same. The soft threshold is checked
  on the run's own budget, once per axis (kind ``budget``); a rejection ends the run with
  ERR_RESOURCE_EXHAUSTED. The wall-clock limit is the hard timeout: ``timeout_s``, else
  ``budget.max_runtime_s``, else ``RunnerSettings.default_timeout_s``, never beyond the
  parent's deadline; time spent parked (no worker) does not count.
- Parking: when the gate raises ``RunParked`` the run checkpoints and returns
  ``AWAITING_APPROVAL`` with ``parked`` set. A parked child makes its parent park too once
  the child's siblings have finished or parked; :meth:`Runner.resume` always resumes the
  whole tree from its root, and a parked child is resumed from its own checkpoint, never
  spawned again.
- Checkpoints are saved at acceptance, after every model call, after every tool call
  (before its ``tool_result`` event), after each turn, when parking and at the end. A tool
  call whose result is in the checkpoint is never executed again.
- Approval keys are ``<run id>:<kind>:<step>``, the step being the tool call's id
  (``capability``, ``capability_request``), the budget axis (``budget``) or the
  clarification's number: the same question asked again after a resume has the same key.
- Cancellation: a root run works in the task that called ``start()`` / ``resume()``;
  ``cancel()`` cancels that task (the runner consumes the cancellation once the tree has
  stopped and returns the CANCELLED outcome), while a host cancelling its own task gets
  the CancelledError back after the tree recorded CANCELLED. Children are tasks of their
  own; every one is awaited before its parent ends, so none outlives the tree. A
  cancelled run's ``error`` is ``{"code": "CANCELLED", "message": why}`` (no ``error``
  event: a cancellation is not a failure).
- The runner never lets a bad run raise into the host: provider errors
  (ProtocolError from the adapter) end the run FAILED with their code and message; any
  other exception ends it FAILED with ERR_TOOL_FAILURE and an ``error`` event. Only
  exceptions that are not ``Exception`` (a dying worker) propagate.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .adapters import make_adapter
from .adapters.base import ModelAdapter, ModelTurn, ToolCall
from .approvals import ApprovalDecision, ApprovalGate, ApprovalKind, ApprovalRequest, RunParked
from .budgets import Budget, Usage, hard_limit_hit, narrow, remaining, soft_threshold_crossed
from .capabilities import (
    APPROVAL_REQUIRED_CAPABILITIES,
    CAPABILITY_DESCRIPTIONS,
    KNOWN_CAPABILITIES,
    issue_token,
    narrow_capabilities,
    verify_token,
)
from .checkpoints import Checkpoint, CheckpointStore
from .criteria import CriteriaReport, evaluate_criteria
from .errors import ErrorCode, ProtocolError, recovery_for
from .events import EventSink, EventType
from .jsontext import encoder
from .lifecycle import TERMINAL_STATES, RunState, can_transition, check_transition
from .lint import Finding, Severity, lint_packet
from .packet import HandoffPacket, PreviousFailure, SubagentType, parse_packet
from .pricing import cost_usd, normalize_prices
from .results import ErrorReport, ResponsePackage, ResultStatus, parse_result
from .schemas import validate_instance
from .tools import (
    DELEGATE_TASK,
    FINISH_WITH_CHILDREN,
    REQUEST_CAPABILITY,
    RUNTIME_TOOLS,
    YIELD_CONTROL,
    ToolContext,
    offered_tools,
)

if TYPE_CHECKING:
    from .manifest import SkillManifest

logger = logging.getLogger(__name__)

# One random key per process when the host configures none: tokens then only verify in
# the process that issued them, which is all an in-process runner needs.
_PROCESS_TOKEN_KEY = secrets.token_bytes(32)

# Event types and run states go into events and checkpoints as plain strings. On the hot
# path a state's string is str(state): a StrEnum's str() is its value, without the two
# Python-level calls that ``.value`` costs.
_STATE = EventType.STATE.value
_TEXT = EventType.TEXT.value
_MODEL_CALL = EventType.MODEL_CALL.value
_TOOL_CALL = EventType.TOOL_CALL.value
_TOOL_RESULT = EventType.TOOL_RESULT.value
_CHILD = EventType.CHILD.value
_APPROVAL = EventType.APPROVAL.value
_MESSAGE = EventType.MESSAGE.value
_RESULT = EventType.RESULT.value
_ANNOUNCE = EventType.ANNOUNCE.value
_LOG = EventType.LOG.value
_ERROR = EventType.ERROR.value

# lint codes that mean "asks for more than the parent has" (narrowed unless lint says error)
_SCOPE_CODES = frozenset({"BUDGET_EXCEEDS_PARENT", "CAPABILITY_EXCEEDS_PARENT", "DEPTH_LIMIT_EXCEEDED"})
_HIGH_RISK = frozenset({"file_delete", "financial_tx"})
# packet fields the runner renders itself (or that only steer the runner) and so leaves
# out of the "delegation details" JSON the model is shown
_RUNNER_FIELDS = frozenset({
    "instruction_set", "goal", "input_data", "success_criteria", "expected_output_schema",
    "termination_trigger", "budget", "capabilities", "depth", "max_depth", "allow_nested",
    "label", "agent_id", "model", "thinking", "cleanup", "max_iterations", "timeout_s",
    "previous_failure", "skill", "subagent_type"})

PROTOCOL_GUIDE = (
    "How to hand back your work: call yield_control with status SUCCESS, PARTIAL_COMPLETION "
    "or FAILURE and output_payload (a JSON object); on FAILURE add error_report {code, "
    "message, failed_reason}. If the task is ambiguous in a way your instructions do not "
    "cover, do not guess: yield status BLOCKED_AWAITING_CLARIFICATION with your questions. "
    "A plain-text answer must end with a '## RESULT' block or be a JSON result envelope. "
    "Use only the tools offered; ask for a missing capability with request_capability.")

SkillResolver = Callable[[str], Awaitable["SkillManifest | None"]]


@dataclass(frozen=True, slots=True)
class RunnerSettings:
    """Runner-wide limits and switches (the Django side fills them from HANDOFF_* settings)."""

    token_key: bytes = _PROCESS_TOKEN_KEY
    max_depth: int = 3
    soft_threshold: float = 0.8
    approval_required: frozenset[str] = APPROVAL_REQUIRED_CAPABILITIES
    workspace_root: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "handoff-workspaces")
    subprocess_enabled: bool = False
    payload_limit_bytes: int | None = None      # None: lint's default
    default_timeout_s: float = 900.0
    http_max_bytes: int = 1_000_000
    http_timeout_s: float = 20.0
    read_max_bytes: int = 256_000
    command_timeout_s: float = 60.0
    retry_limit: int = 2
    max_concurrency: int = 8                    # seed 004's lane default
    prices: Mapping[str, Any] | None = None     # model -> (input, output) USD per 1M tokens
    text_flush_chars: int = 200
    text_flush_s: float = 0.05
    cancel_grace_s: float = 1.0


@dataclass(slots=True)
class RunOutcome:
    """How a run ended (or where it stopped: AWAITING_APPROVAL with ``parked`` set)."""

    run_id: str
    state: RunState
    result: ResponsePackage | None = None
    usage: Usage = field(default_factory=Usage)
    criteria_report: dict[str, Any] | None = None
    findings: list[Finding] = field(default_factory=list)
    error: dict[str, Any] | None = None
    parked: ApprovalRequest | None = None
    announce: dict[str, Any] | None = None
    session_key: str = ""
    label: str = ""
    children: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.state is RunState.COMPLETE

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "state": self.state.value,
                "result": self.result.to_dict() if self.result is not None else None,
                "usage": self.usage.as_dict(), "criteria_report": self.criteria_report,
                "findings": [finding.as_dict() for finding in self.findings],
                "error": self.error, "announce": self.announce,
                "parked": _request_dict(self.parked) if self.parked is not None else None,
                "session_key": self.session_key, "label": self.label, "children": self.children}


def _request_dict(request: ApprovalRequest) -> dict[str, Any]:
    return {"key": request.key, "run_id": request.run_id, "kind": request.kind.value,
            "title": request.title, "payload": request.payload, "risk": request.risk}


def _request_from(data: dict[str, Any]) -> ApprovalRequest:
    return ApprovalRequest(key=data["key"], run_id=data["run_id"], kind=ApprovalKind(data["kind"]),
                           title=data.get("title", ""), payload=data.get("payload", {}),
                           risk=data.get("risk", "low"))


class _Run:
    """Everything the runner holds about one run while it is active in this process."""

    __slots__ = (
        "adapter",
        "adapter_config",
        "adapter_name",
        "answered",
        "asked",
        "budget",
        "budget_dict",
        "can_delegate",
        "cancel_reason",
        "capabilities",
        "ceiling",
        "checkpoint_base",
        "child_runs",
        "children",
        "clarifications",
        "completed",
        "correction_used",
        "created_at",
        "deadline",
        "depth",
        "elapsed_before",
        "findings",
        "inbox",
        "iteration",
        "label",
        "lane",
        "max_depth",
        "max_iterations",
        "messages",
        "outcome",
        "packet",
        "packet_dict",
        "parent",
        "parent_view",
        "pending_calls",
        "pending_dicts",
        "pending_finish",
        "pending_text",
        "reject",
        "requested",
        "requested_cancel",
        "resumed",
        "retries",
        "root_id",
        "run_id",
        "session_key",
        "skill",
        "soft_gated",
        "spawned",
        "started_at",
        "state",
        "task",
        "timeout_s",
        "token",
        "tools",
        "usage",
        "workspace_text",
    )

    def __init__(self, run_id: str, parent: _Run | None, adapter: ModelAdapter) -> None:
        self.run_id = run_id
        self.parent = parent
        self.root_id: str = parent.root_id if parent is not None else run_id
        self.depth = 0
        self.label = ""
        self.session_key = ""
        self.adapter = adapter
        self.adapter_name: str = adapter.name
        self.adapter_config: dict[str, Any] | None = None
        self.packet: HandoffPacket | None = None
        self.packet_dict: dict[str, Any] | None = None
        self.reject: ProtocolError | None = None
        self.parent_view: HandoffPacket | None = None
        self.skill: SkillManifest | None = None
        self.messages: list[dict[str, Any]] = []
        self.answered: set[str] = set()
        self.usage = Usage()
        self.budget: Budget = Budget.unlimited()
        self.budget_dict: dict[str, Any] | None = None
        self.checkpoint_base: dict[str, Any] | None = None
        # keys of approval requests already put to the gate (events emitted), across resumes
        self.asked: set[str] = set()
        self.capabilities: list[str] = []
        self.ceiling: list[str] | None = None
        self.token = ""
        self.tools: list[dict[str, Any]] = []
        self.can_delegate = False
        self.max_depth = 3
        self.iteration = 0
        self.max_iterations = 5
        self.state: RunState | None = None
        self.pending_text = ""
        self.pending_calls: list[ToolCall] | None = None
        self.pending_dicts: list[dict[str, Any]] = []
        self.pending_finish = ""
        self.completed: dict[str, dict[str, Any]] = {}
        self.children: dict[str, str] = {}
        self.child_runs: dict[str, _Run] = {}
        self.spawned = 0
        # the parent's concurrency lane this run waits for (None: no contention possible)
        self.lane: asyncio.Semaphore | None = None
        self.correction_used = False
        self.retries = 0
        self.soft_gated: set[str] = set()
        self.inbox: list[str] = []
        self.clarifications = 0
        self.elapsed_before = 0.0
        self.started_at = 0.0
        self.timeout_s = 0.0
        self.deadline = 0.0
        self.workspace_text = ""   # the folder its file tools are confined to
        self.task: asyncio.Task[RunOutcome] | None = None
        self.cancel_reason = ""
        self.requested_cancel = False
        self.requested: HandoffPacket | None = None
        self.findings: list[Finding] = []
        self.outcome: RunOutcome | None = None
        self.resumed = False
        self.created_at = time.time()

    def chain(self) -> Iterable[_Run]:
        """The run and its ancestors, nearest first."""
        run: _Run | None = self
        while run is not None:
            yield run
            run = run.parent


class Runner:
    """Executes runs in-process as asyncio tasks. One Runner may run many trees at once."""

    def __init__(self, *, sink: EventSink, gate: ApprovalGate, checkpoints: CheckpointStore,
                 settings: RunnerSettings | None = None, skills: SkillResolver | None = None) -> None:
        self.sink = sink
        self.gate = gate
        self.checkpoints = checkpoints
        self.settings = settings if settings is not None else RunnerSettings()
        self.skills = skills
        self._emit = sink.emit
        self._workspace_root = str(self.settings.workspace_root)
        self._prices = normalize_prices(self.settings.prices) if self.settings.prices else None
        self._lint_limits: dict[str, int] = (
            {} if self.settings.payload_limit_bytes is None
            else {"payload_limit_bytes": self.settings.payload_limit_bytes})
        self._runs: dict[str, _Run] = {}
        self._tasks: set[asyncio.Task[RunOutcome]] = set()

    # -- public API -----------------------------------------------------------------------

    async def start(self, packet: HandoffPacket | dict[str, Any] | str, *, adapter: ModelAdapter,
                    run_id: str | None = None, skill: SkillManifest | None = None,
                    parent_packet: HandoffPacket | None = None,
                    parent_budget: Budget | None = None,
                    parent_capabilities: list[str] | None = None,
                    workspace: Path | str | None = None) -> RunOutcome:
        """Run ``packet`` to a terminal state (or until it parks) and return how it ended.

        ``parent_packet`` / ``parent_budget`` / ``parent_capabilities`` bound a run that a
        host starts on behalf of an existing run: the packet is linted against them and its
        budget and capabilities narrowed to them.
        """
        run = _Run(run_id or new_run_id(), None, adapter)
        run.skill = skill
        run.workspace_text = str(workspace) if workspace is not None else f"{self._workspace_root}/{run.run_id}"
        if isinstance(packet, HandoffPacket):
            run.packet = packet
        else:
            try:
                run.packet = parse_packet(packet)
            except ProtocolError as exc:
                run.reject = exc
        if run.packet is not None:
            self._scope_root(run, parent_packet, parent_budget, parent_capabilities)
        return await self._launch(run)

    async def resume(self, run_id: str, *, adapter: ModelAdapter | None = None) -> RunOutcome:
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
            return self._outcome_from(checkpoint)
        if checkpoint.run_id in self._runs:
            raise ProtocolError(ErrorCode.ILLEGAL_TRANSITION,
                                f"Run {checkpoint.run_id} is already running in this process.")
        run = self._restore(checkpoint, None, adapter)
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
        run.inbox.append(text)
        return True

    def active_runs(self) -> list[str]:
        """Ids of the runs executing in this process now."""
        return list(self._runs)

    # -- launching --------------------------------------------------------------------------

    def _scope_root(self, run: _Run, parent_packet: HandoffPacket | None,
                    parent_budget: Budget | None, parent_capabilities: list[str] | None) -> None:
        packet = run.packet
        assert packet is not None
        skill = run.skill
        if skill is not None:
            packet = _merge_skill(packet, skill)
            run.packet = packet
        run.depth = packet.depth
        run.label = packet.label or (str(packet.subagent_type) if packet.subagent_type else "root")
        run.session_key = f"agent:{packet.agent_id or 'main'}:subagent:{run.run_id}"
        budget_cap = parent_budget if parent_budget is not None else (
            parent_packet.budget if parent_packet is not None else None)
        caps_cap = parent_capabilities if parent_capabilities is not None else (
            list(parent_packet.capabilities) if parent_packet is not None else None)
        run.budget = narrow(packet.budget, budget_cap) if budget_cap is not None else packet.budget
        run.capabilities = (narrow_capabilities(packet.capabilities, caps_cap) if caps_cap is not None
                            else list(dict.fromkeys(packet.capabilities)))
        run.ceiling = list(caps_cap) if caps_cap is not None else None
        if parent_packet is not None or budget_cap is not None or caps_cap is not None:
            base = parent_packet if parent_packet is not None else HandoffPacket()
            run.parent_view = base.model_copy(update={
                "budget": budget_cap if budget_cap is not None else base.budget,
                "capabilities": caps_cap if caps_cap is not None else list(base.capabilities),
                "depth": max(0, packet.depth - 1)})

    async def _launch(self, run: _Run) -> RunOutcome:
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

    def _start_child(self, run: _Run) -> asyncio.Task[RunOutcome]:
        """Start a child run as a task of its own, eagerly.

        The task runs at once, inside this call, up to its first real suspension (a model
        call waiting on the network, a slow sink, a full concurrency lane): a child whose
        work never waits finishes without a round trip through the event loop, and one
        that waits lets its siblings start, so children still run concurrently. The run
        is registered before it starts, since it may finish (and unregister) before
        ``create_task`` returns.
        """
        self._runs[run.run_id] = run
        task: asyncio.Task[RunOutcome] = asyncio.Task(
            self._drive(run), loop=asyncio.get_running_loop(), name=f"handoff-run-{run.run_id}",
            eager_start=True)
        run.task = task
        if not task.done():
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return task

    # -- one run ----------------------------------------------------------------------------

    async def _drive(self, run: _Run) -> RunOutcome:
        """The whole life of one run; returns its outcome and never raises an Exception."""
        lane = run.lane
        try:
            if lane is None:
                await self._live(run)
            else:
                async with lane:
                    await self._live(run)
        except asyncio.CancelledError:
            # cancelled before it started working (waiting for a concurrency slot)
            await self._end(run, RunState.CANCELLED, error=self._cancel_error(run))
        if run.outcome is None:
            # a state the run cannot leave by itself (should not happen): report, never hang
            await self._end(run, RunState.FAILED, error={
                "code": ErrorCode.TOOL_FAILURE.value, "message": "The run stopped without an outcome."})
        assert run.outcome is not None
        return run.outcome

    async def _live(self, run: _Run) -> None:
        try:
            if run.resumed:
                await self._reenter(run)
            elif not await self._accept(run):
                return
            self._arm(run)
            if run.parent is not None and run.deadline >= run.parent.deadline:
                # no earlier deadline than its parent's: the parent's timeout cancels it
                await self._work(run)
                return
            window = asyncio.timeout_at(run.deadline)
            try:
                async with window:
                    await self._work(run)
            except TimeoutError:
                if not window.expired():
                    raise
                await self._stop_children(run, f"Cancelled: parent run {run.run_id} timed out.")
                await self._end(run, RunState.TIMEOUT, error={
                    "code": ErrorCode.TIMEOUT.value,
                    "message": f"The run hit its hard timeout of {run.timeout_s:g} s before "
                               f"returning a result; its unfinished children were cancelled."})
        except asyncio.CancelledError:
            await self._stop_children(run, f"Cancelled: parent run {run.run_id} was cancelled.")
            await self._end(run, RunState.CANCELLED, error=self._cancel_error(run))
        except RunParked as parked:
            await self._park(run, parked.request)
        except ProtocolError as exc:
            await self._stop_children(run, f"Cancelled: parent run {run.run_id} failed.")
            await self._end(run, RunState.FAILED, error=_error_dict(exc))
        except Exception as exc:
            logger.exception("run %s failed unexpectedly", run.run_id)
            await self._stop_children(run, f"Cancelled: parent run {run.run_id} failed.")
            await self._end(run, RunState.FAILED, error={
                "code": ErrorCode.TOOL_FAILURE.value,
                "message": f"The run failed unexpectedly ({type(exc).__name__}: {str(exc)[:300]})."})

    def _cancel_error(self, run: _Run) -> dict[str, Any]:
        reason = run.cancel_reason
        if not reason:
            parent = run.parent
            reason = (f"Cancelled: parent run {parent.run_id} stopped (cancelled, timed out or failed)."
                      if parent is not None else "Cancelled.")
        return {"code": "CANCELLED", "message": reason}

    # -- accept ---------------------------------------------------------------------------

    async def _accept(self, run: _Run) -> bool:
        run.state = RunState.PENDING
        await self._emit(run.run_id, _STATE, {
            "state": "PENDING", "previous": None, "depth": run.depth, "label": run.label,
            "parent_run_id": run.parent.run_id if run.parent is not None else None,
            "root_run_id": run.root_id})
        if run.reject is not None:
            await self._end(run, RunState.REJECTED, error=_error_dict(run.reject))
            return False
        packet = run.packet
        assert packet is not None
        if run.skill is None and packet.skill and self.skills is not None:
            run.skill = await self.skills(packet.skill)
            if run.skill is None:
                await self._end(run, RunState.REJECTED, error={
                    "code": ErrorCode.INVALID_PACKET.value,
                    "message": f"Skill '{packet.skill}' is not in the registry; import it or "
                               f"name an existing skill@version."})
                return False
            packet = run.packet = _merge_skill(packet, run.skill)
            if run.requested is not None:
                run.requested = _merge_skill(run.requested, run.skill)
        findings = lint_packet(run.requested or packet, run.parent_view, max_depth=self.settings.max_depth,
                               approval_required=self.settings.approval_required,
                               **self._lint_limits)
        run.max_depth = min(packet.max_depth, self.settings.max_depth)
        run.findings = findings
        errors = [finding for finding in findings if finding.severity == Severity.ERROR]
        issues = []
        if run.skill is not None and run.skill.input_schema:
            issues = validate_instance(run.skill.input_schema, packet.input_data, "input_data")
        if errors or issues:
            error: dict[str, Any]
            if errors:
                scope = any(finding.code in _SCOPE_CODES for finding in errors)
                first = errors[0]
                error = {"code": (ErrorCode.CONSTRAINT_VIOLATION if scope else ErrorCode.INVALID_PACKET).value,
                         "message": f"The delegation was rejected ({len(errors)} lint error"
                                    f"{'s' if len(errors) > 1 else ''}); first: {first.code} at "
                                    f"{first.field}: {first.message}"}
            else:
                error = {"code": ErrorCode.INVALID_PACKET.value,
                         "message": f"input_data does not match the skill's input_schema: "
                                    f"{issues[0].field}: {issues[0].message}",
                         "issues": [issue.as_dict() for issue in issues]}
            await self._end(run, RunState.REJECTED, error=error)
            return False
        # the run keeps the narrowed scope from here on (lint saw what was asked for)
        run.requested = None
        if packet.budget is not run.budget or packet.capabilities != run.capabilities:
            packet = run.packet = packet.model_copy(update={
                "budget": run.budget, "capabilities": list(run.capabilities)})
        limit = run.budget.max_iterations
        run.max_iterations = packet.max_iterations if limit is None else min(packet.max_iterations, limit)
        run.timeout_s = packet.timeout_s or run.budget.max_runtime_s or self.settings.default_timeout_s
        run.can_delegate = (run.depth == 0 or packet.allow_nested) and run.depth < run.max_depth
        run.checkpoint_base = None
        await self._set_state(run, RunState.ACCEPTED,
                              {"findings": [f.as_dict() for f in findings]} if findings else None)
        run.messages = self._initial_messages(run)
        await self._set_state(run, RunState.WORKING)
        return True

    def _arm(self, run: _Run) -> None:
        """Deadline, token and tools for the time the run works in this process."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        run.started_at = now
        deadline = now + max(0.0, run.timeout_s - run.elapsed_before)
        if run.parent is not None:
            deadline = min(deadline, run.parent.deadline)
        run.deadline = deadline
        self._issue_token(run)

    def _issue_token(self, run: _Run) -> None:
        loop_left = run.deadline - asyncio.get_running_loop().time()
        run.token = issue_token(
            self.settings.token_key, run_id=run.run_id, capabilities=run.capabilities,
            expires_at=time.time() + max(loop_left, 0.0) + 1.0,
            parent_run_id=run.parent.run_id if run.parent is not None else None)
        run.tools = offered_tools(run.capabilities, can_delegate=run.can_delegate,
                                  subprocess_enabled=self.settings.subprocess_enabled,
                                  output_schema=run.packet.expected_output_schema if run.packet else None)

    async def _reenter(self, run: _Run) -> None:
        if run.state is RunState.AWAITING_APPROVAL:
            if run.asked:
                # parked on its own question: the state changes once the gate answers it
                # (_ask), not before, so a decision still pending leaves no trace
                return
            await self._set_state(run, RunState.WORKING, {"resumed": True})
        else:
            await self._emit(run.run_id, _LOG, {
                "level": "info", "message": f"Resumed from the checkpoint in state {run.state}."})

    def _packet_dict(self, run: _Run) -> dict[str, Any]:
        if run.packet_dict is None:
            assert run.packet is not None
            run.packet_dict = run.packet.to_dict()
        return run.packet_dict

    def _initial_messages(self, run: _Run) -> list[dict[str, Any]]:
        packet = run.packet
        assert packet is not None
        role = packet.subagent_type.value if packet.subagent_type is not None else "general"
        system = [packet.instruction_set or f"You are a {role} subagent working on one delegated task.",
                  PROTOCOL_GUIDE]
        if packet.success_criteria:
            lines = "\n".join(f"- {c if isinstance(c, str) else json.dumps(c)}" for c in packet.success_criteria)
            system.append(f"Your result is checked against these success criteria:\n{lines}")
        if packet.expected_output_schema:
            system.append("output_payload must be valid against this JSON Schema:\n"
                          + _schema_text(packet.expected_output_schema))
        if packet.termination_trigger:
            system.append(f"Write {packet.termination_trigger!r} when you are done; the run ends there.")
        user = []
        if packet.goal:
            user.append(f"Goal: {packet.goal}")
        if packet.input_data:
            user.append("Input data (JSON):\n" + _json_text(packet.input_data))
        details = {key: value for key, value in self._packet_dict(run).items() if key not in _RUNNER_FIELDS}
        if details:
            user.append("Delegation details (JSON):\n" + _json_text(details))
        if packet.previous_failure is not None:
            user.append("A previous attempt failed; fix what it reports:\n"
                        + json.dumps(packet.previous_failure.model_dump(mode="json"), ensure_ascii=False))
        if not user:
            user.append("Begin.")
        return [{"role": "system", "content": "\n\n".join(system)},
                {"role": "user", "content": "\n\n".join(user)}]

    # -- work -----------------------------------------------------------------------------

    async def _work(self, run: _Run) -> None:
        while True:
            if run.pending_calls is None:
                if run.state is RunState.AWAITING_APPROVAL:
                    # resumed, and the turn that asked did not ask again: working anyway
                    run.asked.clear()
                    await self._set_state(run, RunState.WORKING, {"resumed": True})
                if run.iteration >= run.max_iterations:
                    raise ProtocolError(
                        ErrorCode.RESOURCE_EXHAUSTED,
                        f"The run used all {run.max_iterations} iterations (max_iterations) "
                        f"without returning a result.")
                self._check_hard_limits(run, before_call=True)
                if run.inbox:
                    await self._deliver_messages(run)
                await self._model_call(run)
                self._check_hard_limits(run, before_call=False)
            await self._check_soft_threshold(run)
            if await self._process_turn(run):
                return

    async def _deliver_messages(self, run: _Run) -> None:
        queued, run.inbox = run.inbox, []
        for text in queued:
            run.messages.append({"role": "user", "content": text})
            await self._emit(run.run_id, _MESSAGE, {"text": text, "from": "user"})

    async def _model_call(self, run: _Run) -> None:
        run.iteration += 1
        stream = _TextStream(self, run.run_id)
        started = time.perf_counter()
        turn = await run.adapter.complete(list(run.messages), run.tools, on_text=stream.feed)
        await stream.flush()
        duration_ms = (time.perf_counter() - started) * 1000.0
        model = turn.model or run.adapter.model_name
        cost = self._cost(run.adapter, model, turn)
        for charged in run.chain():
            charged.usage.charge(input_tokens=turn.input_tokens, output_tokens=turn.output_tokens,
                                 cost_usd=cost)
        calls = turn.tool_calls
        dicts = [{"id": call.id, "name": call.name, "arguments": call.arguments} for call in calls]
        message: dict[str, Any] = {"role": "assistant", "content": turn.text}
        if dicts:
            message["tool_calls"] = dicts
        run.messages.append(message)
        run.pending_text = turn.text
        run.pending_calls = list(calls)
        run.pending_dicts = dicts
        run.pending_finish = turn.finish_reason
        run.completed = {}
        await self._emit(run.run_id, _MODEL_CALL, {
            "iteration": run.iteration, "model": model, "input_tokens": turn.input_tokens,
            "output_tokens": turn.output_tokens, "cost_usd": cost,
            "duration_ms": round(duration_ms, 3), "tool_calls": len(calls)})
        await self._save(run)

    def _cost(self, adapter: ModelAdapter, model: str, turn: ModelTurn) -> float:
        if not turn.input_tokens and not turn.output_tokens:
            return 0.0
        own = getattr(adapter, "cost_usd", None)
        if callable(own):
            priced = own(turn.input_tokens, turn.output_tokens)
            if isinstance(priced, int | float):
                return float(priced)
        return cost_usd(model, turn.input_tokens, turn.output_tokens, self._prices)

    def _check_hard_limits(self, run: _Run, *, before_call: bool) -> None:
        for charged in run.chain():
            if before_call:
                axis = hard_limit_hit(charged.budget, charged.usage)
            else:
                axis = _overshot(charged.budget, charged.usage)
            if axis is not None:
                whose = "its" if charged is run else f"ancestor run {charged.run_id}'s"
                raise ProtocolError(
                    ErrorCode.RESOURCE_EXHAUSTED,
                    f"Budget exhausted: {whose} {axis} limit of {getattr(charged.budget, axis):g} "
                    f"is used up ({_usage_figure(charged.usage, axis)}).",
                    details={"axis": axis, "run_id": charged.run_id})

    async def _check_soft_threshold(self, run: _Run) -> None:
        crossed = soft_threshold_crossed(run.budget, run.usage, self.settings.soft_threshold)
        for axis in crossed:
            if axis in run.soft_gated:
                continue
            limit = getattr(run.budget, axis)
            decision = await self._ask(
                run, ApprovalKind.BUDGET, axis,
                f"Run {run.label or run.run_id} used {_usage_figure(run.usage, axis)} of its "
                f"{axis} limit {limit:g}; continue?",
                {"axis": axis, "limit": limit, "used": _usage_value(run.usage, axis),
                 "threshold": self.settings.soft_threshold, "usage": run.usage.as_dict()},
                "medium")
            run.soft_gated.add(axis)
            if not decision.allows:
                raise ProtocolError(
                    ErrorCode.RESOURCE_EXHAUSTED,
                    f"Stopped at the soft budget threshold on {axis} by a person"
                    f"{': ' + decision.comment if decision.comment else ''}.",
                    details={"axis": axis})

    async def _process_turn(self, run: _Run) -> bool:
        """Handle the model turn in hand; True when the run has finished."""
        assert run.pending_calls is not None and run.packet is not None
        calls = run.pending_calls
        text = run.pending_text
        trigger = run.packet.termination_trigger
        triggered = trigger is not None and trigger != "" and trigger in text
        yield_call: ToolCall | None = None
        work: list[ToolCall] = []
        for call in calls:
            if call.name == YIELD_CONTROL:
                if yield_call is None:
                    yield_call = call
            else:
                work.append(call)
        if work and not triggered:
            await self._execute(run, work)
        if run.pending_finish == FINISH_WITH_CHILDREN and yield_call is None and not triggered:
            return await self._conclude(run, self._children_result(run, work), None, False)
        if yield_call is not None:
            return await self._conclude(run, yield_call.arguments, yield_call, triggered)
        if triggered or not calls:
            answer = text.split(trigger, 1)[0] if triggered and trigger else text
            return await self._conclude(run, answer, None, triggered)
        self._answer_turn(run)
        self._next_turn(run)
        await self._save(run)
        return False

    def _answer_turn(self, run: _Run) -> None:
        """Answer the turn's executed tool calls in the conversation.

        Done only when the conversation goes on: a run that ends with this turn never
        encodes results no model will read (a coordinator's gathered children, above all).
        """
        for call in run.pending_calls or ():
            record = run.completed.get(call.id)
            if record is not None:
                self._answer(run, call.id, call.name, record)

    def _answer(self, run: _Run, call_id: str, name: str, record: dict[str, Any]) -> None:
        """Append the tool message answering ``call_id`` (once, even across a resume)."""
        if call_id in run.answered:
            return
        run.answered.add(call_id)
        if record.get("ok"):
            content = record.get("result")
            if name == DELEGATE_TASK and isinstance(content, dict):
                content = _compact_announce(content)
            body = _json_text(content)
        else:
            body = _json_text({"error": record.get("error")})
        run.messages.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": body})

    def _next_turn(self, run: _Run) -> None:
        run.pending_calls = None
        run.pending_text = ""
        run.pending_dicts = []
        run.pending_finish = ""
        run.completed = {}

    # -- tools ----------------------------------------------------------------------------

    async def _execute(self, run: _Run, calls: list[ToolCall]) -> None:
        """Run the turn's tool calls: others in order, then every delegate_task concurrently."""
        delegations = []
        for call in calls:
            if call.name == DELEGATE_TASK:
                delegations.append(call)
            elif call.id not in run.completed:
                await self._run_tool(run, call)
        if delegations:
            await self._delegate(run, delegations)

    async def _run_tool(self, run: _Run, call: ToolCall) -> None:
        if not run.asked or not self._waits_for_approval(run, call):
            await self._emit(run.run_id, _TOOL_CALL, {"id": call.id, "name": call.name,
                                                      "arguments": call.arguments})
        scope_error = False
        try:
            result = await self._tool(run, call)
            record: dict[str, Any] = {"name": call.name, "ok": True, "result": result}
        except ProtocolError as exc:
            record = {"name": call.name, "ok": False, "error": exc.as_dict()}
            scope_error = exc.code is ErrorCode.CONSTRAINT_VIOLATION and not exc.details.get("refused_by_person")
        except (RunParked, asyncio.CancelledError):
            raise
        except Exception as exc:
            logger.exception("tool %s failed in run %s", call.name, run.run_id)
            record = {"name": call.name, "ok": False, "error": {
                "code": ErrorCode.TOOL_FAILURE.value,
                "message": f"Tool {call.name} failed: {type(exc).__name__}: {str(exc)[:300]}"}}
        run.completed[call.id] = record
        await self._save(run)
        await self._emit(run.run_id, _TOOL_RESULT, {"id": call.id, **record})
        if scope_error:
            await self._emit(run.run_id, _ERROR, {**record["error"], "tool": call.name, "call_id": call.id})

    @staticmethod
    def _waits_for_approval(run: _Run, call: ToolCall) -> bool:
        """Whether ``call`` was announced before a resume and waits for a person's decision."""
        return (f"{run.run_id}:{ApprovalKind.CAPABILITY.value}:{call.id}" in run.asked
                or f"{run.run_id}:{ApprovalKind.CAPABILITY_REQUEST.value}:{call.id}" in run.asked)

    async def _tool(self, run: _Run, call: ToolCall) -> dict[str, Any]:
        if call.name == REQUEST_CAPABILITY:
            return await self._request_capability(run, call)
        tool = RUNTIME_TOOLS.get(call.name)
        if tool is None:
            offered = ", ".join(schema["name"] for schema in run.tools)
            raise ProtocolError(ErrorCode.CONSTRAINT_VIOLATION,
                                f"There is no tool '{call.name}' for this run. Tools offered: {offered}.")
        verify_token(self.settings.token_key, run.token, capability=tool.capability)
        if tool.capability == "subprocess_exec" and not self.settings.subprocess_enabled:
            raise ProtocolError(ErrorCode.CONSTRAINT_VIOLATION,
                                "run_command is switched off on this server (subprocess_enabled).")
        arguments = call.arguments
        if tool.capability in self.settings.approval_required:
            decision = await self._ask(
                run, ApprovalKind.CAPABILITY, call.id,
                f"Run {run.label or run.run_id} wants to {call.name} ({tool.capability})",
                {"tool": call.name, "capability": tool.capability, "arguments": arguments,
                 "call_id": call.id, "description": CAPABILITY_DESCRIPTIONS.get(tool.capability, "")},
                "high" if tool.capability in _HIGH_RISK else "medium")
            if not decision.allows:
                raise ProtocolError(ErrorCode.CONSTRAINT_VIOLATION,
                                    f"Refused by a person: {decision.comment or 'no reason given'}.",
                                    details={"refused_by_person": True})
            if decision.edited_arguments is not None:
                arguments = decision.edited_arguments
        context = ToolContext(
            workspace=Path(run.workspace_text), read_max_bytes=self.settings.read_max_bytes,
            http_max_bytes=self.settings.http_max_bytes, http_timeout_s=self.settings.http_timeout_s,
            command_timeout_s=self.settings.command_timeout_s)
        return await tool.run(context, arguments)

    async def _request_capability(self, run: _Run, call: ToolCall) -> dict[str, Any]:
        capability = call.arguments.get("capability")
        reason = call.arguments.get("reason", "")
        if not isinstance(capability, str) or capability not in KNOWN_CAPABILITIES:
            raise ProtocolError(ErrorCode.CONSTRAINT_VIOLATION,
                                f"Unknown capability {capability!r}; known: {', '.join(sorted(KNOWN_CAPABILITIES))}.")
        if capability in run.capabilities:
            return {"capability": capability, "granted": True, "note": "already in scope"}
        ceiling = run.parent.capabilities if run.parent is not None else run.ceiling
        if ceiling is not None and capability not in ceiling:
            raise ProtocolError(
                ErrorCode.CONSTRAINT_VIOLATION,
                f"Capability '{capability}' is outside the parent's scope; capabilities only "
                f"shrink down the delegation chain, so it cannot be granted here.")
        decision = await self._ask(
            run, ApprovalKind.CAPABILITY_REQUEST, call.id,
            f"Run {run.label or run.run_id} asks for capability {capability}",
            {"capability": capability, "reason": reason, "call_id": call.id,
             "description": CAPABILITY_DESCRIPTIONS.get(capability, "")},
            "high" if capability in _HIGH_RISK else "medium")
        if not decision.allows:
            raise ProtocolError(ErrorCode.CONSTRAINT_VIOLATION,
                                f"Refused by a person: {decision.comment or 'no reason given'}.",
                                details={"refused_by_person": True})
        run.capabilities = [*run.capabilities, capability]
        self._issue_token(run)
        granted_tools = [tool.name for tool in RUNTIME_TOOLS.values() if tool.capability == capability]
        return {"capability": capability, "granted": True, "tools": granted_tools}

    async def _ask(self, run: _Run, kind: ApprovalKind, step: str, title: str,
                   payload: dict[str, Any], risk: str) -> ApprovalDecision:
        key = f"{run.run_id}:{kind.value}:{step}"
        request = ApprovalRequest(key=key, run_id=run.run_id, kind=kind, title=title, payload=payload,
                                  risk=risk)
        resumed = key in run.asked
        if not resumed:
            await self._emit(run.run_id, _APPROVAL, {"key": key, "kind": kind.value, "title": title,
                                                     "payload": payload, "risk": risk})
            if run.state is RunState.WORKING:
                await self._set_state(run, RunState.AWAITING_APPROVAL, {"approval": key})
            run.asked.add(key)
            # recorded before waiting: a worker that dies while the gate decides resumes
            # without announcing the question a second time
            await self._save(run)
        # asked before a resume: the gate answers from what was decided meanwhile (or parks
        # the run again, which then leaves no event at all)
        decision = await self.gate.decide(request)
        run.asked.discard(key)
        await self._set_state(run, RunState.WORKING, {"resumed": True} if resumed else None)
        await self._emit(run.run_id, _APPROVAL, {
            "key": request.key, "kind": kind.value, "title": title,
            "decision": decision.decision.value, "comment": decision.comment,
            "decided_by": decision.decided_by})
        return decision

    # -- children -------------------------------------------------------------------------

    async def _delegate(self, run: _Run, calls: list[ToolCall]) -> None:
        started: list[tuple[ToolCall, _Run]] = []
        scope: tuple[Budget, HandoffPacket] | None = None
        for call in calls:
            if call.id in run.completed:
                continue
            child_id = run.children.get(call.id)
            if child_id is not None:
                child = await self._reattach(run, call, child_id)
                if child is not None:
                    started.append((call, child))
                continue
            await self._emit(run.run_id, _TOOL_CALL, {"id": call.id, "name": call.name,
                                                      "arguments": call.arguments})
            if not run.can_delegate:
                await self._refuse_delegation(run, call)
                continue
            try:
                if scope is None:
                    scope = self._parent_scope(run)
                child = self._spawn(run, call, None, scope)
            except ProtocolError as exc:
                failure = exc.as_dict()
                run.completed[call.id] = {"name": DELEGATE_TASK, "ok": False, "error": failure}
                await self._emit(run.run_id, _TOOL_RESULT, {"id": call.id, **run.completed[call.id]})
                await self._emit(run.run_id, _ERROR, {**failure, "call_id": call.id})
                continue
            run.children[call.id] = child.run_id
            await self._emit(run.run_id, _CHILD, self._child_event(run, call, child))
            started.append((call, child))
        # saved before any child starts: a worker that dies while they run resumes them
        # from their own checkpoints instead of spawning them again
        await self._save(run)
        if not started:
            return
        limit = max(1, run.budget.max_concurrency or self.settings.max_concurrency)
        if len(started) > limit:
            # one lane per turn: a turn's children all end before the next turn starts
            lane = asyncio.Semaphore(limit)
            for _, child in started:
                child.lane = lane
        tasks = [self._start_child(child) for _, child in started]
        outcomes = (await asyncio.gather(*tasks, return_exceptions=True)
                    if not all(task.done() for task in tasks) else [_task_outcome(task) for task in tasks])
        parked: ApprovalRequest | None = None
        for (call, child), returned in zip(started, outcomes, strict=True):
            if not isinstance(returned, RunOutcome):
                # cancelled before its first step: it never reported anything itself
                await self._end(child, RunState.CANCELLED, error=self._cancel_error(child))
            outcome = child.outcome
            assert outcome is not None
            if outcome.state is RunState.AWAITING_APPROVAL:
                parked = parked or outcome.parked
                continue
            record = {"name": DELEGATE_TASK, "ok": outcome.state is RunState.COMPLETE,
                      "result": outcome.announce}
            run.completed[call.id] = record
            run.child_runs.pop(child.run_id, None)
            await self._emit(run.run_id, _TOOL_RESULT, {"id": call.id, **record})
        # no checkpoint here: the turn's next step saves one (the next turn, the end, the
        # park), and a worker dying before that resumes from the one above, finding the
        # children's outcomes in their own checkpoints
        if parked is not None:
            raise RunParked(parked)

    async def _refuse_delegation(self, run: _Run, call: ToolCall) -> None:
        why = ("nested delegation is off for this subagent (allow_nested is false)"
               if run.depth < run.max_depth else f"depth {run.depth} is already the limit ({run.max_depth})")
        failure = {"code": ErrorCode.CONSTRAINT_VIOLATION.value,
                   "message": f"delegate_task is not available to this run: {why}. Do the work yourself."}
        run.completed[call.id] = {"name": DELEGATE_TASK, "ok": False, "error": failure}
        await self._save(run)
        await self._emit(run.run_id, _TOOL_RESULT, {"id": call.id, **run.completed[call.id]})
        await self._emit(run.run_id, _ERROR, {**failure, "call_id": call.id})

    def _parent_scope(self, parent: _Run) -> tuple[Budget, HandoffPacket]:
        """What a child may have: the parent's remaining budget and the parent as lint sees it."""
        assert parent.packet is not None
        available = remaining(parent.budget, parent.usage)
        view = parent.packet.model_copy(update={"budget": available, "capabilities": list(parent.capabilities)})
        return available, view

    def _spawn(self, parent: _Run, call: ToolCall, run_id: str | None,
               scope: tuple[Budget, HandoffPacket] | None = None) -> _Run:
        """A child run for a delegate_task call, scoped by its parent (not started yet)."""
        assert parent.packet is not None
        arguments = call.arguments if isinstance(call.arguments, dict) else {}
        parent.spawned += 1
        label = str(arguments.get("label") or arguments.get("subagent_type") or f"child-{parent.spawned}")
        adapter = parent.adapter.for_child(label)
        child = _Run(run_id or new_run_id(), parent, adapter)
        child.depth = parent.depth + 1
        child.label = label
        child.workspace_text = parent.workspace_text
        available, view = scope if scope is not None else self._parent_scope(parent)
        agent_id = parent.packet.agent_id
        try:
            requested = parse_packet(arguments)
        except ProtocolError as exc:
            child.reject = exc
            child.budget = available
            child.capabilities = list(parent.capabilities)
        else:
            explicit = {"capabilities", "allow_nested", "allowNested"} & arguments.keys()
            update: dict[str, Any] = {
                "depth": child.depth,
                "max_depth": min(requested.max_depth, parent.max_depth),
                "label": requested.label or label,
                "agent_id": requested.agent_id or agent_id,
            }
            if not explicit & {"allow_nested", "allowNested"}:
                update["allow_nested"] = parent.packet.allow_nested
            if "capabilities" not in explicit:
                update["capabilities"] = list(parent.capabilities)
            requested = requested.model_copy(update=update)
            agent_id = requested.agent_id
            child.budget = narrow(requested.budget, available)
            child.capabilities = narrow_capabilities(requested.capabilities, parent.capabilities)
            # lint judges what was asked for; the run (and its child event) get the narrowed scope
            child.requested = requested
            child.packet = requested.model_copy(update={"budget": child.budget,
                                                        "capabilities": list(child.capabilities)})
            child.parent_view = view
        child.session_key = f"agent:{agent_id or 'main'}:subagent:{child.run_id}"
        parent.child_runs[child.run_id] = child
        return child

    def _child_event(self, parent: _Run, call: ToolCall, child: _Run) -> dict[str, Any]:
        return {"child_run_id": child.run_id, "call_id": call.id, "label": child.label,
                "packet": self._packet_dict(child) if child.packet is not None else call.arguments,
                "depth": child.depth, "session_key": child.session_key,
                "budget": _budget_dict(child), "capabilities": list(child.capabilities),
                "parent_run_id": parent.run_id, "root_run_id": child.root_id}

    async def _reattach(self, parent: _Run, call: ToolCall, child_id: str) -> _Run | None:
        """On resume: the child of ``call`` from its checkpoint (None when it had finished)."""
        checkpoint = await self.checkpoints.load(child_id)
        if checkpoint is None:
            # spawned, but the worker died before the child saved anything: start it again
            child = self._spawn(parent, call, child_id)
            await self._emit(parent.run_id, _CHILD, self._child_event(parent, call, child))
            return child
        if checkpoint.outcome is not None:
            announce = checkpoint.outcome.get("announce")
            record = {"name": DELEGATE_TASK, "ok": checkpoint.outcome.get("state") == RunState.COMPLETE.value,
                      "result": announce}
            parent.completed[call.id] = record
            await self._emit(parent.run_id, _TOOL_RESULT, {"id": call.id, **record})
            return None
        try:
            # the parent's adapter carries the host's full config (secrets included), which
            # a checkpoint never stores
            adapter: ModelAdapter | None = parent.adapter.for_child(checkpoint.label)
        except ProtocolError:
            adapter = None
        child = self._restore(checkpoint, parent, adapter)
        parent.child_runs[child.run_id] = child
        return child

    async def _stop_children(self, run: _Run, reason: str) -> None:
        """Cancel every unfinished child (and so its descendants) and wait for them."""
        pending = [child for child in run.child_runs.values() if child.outcome is None]
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
                await self._end(child, RunState.CANCELLED, error=self._cancel_error(child))

    def _children_result(self, run: _Run, calls: list[ToolCall]) -> ResponsePackage:
        entries = []
        succeeded = 0
        for call in calls:
            if call.name != DELEGATE_TASK:
                continue
            record = run.completed.get(call.id, {})
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

    # -- finish ---------------------------------------------------------------------------

    async def _conclude(self, run: _Run, answer: object, yield_call: ToolCall | None,
                        triggered: bool) -> bool:
        assert run.packet is not None
        problems: list[str] = []
        result: ResponsePackage | None = None
        try:
            result = answer if isinstance(answer, ResponsePackage) else parse_result(answer)
        except ProtocolError as exc:
            if triggered and isinstance(answer, str):
                result = ResponsePackage(status=ResultStatus.SUCCESS, summary=answer.strip() or None,
                                         output_payload={})
            else:
                problems.append(exc.message if answer else
                                "The answer was empty: no yield_control call and no RESULT block.")
        criteria: CriteriaReport | None = None
        if result is not None:
            if result.status is ResultStatus.BLOCKED_AWAITING_CLARIFICATION:
                return await self._clarify(run, result, yield_call)
            if result.status is ResultStatus.FAILURE:
                return await self._failed(run, result)
            schema = run.packet.expected_output_schema
            schema_checked = False
            wanted = run.packet.success_criteria
            if wanted:
                criteria = evaluate_criteria(result, wanted, schema)
                for raw, item in zip(wanted, criteria.items, strict=False):
                    # a free-text "JSON is schema-valid" already validated output_payload
                    # against the expected schema: no need to do it twice
                    schema_checked = schema_checked or (item.kind == "json_schema" and isinstance(raw, str))
                    if item.checkable and not item.met:
                        problems.append(f"criterion not met: {item.criterion} ({item.detail})")
            if schema and not schema_checked:
                for issue in validate_instance(schema, result.output_payload, "output_payload"):
                    problems.append(f"{issue.field}: {issue.message}")
        if not problems:
            assert result is not None
            if result.status is ResultStatus.PARTIAL_COMPLETION:
                warning = "Partial completion: treated as complete; check what is missing before relying on it."
                result = result.model_copy(update={"warnings": [*result.warnings, warning]})
                await self._emit(run.run_id, _LOG, {"level": "warning", "message": warning})
            await self._end(run, RunState.COMPLETE, result=result, criteria=criteria)
            return True
        listing = "\n".join(f"- {problem}" for problem in problems)
        if not run.correction_used and not triggered and run.iteration < run.max_iterations:
            run.correction_used = True
            self._answer_turn(run)
            if yield_call is not None:
                self._answer(run, yield_call.id, YIELD_CONTROL, {"ok": False, "error": {
                    "code": ErrorCode.INVALID_RESULT.value, "message": "result rejected"}})
            run.messages.append({"role": "user", "content": (
                "Your result was not accepted:\n" + listing + "\nCorrect it and hand it back once "
                "more with yield_control (this is the one self-correction turn).")})
            await self._emit(run.run_id, _LOG, {"level": "warning", "message": "Self-correction turn.",
                                                "problems": problems})
            self._next_turn(run)
            await self._save(run)
            return False
        message = ("The result is still invalid after the self-correction turn:\n" if run.correction_used
                   else "The result is invalid:\n") + listing
        failure = ResponsePackage(
            status=ResultStatus.FAILURE,
            output_payload=result.output_payload if result is not None else {},
            summary=result.summary if result is not None else None,
            error_report=ErrorReport(code=ErrorCode.INVALID_RESULT.value, message=message,
                                     details={"problems": problems}))
        await self._end(run, RunState.FAILED, result=failure, criteria=criteria,
                        error={"code": ErrorCode.INVALID_RESULT.value, "message": message})
        return True

    async def _clarify(self, run: _Run, result: ResponsePackage, yield_call: ToolCall | None) -> bool:
        questions = result.open_questions or [result.summary or result.log_summary or "The subagent needs clarification."]
        decision = await self._ask(
            run, ApprovalKind.CLARIFICATION, str(run.clarifications + 1),
            f"Run {run.label or run.run_id} needs clarification: {questions[0]}"[:300],
            {"questions": questions, "summary": result.summary, "blockers": result.blockers}, "low")
        if not decision.allows:
            message = f"Clarification refused by a person{': ' + decision.comment if decision.comment else ''}."
            failure = result.model_copy(update={
                "status": ResultStatus.FAILURE,
                "error_report": ErrorReport(code=ErrorCode.INSUFFICIENT_CONTEXT.value, message=message)})
            await self._end(run, RunState.FAILED, result=failure,
                            error={"code": ErrorCode.INSUFFICIENT_CONTEXT.value, "message": message})
            return True
        run.clarifications += 1
        self._answer_turn(run)
        answer = decision.answer or decision.comment or "(no answer given)"
        if yield_call is not None:
            self._answer(run, yield_call.id, YIELD_CONTROL, {"ok": True, "result": {
                "status": "clarification answered below"}})
        run.messages.append({"role": "user", "content": f"Answer to your question: {answer}"})
        await self._emit(run.run_id, _MESSAGE, {"text": answer, "from": decision.decided_by or "approver",
                                                "clarification": True})
        self._next_turn(run)
        await self._save(run)
        return False

    async def _failed(self, run: _Run, result: ResponsePackage) -> bool:
        """A FAILURE result: seed 001's coordinator table decides on a fresh-context retry."""
        reason = result.failed_reason
        rule = recovery_for(reason) if reason is not None else None
        limit = min(rule.max_retries, self.settings.retry_limit) if rule is not None and rule.retry else 0
        report = result.error_report
        if rule is not None and run.retries < limit:
            run.retries += 1
            assert run.packet is not None
            previous = PreviousFailure(
                attempt_number=run.retries + 1,
                failure_report=(report.message if report and report.message else result.summary) or str(reason),
                specific_failures=list(result.blockers) or ([report.message] if report and report.message else []),
                fix_instructions=rule.description)
            run.packet = run.packet.model_copy(update={"previous_failure": previous})
            run.packet_dict = None
            run.messages = self._initial_messages(run)
            run.answered = set()
            run.iteration = 0
            run.correction_used = False
            await self._emit(run.run_id, _LOG, {
                "level": "warning", "failed_reason": str(reason), "action": rule.action.value,
                "attempt": run.retries + 1,
                "message": f"Attempt {run.retries} failed ({reason}): {rule.description}; "
                           f"retrying with a fresh context ({run.retries} of {limit})."})
            self._next_turn(run)
            await self._save(run)
            return False
        code = report.code if report is not None and report.code else ErrorCode.TOOL_FAILURE.value
        message = (report.message if report is not None and report.message else
                   result.summary or "The subagent reported FAILURE.")
        error: dict[str, Any] = {"code": code, "message": message}
        if reason is not None:
            error["failed_reason"] = str(reason)
            if run.retries:
                error["retries"] = run.retries
        await self._end(run, RunState.FAILED, result=result, error=error)
        return True

    async def _park(self, run: _Run, request: ApprovalRequest) -> None:
        if run.state is RunState.WORKING:
            await self._set_state(run, RunState.AWAITING_APPROVAL, {"approval": request.key})
        loop_now = asyncio.get_running_loop().time()
        if run.started_at:
            run.elapsed_before += loop_now - run.started_at
            run.started_at = 0.0
        run.outcome = RunOutcome(
            run_id=run.run_id, state=RunState.AWAITING_APPROVAL, usage=run.usage,
            findings=run.findings, parked=request, session_key=run.session_key, label=run.label,
            children=list(run.children.values()))
        await self._save(run, parked=request)
        self._runs.pop(run.run_id, None)

    async def _end(self, run: _Run, state: RunState, *, result: ResponsePackage | None = None,
                   criteria: CriteriaReport | None = None, error: dict[str, Any] | None = None) -> None:
        """Put the run in a terminal state and report it (state, announce, result events)."""
        if run.outcome is not None and run.outcome.state in TERMINAL_STATES:
            return
        current = run.state or RunState.PENDING
        if state is RunState.FAILED and not can_transition(current, RunState.FAILED) \
                and not can_transition(current, RunState.WORKING):
            state = RunState.REJECTED   # it never started working: the delegation is refused
        if run.started_at:
            run.usage.runtime_s = run.elapsed_before + asyncio.get_running_loop().time() - run.started_at
            run.started_at = 0.0
        result_dict = _result_dict(result) if result is not None else None
        criteria_dict = criteria.as_dict() if criteria is not None else None
        usage_dict = run.usage.as_dict()
        findings = [finding.as_dict() for finding in run.findings] if run.findings else []
        status = "success" if state is RunState.COMPLETE else "timeout" if state is RunState.TIMEOUT else "error"
        state_name = str(state)
        summary = None
        if result is not None:
            summary = result.summary or result.log_summary
        if summary is None:
            summary = error["message"] if error else state_name
        announce = {"run_id": run.run_id, "label": run.label, "session_key": run.session_key,
                    "parent_run_id": run.parent.run_id if run.parent is not None else None,
                    "status": status, "state": state_name, "summary": summary, "error": error,
                    "runtime_s": round(run.usage.runtime_s, 6), "usage": usage_dict,
                    "result": result_dict}
        run.outcome = RunOutcome(
            run_id=run.run_id, state=state, result=result, usage=run.usage,
            criteria_report=criteria_dict, findings=run.findings, error=error, announce=announce,
            session_key=run.session_key, label=run.label, children=list(run.children.values()))
        self._runs.pop(run.run_id, None)
        if error is not None and state is not RunState.CANCELLED:
            await self._emit(run.run_id, _ERROR, error)
        await self._transition_to_end(run, state)
        await self._emit(run.run_id, _ANNOUNCE, announce)
        data: dict[str, Any] = {"state": state_name, "result": result_dict,
                                "criteria_report": criteria_dict, "usage": usage_dict}
        if error is not None:
            data["error"] = error
        if findings:
            data["findings"] = findings
        await self._emit(run.run_id, _RESULT, data)
        if run.packet is not None or run.parent is not None:
            await self._save(run, outcome={"state": state_name, "result": result_dict,
                                           "criteria_report": criteria_dict, "usage": usage_dict,
                                           "error": error, "announce": announce, "findings": findings})

    async def _transition_to_end(self, run: _Run, state: RunState) -> None:
        if run.state is None:
            run.state = RunState.PENDING
            await self._emit(run.run_id, _STATE, {"state": "PENDING", "previous": None,
                                                  "depth": run.depth, "label": run.label})
        if not can_transition(run.state, state) and can_transition(run.state, RunState.WORKING):
            # FAILED is reached from WORKING only: an approval wait is left first
            await self._set_state(run, RunState.WORKING)
        await self._set_state(run, state)

    async def _set_state(self, run: _Run, state: RunState, extra: dict[str, Any] | None = None) -> None:
        previous = run.state
        if previous is state:
            return
        run.state = check_transition(previous, state) if previous is not None else state
        data: dict[str, Any] = {"state": str(state), "previous": str(previous) if previous is not None else None}
        if extra:
            data.update(extra)
        await self._emit(run.run_id, _STATE, data)

    # -- checkpoints ----------------------------------------------------------------------

    async def _save(self, run: _Run, *, parked: ApprovalRequest | None = None,
                    outcome: dict[str, Any] | None = None) -> None:
        base = run.checkpoint_base
        if base is None:
            base = run.checkpoint_base = self._checkpoint_base(run)
        export = getattr(run.adapter, "export_state", None)
        checkpoint = Checkpoint.trusted({
            **base,
            "packet": self._packet_dict(run) if run.packet is not None else {},
            "adapter_state": export() if callable(export) else {},
            "messages": list(run.messages), "usage": run.usage.as_dict(), "iteration": run.iteration,
            "state": str(run.state) if run.state is not None else RunState.PENDING.value,
            "pending_text": run.pending_text if run.pending_calls is not None else None,
            "pending_tool_calls": list(run.pending_dicts), "pending_finish": run.pending_finish,
            "completed": dict(run.completed), "children": dict(run.children),
            "capabilities": list(run.capabilities), "capability_token": run.token,
            "correction_used": run.correction_used, "retries": run.retries,
            "soft_gated": sorted(run.soft_gated), "inbox": list(run.inbox),
            "clarifications": run.clarifications,
            "approvals_asked": sorted(run.asked),
            "elapsed_s": run.elapsed_before + (asyncio.get_running_loop().time() - run.started_at
                                               if run.started_at else 0.0),
            "parked": _request_dict(parked) if parked is not None else None,
            "outcome": outcome, "updated_at": time.time()})
        await self.checkpoints.save(run.run_id, checkpoint)

    def _checkpoint_base(self, run: _Run) -> dict[str, Any]:
        """The checkpoint fields that stay fixed while a run works (built once per run;
        ``_accept`` drops it after settling the run's limits)."""
        if run.adapter_config is None:
            run.adapter_config = run.adapter.public_config()
        return {
            "run_id": run.run_id, "parent_run_id": run.parent.run_id if run.parent is not None else None,
            "root_run_id": run.root_id, "depth": run.depth, "label": run.label,
            "session_key": run.session_key, "workspace": run.workspace_text,
            "adapter_name": run.adapter_name, "adapter_config": run.adapter_config,
            "max_iterations": run.max_iterations, "max_depth": run.max_depth,
            "can_delegate": run.can_delegate, "capability_ceiling": run.ceiling,
            "budget": _budget_dict(run), "timeout_s": run.timeout_s, "created_at": run.created_at}

    def _restore(self, checkpoint: Checkpoint, parent: _Run | None,
                 adapter: ModelAdapter | None) -> _Run:
        if adapter is None:
            adapter = make_adapter(checkpoint.adapter_name, checkpoint.adapter_config)
        restore_state = getattr(adapter, "restore_state", None)
        if checkpoint.adapter_state and callable(restore_state):
            restore_state(checkpoint.adapter_state)
        run = _Run(checkpoint.run_id, parent, adapter)
        run.root_id = checkpoint.root_run_id
        run.resumed = True
        run.depth = checkpoint.depth
        run.label = checkpoint.label
        run.session_key = checkpoint.session_key
        run.workspace_text = checkpoint.workspace or f"{self._workspace_root}/{checkpoint.run_id}"
        run.packet = HandoffPacket.model_validate(checkpoint.packet)
        run.adapter_config = dict(checkpoint.adapter_config)
        run.messages = list(checkpoint.messages)
        run.answered = {m["tool_call_id"] for m in run.messages if m.get("role") == "tool"}
        run.usage = Usage.from_dict(checkpoint.usage)
        run.budget = Budget.model_validate(checkpoint.budget)
        run.capabilities = list(checkpoint.capabilities)
        run.ceiling = list(checkpoint.capability_ceiling) if checkpoint.capability_ceiling is not None else None
        run.iteration = checkpoint.iteration
        run.max_iterations = checkpoint.max_iterations
        run.max_depth = checkpoint.max_depth
        run.can_delegate = checkpoint.can_delegate
        run.state = RunState(checkpoint.state)
        if checkpoint.pending_text is not None:
            run.pending_text = checkpoint.pending_text
            run.pending_dicts = list(checkpoint.pending_tool_calls)
            run.pending_calls = [ToolCall(d["id"], d["name"], d.get("arguments") or {})
                                 for d in checkpoint.pending_tool_calls]
            run.pending_finish = checkpoint.pending_finish
        run.completed = dict(checkpoint.completed)
        run.children = dict(checkpoint.children)
        run.correction_used = checkpoint.correction_used
        run.retries = checkpoint.retries
        run.soft_gated = set(checkpoint.soft_gated)
        run.inbox = list(checkpoint.inbox)
        run.clarifications = checkpoint.clarifications
        run.asked = set(checkpoint.approvals_asked)
        run.elapsed_before = checkpoint.elapsed_s
        run.timeout_s = checkpoint.timeout_s or self.settings.default_timeout_s
        run.created_at = checkpoint.created_at
        run.spawned = len(run.children)
        return run

    def _outcome_from(self, checkpoint: Checkpoint) -> RunOutcome:
        data = checkpoint.outcome or {}
        result = data.get("result")
        findings = [Finding(item["code"], Severity(item["severity"]), item["field"], item["message"])
                    for item in data.get("findings") or []]
        return RunOutcome(
            run_id=checkpoint.run_id, state=RunState(data.get("state", checkpoint.state)),
            result=ResponsePackage.model_validate(result) if result else None,
            usage=Usage.from_dict(data.get("usage") or checkpoint.usage),
            criteria_report=data.get("criteria_report"), findings=findings, error=data.get("error"),
            announce=data.get("announce"), session_key=checkpoint.session_key, label=checkpoint.label,
            children=list(checkpoint.children.values()))


class _TextStream:
    """Coalesces streamed text deltas into few ``text`` events (by size or by time)."""

    __slots__ = ("last", "parts", "run_id", "runner", "size")

    def __init__(self, runner: Runner, run_id: str) -> None:
        self.runner = runner
        self.run_id = run_id
        self.parts: list[str] = []
        self.size = 0
        self.last = time.monotonic()

    async def feed(self, delta: str) -> None:
        if not delta:
            return
        self.parts.append(delta)
        self.size += len(delta)
        settings = self.runner.settings
        if self.size >= settings.text_flush_chars or time.monotonic() - self.last >= settings.text_flush_s:
            await self.flush()

    async def flush(self) -> None:
        if not self.parts:
            return
        text = "".join(self.parts)
        self.parts.clear()
        self.size = 0
        self.last = time.monotonic()
        await self.runner._emit(self.run_id, _TEXT, {"delta": text})


def _merge_skill(packet: HandoffPacket, skill: SkillManifest) -> HandoffPacket:
    """The packet with the skill's instructions, output schema and capabilities as defaults."""
    update: dict[str, Any] = {}
    instructions = getattr(skill, "instructions", None)
    if not packet.instruction_set and instructions:
        update["instruction_set"] = instructions
    if packet.expected_output_schema is None and getattr(skill, "output_schema", None):
        update["expected_output_schema"] = skill.output_schema
    if not packet.capabilities and getattr(skill, "capabilities", None):
        update["capabilities"] = list(skill.capabilities)
    kind = getattr(skill, "subagent_type", None)
    if packet.subagent_type is None and isinstance(kind, str):
        with contextlib.suppress(ValueError):
            update["subagent_type"] = SubagentType(kind)
    return packet.model_copy(update=update) if update else packet


# what the model reads: JSON as json.dumps(value, ensure_ascii=False[, default=str]) writes it
_json_text = encoder(ensure_ascii=False, default=str)
_schema_text = encoder(ensure_ascii=False)


def new_run_id() -> str:
    """A random (version 4) UUID as 32 hex digits: what ``uuid.uuid4().hex`` gives, cheaper."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    return raw.hex()


def _task_outcome(task: asyncio.Task[RunOutcome]) -> RunOutcome | BaseException:
    """What ``asyncio.gather(..., return_exceptions=True)`` reports for a finished task."""
    if task.cancelled():
        return asyncio.CancelledError()
    return task.exception() or task.result()


def _budget_dict(run: _Run) -> dict[str, Any]:
    if run.budget_dict is None:
        run.budget_dict = run.budget.as_dict()
    return run.budget_dict


def _result_dict(result: ResponsePackage) -> dict[str, Any]:
    """``result.model_dump()``, its ``output_payload`` shared rather than copied.

    A coordinator's payload holds its children's result dicts (which hold theirs): a copy
    would duplicate every descendant's result at every level of the tree, and the events
    and checkpoints keep them all. Dumping leaves plain JSON data as it is, so sharing gives
    equal values.
    """
    data = result.model_dump(exclude={"output_payload"})   # a set: pydantic reads a frozenset far more slowly
    # field order kept: status, output_payload, then the rest
    return {"status": data.pop("status"), "output_payload": result.output_payload, **data}


def _error_dict(exc: ProtocolError) -> dict[str, Any]:
    return exc.as_dict()


def _compact_announce(announce: dict[str, Any]) -> dict[str, Any]:
    """The announce as the parent's model reads it: empty fields of the result left out."""
    result = announce.get("result")
    if not isinstance(result, dict):
        return announce
    return {**announce, "result": {key: value for key, value in result.items()
                                   if value is not None and value != [] and value != {}}}


def _usage_value(usage: Usage, axis: str) -> float:
    if axis == "max_model_calls":
        return usage.model_calls
    if axis == "max_tokens":
        return usage.total_tokens
    if axis == "max_cost_usd":
        return usage.cost_usd
    return usage.runtime_s


def _usage_figure(usage: Usage, axis: str) -> str:
    return f"{_usage_value(usage, axis):g}"


def _overshot(budget: Budget, usage: Usage) -> str | None:
    """An axis a model call went beyond (strictly): tokens or cost spent past the limit."""
    if budget.max_tokens is not None and usage.total_tokens > budget.max_tokens:
        return "max_tokens"
    if budget.max_cost_usd is not None and usage.cost_usd > budget.max_cost_usd:
        return "max_cost_usd"
    if budget.max_model_calls is not None and usage.model_calls > budget.max_model_calls:
        return "max_model_calls"
    return None
