"""How a run's facts read on a page: the tone and words of each state and status, money,
durations and budget amounts, pretty JSON, and what a run has used against its budget.
The run page, the tree, the inbox, comparisons and imported runs all say these the same
way, so they are said here once."""

from __future__ import annotations

import json
from typing import Any

from delegations.models import Run
from delegations.protocol.budgets import Budget, Usage
from delegations.protocol.lifecycle import RunState
from delegations.protocol.text_limits import goal_name

JSON_CHAR_LIMIT = 8_000       # pretty JSON longer than this is cut (the API has it whole)

STATE_TONES: dict[str, str] = {
    RunState.PENDING: "neutral", RunState.ACCEPTED: "neutral", RunState.WORKING: "info",
    RunState.AWAITING_APPROVAL: "warn", RunState.COMPLETE: "ok", RunState.RETURNED: "warn",
    RunState.FAILED: "bad", RunState.TIMEOUT: "bad", RunState.REJECTED: "bad",
    RunState.CANCELLED: "neutral",
}
STATUS_TONES: dict[str, str] = {
    "SUCCESS": "ok", "PARTIAL_COMPLETION": "warn", "FAILURE": "bad",
    "BLOCKED_AWAITING_CLARIFICATION": "info",
}
FAILED_STATES = frozenset({RunState.FAILED, RunState.TIMEOUT, RunState.REJECTED})
AXIS_LABELS: dict[str, str] = {   # a budget axis as a person names it
    "max_model_calls": "Model calls", "max_tokens": "Tokens", "max_runtime_s": "Time",
    "max_cost_usd": "Cost",
}


def state_tone(state: str | None) -> str:
    return STATE_TONES.get(str(state or ""), "neutral")


def state_label(state: Any) -> str:
    """AWAITING_APPROVAL -> "awaiting approval"."""
    return str(state or "").replace("_", " ").lower()


def status_tone(status: str | None) -> str:
    return STATUS_TONES.get(str(status or ""), "neutral")


def pretty_json(value: Any, limit: int = JSON_CHAR_LIMIT) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    if len(text) > limit:
        return f"{text[:limit]}\n… ({len(text) - limit:,} more characters; the API has the whole value)"
    return text


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def format_usd(amount: float | None) -> str:
    if amount is None:
        return "—"
    if amount == 0:
        return "$0"
    return f"${amount:.4f}" if amount < 1 else f"${amount:,.2f}"


def run_usage(run: Run) -> Usage:
    """What the run has used, its time so far while it works. A run waiting for a person
    has the time it worked, as its budget counts it (the clock stops while it waits): the
    inbox said "Time 1 min 14 s" of a run the run page said had worked 1.5 s."""
    stored = run.usage if isinstance(run.usage, dict) else {}
    runtime = float(stored.get("runtime_s") or 0.0)
    working = not run.is_terminal and run.state != RunState.AWAITING_APPROVAL
    if working or not runtime:
        runtime = run.duration_s or runtime   # a working run: time so far
    return Usage(model_calls=int(stored.get("model_calls") or 0),
                 input_tokens=int(stored.get("input_tokens") or 0),
                 output_tokens=int(stored.get("output_tokens") or 0),
                 cost_usd=float(stored.get("cost_usd") or 0.0), runtime_s=runtime)


def run_budget(run: Run) -> Budget:
    """The run's budget; a stored one that no longer reads counts as no limit."""
    try:
        return Budget.model_validate(run.budget or {})
    except ValueError:
        return Budget()


def budget_amount(axis: str, value: float | None) -> str:
    """A budget figure as a person reads it."""
    if value is None:
        return "no limit"
    if axis == "max_runtime_s":
        return format_seconds(value)
    if axis == "max_cost_usd":
        return format_usd(value)
    return f"{int(value):,}"


def run_name(run: Any) -> str:
    """How a run is named in links: its label, else the start of its goal, else its id."""
    label = str(getattr(run, "label", "") or "")
    goal = str(getattr(run, "goal", "") or "")
    return label or (goal_name(goal) if goal else str(getattr(run, "pk", "") or "")[:8])
