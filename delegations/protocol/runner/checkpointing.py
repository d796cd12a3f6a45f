"""A run as a checkpoint, and back.

The runner saves one at acceptance, after every model call, after every tool call (before
its ``tool_result`` event), just before a tool call with an effect (a file written or
deleted, a command run: recorded as interrupted until its result replaces it), after each
turn, when parking and at the end; a tool call whose result is in the checkpoint is never
executed again.
"""

from __future__ import annotations

import time
from typing import Any

from ..adapters import make_adapter
from ..adapters.base import ModelAdapter, ToolCall
from ..approvals import ApprovalRequest
from ..budgets import Budget, Usage
from ..checkpoints import Checkpoint
from ..lifecycle import RunState
from ..packet import HandoffPacket
from .outcome import request_dict
from .state import ActiveRun, Turn


def checkpoint_of(run: ActiveRun, *, parked: ApprovalRequest | None = None,
                  outcome: dict[str, Any] | None = None) -> Checkpoint:
    """The run as it stands. Fresh containers throughout: a store may keep the checkpoint
    as it is while the run goes on."""
    base = run.checkpoint_base
    if base is None:
        base = run.checkpoint_base = _fixed_fields(run)
    scope, chat, attempts = run.scope, run.chat, run.attempts
    turn = chat.turn
    return Checkpoint.trusted({
        **base,
        "packet": scope.packet_dict() if scope.packet is not None else {},
        "adapter_state": run.adapter.export_state(),
        "messages": list(chat.messages), "usage": run.usage.as_dict(), "iteration": chat.iteration,
        "state": str(run.state) if run.state is not None else RunState.PENDING.value,
        "pending_text": turn.text if turn is not None else None,
        "pending_tool_calls": list(turn.dicts) if turn is not None else [],
        "pending_finish": turn.finish if turn is not None else "",
        "completed": dict(turn.completed) if turn is not None else {},
        "pending_scores": dict(turn.scores) if turn is not None else {},
        "children": dict(run.family.children),
        "capabilities": list(scope.capabilities), "capability_token": scope.token,
        "always_allowed": dict(scope.always_allowed),
        "correction_used": attempts.correction_used, "retries": attempts.retries,
        "soft_gated": sorted(attempts.soft_gated), "inbox": list(chat.inbox),
        "clarifications": attempts.clarifications, "approvals_asked": sorted(attempts.asked),
        "elapsed_s": run.clock.elapsed(),
        "parked": request_dict(parked) if parked is not None else None,
        "outcome": outcome, "updated_at": time.time()})


def _fixed_fields(run: ActiveRun) -> dict[str, Any]:
    """The checkpoint fields that stay fixed while a run works (built once per run;
    acceptance drops them after settling the run's limits)."""
    if run.adapter_config is None:
        run.adapter_config = run.adapter.public_config()
    scope = run.scope
    return {
        "run_id": run.run_id, "parent_run_id": run.parent.run_id if run.parent is not None else None,
        "root_run_id": run.root_id, "depth": run.depth, "label": run.label,
        "session_key": run.session_key, "workspace": run.workspace,
        "adapter_name": run.adapter_name, "adapter_config": run.adapter_config,
        "max_iterations": scope.max_iterations, "max_depth": scope.max_depth,
        "can_delegate": scope.can_delegate, "capability_ceiling": scope.ceiling,
        "approval_required": sorted(scope.approval_required),
        "budget": scope.budget_dict(), "timeout_s": run.clock.timeout_s,
        "created_at": run.clock.created_at}


def restore(checkpoint: Checkpoint, parent: ActiveRun | None, adapter: ModelAdapter | None, *,
            workspace_root: str, default_timeout_s: float) -> ActiveRun:
    """The run a checkpoint holds, ready to go on where it stopped. ``adapter`` (by default
    rebuilt from the checkpoint's adapter name and public config) gets its state back."""
    if adapter is None:
        adapter = make_adapter(checkpoint.adapter_name, checkpoint.adapter_config)
    if checkpoint.adapter_state:
        adapter.restore_state(checkpoint.adapter_state)
    run = ActiveRun(checkpoint.run_id, parent, adapter)
    run.root_id = checkpoint.root_run_id
    run.resumed = True
    run.depth = checkpoint.depth
    run.label = checkpoint.label
    run.session_key = checkpoint.session_key
    run.workspace = checkpoint.workspace or f"{workspace_root}/{checkpoint.run_id}"
    run.adapter_config = dict(checkpoint.adapter_config)
    run.usage = Usage.from_dict(checkpoint.usage)
    run.state = RunState(checkpoint.state)

    scope = run.scope
    scope.packet = HandoffPacket.model_validate(checkpoint.packet)
    scope.budget = Budget.model_validate(checkpoint.budget)
    scope.capabilities = list(checkpoint.capabilities)
    scope.ceiling = list(checkpoint.capability_ceiling) if checkpoint.capability_ceiling is not None else None
    scope.max_iterations = checkpoint.max_iterations
    scope.max_depth = checkpoint.max_depth
    scope.can_delegate = checkpoint.can_delegate
    scope.approval_required = frozenset(checkpoint.approval_required)
    scope.always_allowed = dict(checkpoint.always_allowed)

    chat = run.chat
    chat.messages = list(checkpoint.messages)
    chat.answered = {m["tool_call_id"] for m in chat.messages if m.get("role") == "tool"}
    chat.iteration = checkpoint.iteration
    chat.inbox = list(checkpoint.inbox)
    if checkpoint.pending_text is not None:
        chat.turn = Turn(
            text=checkpoint.pending_text, dicts=list(checkpoint.pending_tool_calls),
            calls=[ToolCall(d["id"], d["name"], d.get("arguments") or {}) for d in checkpoint.pending_tool_calls],
            finish=checkpoint.pending_finish, completed=dict(checkpoint.completed),
            scores=dict(checkpoint.pending_scores))

    attempts = run.attempts
    attempts.correction_used = checkpoint.correction_used
    attempts.retries = checkpoint.retries
    attempts.soft_gated = set(checkpoint.soft_gated)
    attempts.clarifications = checkpoint.clarifications
    attempts.asked = set(checkpoint.approvals_asked)

    run.family.children = dict(checkpoint.children)
    run.family.spawned = len(run.family.children)
    run.clock.elapsed_before = checkpoint.elapsed_s
    run.clock.timeout_s = checkpoint.timeout_s or default_timeout_s
    run.clock.created_at = checkpoint.created_at
    return run
