"""What the runner holds about one run while it is active in this process.

An :class:`ActiveRun` is the run's identity and place in its tree, plus a few parts, each
changed by one side of the runner: its :class:`Scope` (settled at acceptance), its
:class:`Conversation` (with the model :class:`Turn` in hand), its :class:`Attempts` at a
result, its :class:`Family` of child runs and its :class:`Clock`. Checkpoints store all of
it (``checkpointing.py``), so a run continues after an approval or a dead worker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..adapters.base import ModelAdapter, ToolCall
from ..budgets import Budget, Usage
from ..capabilities import APPROVAL_REQUIRED_CAPABILITIES
from ..errors import ProtocolError
from ..lifecycle import RunState
from ..lint import Finding
from ..packet import HandoffPacket
from ..text_limits import goal_name
from ..trace_context import TraceContext
from .prompt import failure_text, tool_message_text

if TYPE_CHECKING:
    from ..manifest import SkillManifest
    from .outcome import RunOutcome


@dataclass(slots=True)
class Scope:
    """What the run was asked to do and what it may use: settled at acceptance, narrowed
    to its parent's, widened only by a capability a person grants."""

    packet: HandoffPacket | None = None
    # the packet as the delegation asked for it, before narrowing: lint judges this one
    requested: HandoffPacket | None = None
    reject: ProtocolError | None = None          # the packet did not even parse
    parent_view: HandoffPacket | None = None     # the parent as lint sees it (what it has left)
    skill: SkillManifest | None = None
    budget: Budget = field(default_factory=Budget.unlimited)
    capabilities: list[str] = field(default_factory=list)
    ceiling: list[str] | None = None             # a root's capability bound from its host
    # capabilities whose every use waits for a person (settled at acceptance, inherited)
    approval_required: frozenset[str] = APPROVAL_REQUIRED_CAPABILITIES
    findings: list[Finding] = field(default_factory=list)
    max_depth: int = 3
    max_iterations: int = 5
    can_delegate: bool = False
    token: str = ""                              # the capability token its tools are checked against
    # tools a person allowed for the rest of this run and its subagents: tool -> who decided
    always_allowed: dict[str, str] = field(default_factory=dict)
    tools: list[dict[str, Any]] = field(default_factory=list)
    # the last tools offered with their output shapes, by what they were built from (decoding.py)
    shaped: tuple[Any, list[dict[str, Any]]] | None = None
    _packet_dict: dict[str, Any] | None = field(default=None, init=False, repr=False)
    _budget_dict: dict[str, Any] | None = field(default=None, init=False, repr=False)

    def replace_packet(self, packet: HandoffPacket) -> None:
        """A changed packet (a skill merged in, the scope narrowed, a fresh attempt): its
        dict is built again, since the child event may have built it already."""
        self.packet = packet
        self._packet_dict = None

    @property
    def examples(self) -> list[dict[str, Any]]:
        """The skill's worked examples, shown to the model before the task."""
        return list(self.skill.examples) if self.skill is not None else []

    def packet_dict(self) -> dict[str, Any]:
        """``packet.to_dict()``, built once per packet (events and every checkpoint use it)."""
        if self._packet_dict is None:
            assert self.packet is not None
            self._packet_dict = self.packet.to_dict()
        return self._packet_dict

    def budget_dict(self) -> dict[str, Any]:
        if self._budget_dict is None:
            self._budget_dict = self.budget.as_dict()
        return self._budget_dict


@dataclass(slots=True)
class Turn:
    """The model turn being processed, and the results of its tool calls that already ran
    (call id -> record): a call whose result is here is never executed again."""

    text: str
    calls: list[ToolCall]
    dicts: list[dict[str, Any]]              # the calls as the conversation and checkpoints hold them
    finish: str = ""
    completed: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the limit that made this the run's last model call allowed (only yield_control was
    # offered): "max_iterations", "max_model_calls", "max_tokens", "max_cost_usd"; else ""
    forced: str = ""
    # the adapter's scores of the answer's labels (ModelTurn.label_scores), by output field
    scores: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Conversation:
    """The messages so far; they only grow, and a message never changes once in."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    answered: set[str] = field(default_factory=set)      # tool call ids with a tool message
    iteration: int = 0
    inbox: list[str] = field(default_factory=list)       # user messages for the next turn
    turn: Turn | None = None                             # None: the next step is a model call
    # what the run's previous model call used: the guess at what the next one will use
    last_call_tokens: int = 0
    last_call_cost: float = 0.0

    def answer(self, call_id: str, name: str, record: dict[str, Any]) -> None:
        """Append the tool message answering ``call_id`` (once, even across a resume)."""
        if call_id in self.answered:
            return
        self.answered.add(call_id)
        message = {"role": "tool", "tool_call_id": call_id, "name": name,
                   "content": tool_message_text(name, record)}
        if not record.get("ok"):
            # kept beside the text the model reads, so the run can tell its failed calls
            # apart (the summary of a runner-written result, the "already tried" hint)
            message["failure"] = failure_text(record)
        self.messages.append(message)

    def answer_turn(self) -> None:
        """Answer the turn's executed tool calls.

        Done only when the conversation goes on: a run that ends with this turn never
        encodes results no model will read (a coordinator's gathered children, above all).
        """
        turn = self.turn
        if turn is None:
            return
        for call in turn.calls:
            record = turn.completed.get(call.id)
            if record is not None:
                self.answer(call.id, call.name, record)

    def next_turn(self) -> None:
        self.turn = None


@dataclass(slots=True)
class Attempts:
    """How the run has fared at producing a result, and what it asked people."""

    correction_used: bool = False      # the one self-correction turn of the hand-off protocol
    retries: int = 0                   # fresh-context retries (the agloop retry table)
    clarifications: int = 0
    soft_gated: set[str] = field(default_factory=set)   # budget axes already put to a person
    # keys of approval requests already put to the gate (events emitted), across resumes
    asked: set[str] = field(default_factory=set)


@dataclass(slots=True)
class Family:
    """The run's child runs."""

    children: dict[str, str] = field(default_factory=dict)     # delegate_task call id -> child run id
    active: dict[str, ActiveRun] = field(default_factory=dict)  # child run id -> the child, while unfinished
    spawned: int = 0
    # the parent's concurrency lane this run waits for (None: no contention possible)
    lane: asyncio.Semaphore | None = None


@dataclass(slots=True)
class Clock:
    """Time as the run counts it: only while it works in a process (parked time is free).
    Times are the event loop's."""

    timeout_s: float = 0.0
    elapsed_before: float = 0.0        # worked before this process took it up
    started_at: float = 0.0            # 0.0: not working here now
    deadline: float = 0.0
    created_at: float = field(default_factory=time.time)

    def elapsed(self) -> float:
        """Time worked so far, in this process and before."""
        if not self.started_at:
            return self.elapsed_before
        return self.elapsed_before + asyncio.get_running_loop().time() - self.started_at

    def stop(self) -> None:
        """Bank the time worked so far (the run parks)."""
        self.elapsed_before = self.elapsed()
        self.started_at = 0.0


class ActiveRun:
    """One run active in this process: who it is, where it sits in its tree, and its parts."""

    __slots__ = (
        "adapter",
        "adapter_config",
        "adapter_name",
        "attempts",
        "cancel_reason",
        "chat",
        "checkpoint_base",
        "clock",
        "depth",
        "family",
        "label",
        "outcome",
        "parent",
        "requested_cancel",
        "resumed",
        "root_id",
        "run_id",
        "scope",
        "session_key",
        "state",
        "task",
        "trace",
        "usage",
        "workspace",
    )

    def __init__(self, run_id: str, parent: ActiveRun | None, adapter: ModelAdapter,
                 scope: Scope | None = None) -> None:
        self.run_id = run_id
        self.parent = parent
        self.root_id: str = parent.root_id if parent is not None else run_id
        # its span's place in the tree's trace (None: not traced); a root's is the host's,
        # a child's follows from its parent's
        self.trace: TraceContext | None = (parent.trace.of_run(run_id) if parent is not None
                                           and parent.trace is not None else None)
        self.depth = 0
        self.label = ""
        self.session_key = ""
        self.workspace = ""                # the folder its file tools are confined to
        self.adapter = adapter
        self.adapter_name: str = adapter.name
        self.adapter_config: dict[str, Any] | None = None    # public (no secrets)
        self.state: RunState | None = None
        self.usage = Usage()
        self.scope = scope if scope is not None else Scope()
        self.chat = Conversation()
        self.attempts = Attempts()
        self.family = Family()
        self.clock = Clock()
        self.task: asyncio.Task[RunOutcome] | None = None
        self.cancel_reason = ""
        self.requested_cancel = False
        self.resumed = False
        self.outcome: RunOutcome | None = None
        # the checkpoint fields that stay fixed while the run works (built on its first save)
        self.checkpoint_base: dict[str, Any] | None = None

    @property
    def asker(self) -> str:
        """How an inbox item names this run: its label, and the skill it runs
        ("reader (price-research@1.3.0)"); a run its packet names neither by label nor by
        role goes by the start of its goal, as the run pages name it (not "root")."""
        packet = self.scope.packet
        skill = packet.skill if packet is not None else None
        name = self.label or self.run_id
        if packet is not None and not packet.label and packet.subagent_type is None and packet.goal:
            name = f"“{goal_name(packet.goal)}”"
        return f"{name} ({skill})" if skill and skill != name else name

    def chain(self) -> Iterator[ActiveRun]:
        """The run and its ancestors, nearest first."""
        run: ActiveRun | None = self
        while run is not None:
            yield run
            run = run.parent

    def always_allowed_by(self, tool: str) -> str | None:
        """Who allowed ``tool`` for the rest of this run or of an ancestor (an "always
        allow" decision covers the run's subagents too), else None."""
        for run in self.chain():
            who = run.scope.always_allowed.get(tool)
            if who is not None:
                return who
        return None

    def cancel_error(self) -> dict[str, Any]:
        """The ``error`` of this run cancelled (not a failure: no ``error`` event)."""
        reason = self.cancel_reason
        if not reason:
            parent = self.parent
            reason = (f"Cancelled: parent run {parent.run_id} stopped (cancelled, timed out or failed)."
                      if parent is not None else "Cancelled.")
        return {"code": "CANCELLED", "message": reason}
