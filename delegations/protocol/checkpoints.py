"""Run checkpoints: everything needed to continue a run after an approval or a dead worker.

The runner saves a :class:`Checkpoint` after every model call and every tool call, so a
run can resume after an approval or after its worker died. A checkpoint records the conversation so far, the usage, the turn being
processed (``pending_tool_calls``) and the results of the tool calls of that turn that
already ran (``completed``): on resume, a call whose result is recorded is never executed
again, so a side effect (an edit, a deletion, a child run) happens once.

Stores are async so that a database-backed store (the Django side) fits the same
interface; :class:`MemoryCheckpointStore` keeps the latest checkpoint of each run in a
dict for the CLI, tests and benchmarks.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from .capabilities import APPROVAL_REQUIRED_CAPABILITIES


class Checkpoint(BaseModel):
    """The state of one run at a point where it can be continued.

    JSON-serializable (``model_dump_json``); the runner builds it with :meth:`trusted`
    from values it already holds, so saving costs no validation.
    """

    model_config = ConfigDict(extra="ignore")

    run_id: str
    parent_run_id: str | None = None
    root_run_id: str
    depth: int = 0
    label: str = ""
    session_key: str = ""
    workspace: str = ""
    # the accepted packet (canonical dict), after narrowing of budget and capabilities
    packet: dict[str, Any] = Field(default_factory=dict)
    adapter_name: str = ""
    adapter_config: dict[str, Any] = Field(default_factory=dict)   # public (no secrets)
    adapter_state: dict[str, Any] = Field(default_factory=dict)    # e.g. scripted position
    # only grows, and a message is never changed once in it: a store may write just the
    # messages added since its last save (the Django one does)
    messages: list[dict[str, Any]] = Field(default_factory=list)
    usage: dict[str, Any] = Field(default_factory=dict)
    iteration: int = 0
    max_iterations: int = 5
    max_depth: int = 3
    can_delegate: bool = False
    state: str = "PENDING"
    # the model turn being processed: its text and tool calls ({id, name, arguments})
    pending_text: str | None = None
    pending_tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    pending_finish: str = ""
    # results of the pending turn's tool calls that already ran: call id -> tool result
    completed: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # the adapter's scores of the pending turn's labels (a review item is decided on them)
    pending_scores: dict[str, Any] = Field(default_factory=dict)
    # delegate_task call id -> child run id
    children: dict[str, str] = Field(default_factory=dict)
    capabilities: list[str] = Field(default_factory=list)
    capability_ceiling: list[str] | None = None    # a root's bound from its host, if any
    # capabilities whose every use waits for a person (a checkpoint without: all that may)
    approval_required: list[str] = Field(default_factory=lambda: sorted(APPROVAL_REQUIRED_CAPABILITIES))
    capability_token: str = ""
    # tools a person allowed for the rest of the run and its subagents: tool -> who decided
    always_allowed: dict[str, str] = Field(default_factory=dict)
    budget: dict[str, Any] = Field(default_factory=dict)
    correction_used: bool = False
    retries: int = 0
    soft_gated: list[str] = Field(default_factory=list)     # budget axes already put to a person
    inbox: list[str] = Field(default_factory=list)          # messages not yet delivered
    clarifications: int = 0
    # approval keys whose request was already emitted (tool_call, approval, AWAITING_APPROVAL):
    # on resume the runner asks the gate for them without announcing them again
    approvals_asked: list[str] = Field(default_factory=list)
    elapsed_s: float = 0.0                                  # active (not parked) run time
    timeout_s: float | None = None
    parked: dict[str, Any] | None = None                    # the open ApprovalRequest, if any
    # set once the run is terminal: what the parent needs without running it again
    outcome: dict[str, Any] | None = None
    created_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)

    @classmethod
    def trusted(cls, values: dict[str, Any]) -> Checkpoint:
        """A checkpoint from values the runner already holds, every field given.

        What ``model_construct`` does, minus its per-field bookkeeping, by setting
        pydantic's private attributes directly. The runner saves five checkpoints per
        hand-off: on tests/benchmarks/bench_runner.py's W1 a hand-off takes 0.41 ms of CPU
        with this and 0.49 ms with ``model_construct`` (+19%; pydantic 2.14, 2 cores).
        ``values`` must name every field.
        """
        checkpoint = cls.__new__(cls)
        object.__setattr__(checkpoint, "__dict__", values)
        object.__setattr__(checkpoint, "__pydantic_fields_set__", _ALL_SET)
        object.__setattr__(checkpoint, "__pydantic_extra__", None)
        object.__setattr__(checkpoint, "__pydantic_private__", None)
        return checkpoint


# every field is set; one shared set (pydantic only adds names to it, and they are all in)
_ALL_SET = set(Checkpoint.model_fields)


class CheckpointStore(Protocol):
    """Where checkpoints live. ``save`` replaces the run's previous checkpoint."""

    async def save(self, run_id: str, checkpoint: Checkpoint) -> None: ...

    async def load(self, run_id: str) -> Checkpoint | None: ...


class MemoryCheckpointStore:
    """Keeps the latest checkpoint per run in process memory.

    The checkpoint object is stored as given (no copy): the runner hands over fresh
    containers on every save, so later changes to the run never alter a stored one.
    """

    def __init__(self) -> None:
        self.checkpoints: dict[str, Checkpoint] = {}
        self.saves = 0

    async def save(self, run_id: str, checkpoint: Checkpoint) -> None:
        self.saves += 1
        self.checkpoints[run_id] = checkpoint

    async def load(self, run_id: str) -> Checkpoint | None:
        return self.checkpoints.get(run_id)
