"""Model turns: one call of a run's model, streamed, metered and charged, and the budget
checks around it.

Before a call, a limit used up on the run or any ancestor ends the run (FAILED,
ERR_RESOURCE_EXHAUSTED); after it, so does a call that overshot a token, cost or call
limit. The soft threshold is checked on the run's own budget, once per axis: a person
decides whether it goes on (approval kind ``budget``).
"""

from __future__ import annotations

import time
from typing import Any

from ..adapters.base import ModelAdapter, ModelTurn
from ..approvals import ApprovalKind
from ..budgets import hard_limit_hit, overshot, soft_threshold_crossed, used
from ..errors import ErrorCode, ProtocolError
from ..events import EventType
from ..pricing import PriceTable, cost_usd, normalize_prices
from .questions import Questions
from .reporting import Emit, Reporter
from .settings import RunnerSettings
from .state import ActiveRun, Turn

_TEXT = EventType.TEXT.value
_MODEL_CALL = EventType.MODEL_CALL.value
_MESSAGE = EventType.MESSAGE.value


class ModelTurns:
    """Calls a run's model for its next turn and meters what the call used."""

    def __init__(self, settings: RunnerSettings, reporter: Reporter, questions: Questions) -> None:
        self.settings = settings
        self.reporter = reporter
        self.questions = questions
        self.prices = normalize_prices(settings.prices) if settings.prices else None

    async def deliver_messages(self, run: ActiveRun) -> None:
        """Add the messages sent to the run (``Runner.send_message``) to its conversation."""
        chat = run.chat
        queued, chat.inbox = chat.inbox, []
        for text in queued:
            chat.messages.append({"role": "user", "content": text})
            await self.reporter.emit(run.run_id, _MESSAGE, {"text": text, "from": "user"})

    async def call(self, run: ActiveRun) -> None:
        """One model call: its turn becomes the run's turn in hand, charged to the run and
        all its ancestors, and is checkpointed."""
        chat = run.chat
        chat.iteration += 1
        stream = _TextStream(self.reporter.emit, run.run_id, self.settings)
        started = time.perf_counter()
        turn = await run.adapter.complete(list(chat.messages), run.scope.tools, on_text=stream.feed)
        await stream.flush()
        duration_ms = (time.perf_counter() - started) * 1000.0
        model = turn.model or run.adapter.model_name
        cost = cost_of(run.adapter, model, turn, self.prices)
        for charged in run.chain():
            charged.usage.charge(input_tokens=turn.input_tokens, output_tokens=turn.output_tokens,
                                 cost_usd=cost)
        calls = turn.tool_calls
        dicts = [{"id": call.id, "name": call.name, "arguments": call.arguments} for call in calls]
        message: dict[str, Any] = {"role": "assistant", "content": turn.text}
        if dicts:
            message["tool_calls"] = dicts
        chat.messages.append(message)
        chat.turn = Turn(text=turn.text, calls=list(calls), dicts=dicts, finish=turn.finish_reason)
        await self.reporter.emit(run.run_id, _MODEL_CALL, {
            "iteration": chat.iteration, "model": model, "input_tokens": turn.input_tokens,
            "output_tokens": turn.output_tokens, "cost_usd": cost,
            "duration_ms": round(duration_ms, 3), "tool_calls": len(calls)})
        await self.reporter.save(run)

    async def check_soft_threshold(self, run: ActiveRun) -> None:
        """Ask a person once per axis whose usage crossed the soft threshold; a refusal
        ends the run (ERR_RESOURCE_EXHAUSTED)."""
        threshold = self.settings.soft_threshold
        budget, usage = run.scope.budget, run.usage
        for axis in soft_threshold_crossed(budget, usage, threshold):
            if axis in run.attempts.soft_gated:
                continue
            limit = getattr(budget, axis)
            decision = await self.questions.ask(
                run, ApprovalKind.BUDGET, axis,
                f"Run {run.label or run.run_id} used {used(usage, axis):g} of its "
                f"{axis} limit {limit:g}; continue?",
                {"axis": axis, "limit": limit, "used": used(usage, axis),
                 "threshold": threshold, "usage": usage.as_dict()},
                "medium")
            run.attempts.soft_gated.add(axis)
            if not decision.allows:
                raise ProtocolError(
                    ErrorCode.RESOURCE_EXHAUSTED,
                    f"Stopped at the soft budget threshold on {axis} by a person"
                    f"{': ' + decision.comment if decision.comment else ''}.",
                    details={"axis": axis})


def check_hard_limits(run: ActiveRun, *, before_call: bool) -> None:
    """Raise ERR_RESOURCE_EXHAUSTED when the run or an ancestor has a limit used up
    (``before_call``) or overshot by the call just made."""
    for charged in run.chain():
        budget, usage = charged.scope.budget, charged.usage
        axis = hard_limit_hit(budget, usage) if before_call else overshot(budget, usage)
        if axis is not None:
            whose = "its" if charged is run else f"ancestor run {charged.run_id}'s"
            raise ProtocolError(
                ErrorCode.RESOURCE_EXHAUSTED,
                f"Budget exhausted: {whose} {axis} limit of {getattr(budget, axis):g} "
                f"is used up ({used(usage, axis):g}).",
                details={"axis": axis, "run_id": charged.run_id})


def cost_of(adapter: ModelAdapter, model: str, turn: ModelTurn,
            prices: PriceTable | None) -> float:
    """What the call cost in USD: the adapter's own price when it has one, else the price table's."""
    if not turn.input_tokens and not turn.output_tokens:
        return 0.0
    priced = adapter.cost_usd(turn.input_tokens, turn.output_tokens)
    if priced is not None:
        return float(priced)
    return cost_usd(model, turn.input_tokens, turn.output_tokens, prices)


class _TextStream:
    """Coalesces streamed text deltas into few ``text`` events: one per
    ``text_flush_chars`` characters or ``text_flush_s`` seconds."""

    __slots__ = ("emit", "flush_chars", "flush_s", "last", "parts", "run_id", "size")

    def __init__(self, emit: Emit, run_id: str, settings: RunnerSettings) -> None:
        self.emit = emit
        self.run_id = run_id
        self.flush_chars = settings.text_flush_chars
        self.flush_s = settings.text_flush_s
        self.parts: list[str] = []
        self.size = 0
        self.last = time.monotonic()

    async def feed(self, delta: str) -> None:
        if not delta:
            return
        self.parts.append(delta)
        self.size += len(delta)
        if self.size >= self.flush_chars or time.monotonic() - self.last >= self.flush_s:
            await self.flush()

    async def flush(self) -> None:
        if not self.parts:
            return
        text = "".join(self.parts)
        self.parts.clear()
        self.size = 0
        self.last = time.monotonic()
        await self.emit(self.run_id, _TEXT, {"delta": text})
