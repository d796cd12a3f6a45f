"""Model turns: one call of a run's model, streamed, metered and charged, and the budget
checks around it.

Before a call, a limit used up on the run or any ancestor ends the run (FAILED,
ERR_RESOURCE_EXHAUSTED); after it, so does a call that overshot a token, cost or call
limit (unless it was a forced last turn that called ``yield_control``). The soft
threshold is checked on the run's own budget, once per axis: a person decides whether it
goes on (approval kind ``budget``).

The last call a run is allowed is forced (:func:`last_call_reason`): the model is offered
only ``yield_control``, with a tool choice naming it, and told why, so that a run out of
turns still hands back what it has (the hand-off protocol: never end without
``yield_control``). A call is the last when ``max_iterations`` is reached with it, when
it takes the last of a ``max_model_calls`` budget, or when another call like the run's
previous one would use up a token or cost limit (the previous call is the guess at the
next one's size). Runtime is not forecast: the hard timeout ends the run, and the runner
then writes the FAILURE result itself.
"""

from __future__ import annotations

import time
from typing import Any

from ..adapters.base import ModelAdapter, ModelTurn
from ..approvals import ApprovalKind, ancestors_left, raised_budget
from ..budgets import hard_limit_hit, overshot, soft_threshold_crossed, used
from ..errors import ErrorCode, ProtocolError
from ..events import EventType
from ..pricing import PriceTable, cost_usd, normalize_prices
from ..tool_schemas import MODEL_TOOLS
from ..tools import YIELD_CONTROL
from .decoding import shaped_tools
from .fetched import offered_for, step_for
from .questions import Questions
from .reporting import Emit, Reporter
from .settings import RunnerSettings
from .state import ActiveRun, Turn

_TEXT = EventType.TEXT.value
_MODEL_CALL = EventType.MODEL_CALL.value
_MESSAGE = EventType.MESSAGE.value
_LOG = EventType.LOG.value


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
        last = last_call_reason(run)
        if last is not None:
            await self._announce_last_turn(run, *last)
        chat.iteration += 1
        stream = _TextStream(self.reporter.emit, run.run_id, self.settings)
        started = time.perf_counter()
        tools = shaped_tools(run, run.scope.tools)
        if last is not None:
            offered = [tool for tool in tools if tool["name"] == YIELD_CONTROL]
            turn = await run.adapter.complete(
                list(chat.messages), offered or [MODEL_TOOLS[YIELD_CONTROL]], on_text=stream.feed,
                tool_choice=YIELD_CONTROL)
        elif (step := step_for(run)) is not None:
            # a run judged on the pages it fetches: fetch, then answer (fetched.py)
            turn = await run.adapter.complete(list(chat.messages), offered_for(run, tools, step),
                                              on_text=stream.feed, tool_choice=step)
        else:
            # tool_choice is left out: adapters written before it existed keep working
            turn = await run.adapter.complete(list(chat.messages), tools, on_text=stream.feed)
        await stream.flush()
        duration_ms = (time.perf_counter() - started) * 1000.0
        model = turn.model or run.adapter.model_name
        cost = cost_of(run.adapter, model, turn, self.prices)
        for charged in run.chain():
            charged.usage.charge(input_tokens=turn.input_tokens, output_tokens=turn.output_tokens,
                                 cost_usd=cost)
        chat.last_call_tokens = turn.input_tokens + turn.output_tokens
        chat.last_call_cost = cost
        calls = turn.tool_calls
        dicts = [{"id": call.id, "name": call.name, "arguments": call.arguments} for call in calls]
        message: dict[str, Any] = {"role": "assistant", "content": turn.text}
        if dicts:
            message["tool_calls"] = dicts
        chat.messages.append(message)
        chat.turn = Turn(text=turn.text, calls=list(calls), dicts=dicts, finish=turn.finish_reason,
                         forced=last[0] if last is not None else "", scores=dict(turn.label_scores))
        await self.reporter.emit(run.run_id, _MODEL_CALL, {
            "iteration": chat.iteration, "model": model, "input_tokens": turn.input_tokens,
            "output_tokens": turn.output_tokens, "cost_usd": cost,
            "duration_ms": round(duration_ms, 3), "tool_calls": len(calls),
            "finish_reason": turn.finish_reason or ""})
        await self.reporter.save(run)

    async def _announce_last_turn(self, run: ActiveRun, limit: str, reason: str) -> None:
        """Tell the model (and the watcher) that this call is the run's last."""
        run.chat.messages.append({"role": "user", "content": (
            f"This is your last turn: {reason}. Call yield_control now with what you have: "
            f"SUCCESS, PARTIAL_COMPLETION with what is done, or FAILURE with an error_report.")})
        await self.reporter.emit(run.run_id, _LOG, {
            "level": "warning", "last_turn": True, "limit": limit,
            "message": f"Last model call allowed ({limit}: {reason}); only yield_control is offered."})

    async def check_soft_threshold(self, run: ActiveRun) -> None:
        """Ask a person once per axis and limit whose usage crossed the soft threshold: a
        refusal ends the run (ERR_RESOURCE_EXHAUSTED); going on with a raised limit asks
        again when usage nears the new one.

        ``soft_gated`` holds ``axis`` once a person let the run go on at its limit, and
        ``axis:limit`` for each limit a person raised; the first question on an axis has
        the step ``axis``, a later one ``axis:limit`` (so each has a key of its own)."""
        threshold = self.settings.soft_threshold
        usage, gated = run.usage, run.attempts.soft_gated
        for axis in soft_threshold_crossed(run.scope.budget, usage, threshold):
            limit = getattr(run.scope.budget, axis)
            marker = f"{axis}:{limit:g}"
            if axis in gated or marker in gated:
                continue
            raised_before = any(entry.startswith(f"{axis}:") for entry in gated)
            decision = await self.questions.ask(
                run, ApprovalKind.BUDGET, marker if raised_before else axis,
                f"{run.asker} used {used(usage, axis):g} of its "
                f"{axis} limit {limit:g}; continue?",
                {"axis": axis, "limit": limit, "used": used(usage, axis),
                 "threshold": threshold, "usage": usage.as_dict(),
                 "budget": run.scope.budget_dict()},
                "medium")
            if not decision.allows:
                gated.add(axis)
                raise ProtocolError(
                    ErrorCode.RESOURCE_EXHAUSTED,
                    f"Stopped at the soft budget threshold on {axis} by a person"
                    f"{': ' + decision.comment if decision.comment else ''}.",
                    details={"axis": axis})
            if decision.budget_limit and await self._raise_limits(run, decision.budget_limit,
                                                                  decision.decided_by):
                gated.add(marker)
            else:
                gated.add(axis)

    async def _raise_limits(self, run: ActiveRun, limits: dict[str, Any], decided_by: str) -> bool:
        """Take the limits a person raised; a raise beyond what the ancestors have left is
        not taken (the host checks it before, so this is a safeguard), which is logged."""
        scope = run.scope
        ancestors = ancestors_left((a.scope.budget, a.usage) for a in run.chain() if a is not run)
        old = scope.budget
        budget, problems = raised_budget(old, limits, usage=run.usage, ancestors=ancestors)
        if problems:
            await self.reporter.emit(run.run_id, _LOG, {
                "level": "warning", "problems": problems,
                "message": "The raised budget was not taken: " + " ".join(problems)})
            return False
        scope.budget = budget
        scope._budget_dict = None
        run.checkpoint_base = None      # the budget is one of the checkpoint's fixed fields
        changes = ", ".join(f"{axis} from {_figure(getattr(old, axis))} to {_figure(getattr(budget, axis))}"
                            for axis in limits)
        await self.reporter.emit(run.run_id, _LOG, {
            "level": "info", "budget": scope.budget_dict(), "raised": dict(limits),
            "decided_by": decided_by,
            "message": f"{decided_by or 'A person'} raised the budget: {changes}."})
        return True


def _figure(value: float | int | None) -> str:
    return "unlimited" if value is None else f"{value:g}"


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


def last_call_reason(run: ActiveRun) -> tuple[str, str] | None:
    """Why the coming model call is the last one the run is allowed: the limit's name and
    the reason worded for the model ("you have used 4 of 5 model calls"); None when more
    may follow. A few comparisons per call, on the run and its ancestors."""
    chat = run.chat
    made, allowed = chat.iteration, run.scope.max_iterations
    if made + 1 >= allowed:
        return "max_iterations", f"you have used {made} of {allowed} model calls"
    next_tokens, next_cost = chat.last_call_tokens, chat.last_call_cost
    for charged in run.chain():
        budget, usage = charged.scope.budget, charged.usage
        limit_calls, limit_tokens, limit_cost = budget.max_model_calls, budget.max_tokens, budget.max_cost_usd
        if limit_calls is None and limit_tokens is None and limit_cost is None:
            continue
        whose = "you have" if charged is run else f"ancestor run {charged.run_id} has"
        if limit_calls is not None and usage.model_calls + 1 >= limit_calls:
            return "max_model_calls", f"{whose} used {usage.model_calls} of {limit_calls} model calls"
        if limit_tokens is not None and usage.total_tokens + next_tokens >= limit_tokens:
            return "max_tokens", (f"{whose} used {usage.total_tokens} of {limit_tokens} tokens, "
                                  f"and your last call took {next_tokens}")
        if limit_cost is not None and usage.cost_usd + next_cost >= limit_cost:
            return "max_cost_usd", (f"{whose} used {usage.cost_usd:g} of {limit_cost:g} USD, "
                                    f"and your last call cost {next_cost:g} USD")
    return None


def cost_of(adapter: ModelAdapter, model: str, turn: ModelTurn,
            prices: PriceTable | None) -> float:
    """What the call cost in USD: the adapter's own price when it has one, else the price table's."""
    priced = adapter.cost_usd(turn.input_tokens, turn.output_tokens)
    if priced is not None:    # a remote agent's price is per message, whatever the tokens
        return float(priced)
    if not turn.input_tokens and not turn.output_tokens:
        return 0.0
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
