"""The scripted adapter: deterministic replay of model turns, for tests, demos and benchmarks.

Config::

    {"script": [TURN, ...],
     "children": {"<label>": {"script": [...], "children": {...}}},
     "model": "scripted",                                   # optional name in events
     "prices": {"input_per_mtok": 0.0, "output_per_mtok": 0.0}}   # optional, USD / 1M tokens

    TURN = {"text": "...",
            "tool_calls": [{"name": "...", "arguments": {...}}],
            "usage": {"input_tokens": N, "output_tokens": N},
            "delay_ms": N,
            "finish": "children",
            "label_scores": {"<field>": {"value": ..., "probability": P, "alternatives": [...]}}}

Each call to :meth:`ScriptedAdapter.complete` plays the next TURN: ``text`` is streamed
through ``on_text`` in a few chunks, ``delay_ms`` is waited with ``asyncio.sleep`` (so a
cancelled run stops at once; no sleep at all when it is 0 or absent), ``tool_calls`` come
back with deterministic ids (``call_<turn>_<index>``). ``arguments`` may be an object or
a JSON text. ``finish: "children"`` asks the runner to finish the run, once the turn's
``delegate_task`` calls are done, with the gathered results of those children and without
another model call: the adapter reports it as ``ModelTurn.finish_reason == "children"``
(:data:`delegations.protocol.tools.FINISH_WITH_CHILDREN`). It is how a coordinator that
only fans out is scripted (the benchmarks' W1/W2 workloads). ``prices`` make the runner
charge a cost (:meth:`ScriptedAdapter.cost_usd`); without them a scripted call is free.
``label_scores`` play an adapter that scores its labels (``ModelTurn.label_scores``, as the
local model gives them): without them a scripted model gives no probabilities.

A child spawned by ``delegate_task`` with label X plays ``children[X]``. The config is
checked once, recursively, when the adapter is built: a bad key raises
ProtocolError(ERR_INVALID_ADAPTER_CONFIG) naming it. The position in the script is the
adapter's state (:meth:`export_state` / :meth:`restore_state`), so a resumed run goes on
from the turn after the last one it played; :meth:`replay` starts the same script afresh
without checking the config again.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar

from ..errors import ErrorCode, ProtocolError
from ..tools import FINISH_WITH_CHILDREN
from .base import Message, ModelAdapter, ModelTurn, TextCallback, ToolCall, ToolSchema, config_error

TURN_KEYS = frozenset({"text", "tool_calls", "usage", "delay_ms", "finish", "label_scores"})
CONFIG_KEYS = frozenset({"script", "children", "model", "prices"})
FINISH_VALUES = frozenset({FINISH_WITH_CHILDREN})
STREAM_CHUNKS = 3


def _check_config(config: object, path: str) -> None:
    """Raise config_error for the first problem found; ``path`` names the nesting."""
    if not isinstance(config, dict):
        raise config_error("scripted", path or "config", "must be an object with a 'script' list")
    prefix = f"{path}." if path else ""
    unknown = sorted(set(config) - CONFIG_KEYS)
    if unknown:
        raise config_error("scripted", prefix + unknown[0],
                           f"is not a known key (expected {sorted(CONFIG_KEYS)})")
    script = config.get("script")
    if not isinstance(script, list):
        raise config_error("scripted", prefix + "script", "must be a list of turns")
    for index, turn in enumerate(script):
        _check_turn(turn, f"{prefix}script[{index}]")
    if "model" in config and not isinstance(config["model"], str):
        raise config_error("scripted", prefix + "model", "must be a string")
    prices = config.get("prices")
    if prices is not None:
        if not isinstance(prices, dict) or set(prices) - {"input_per_mtok", "output_per_mtok"}:
            raise config_error("scripted", prefix + "prices",
                               "must be an object with input_per_mtok and output_per_mtok")
        for key, value in prices.items():
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise config_error("scripted", f"{prefix}prices.{key}", "must be a number >= 0")
    children = config.get("children", {})
    if not isinstance(children, dict):
        raise config_error("scripted", prefix + "children", "must be an object of label -> config")
    for label, child in children.items():
        _check_config(child, f"{prefix}children.{label}")


def _check_turn(turn: object, path: str) -> None:
    if not isinstance(turn, dict):
        raise config_error("scripted", path, "must be an object (text, tool_calls, usage, delay_ms)")
    unknown = sorted(set(turn) - TURN_KEYS)
    if unknown:
        raise config_error("scripted", f"{path}.{unknown[0]}",
                           f"is not a known turn key (expected {sorted(TURN_KEYS)})")
    if not isinstance(turn.get("text", ""), str):
        raise config_error("scripted", f"{path}.text", "must be a string")
    calls = turn.get("tool_calls", [])
    if not isinstance(calls, list):
        raise config_error("scripted", f"{path}.tool_calls", "must be a list of {name, arguments}")
    for index, call in enumerate(calls):
        where = f"{path}.tool_calls[{index}]"
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
            raise config_error("scripted", f"{where}.name", "must be a non-empty string")
        arguments = call.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError as exc:
                raise config_error("scripted", f"{where}.arguments", f"is not valid JSON ({exc})") from None
        if not isinstance(arguments, dict):
            raise config_error("scripted", f"{where}.arguments", "must be an object")
    usage = turn.get("usage", {})
    if not isinstance(usage, dict) or set(usage) - {"input_tokens", "output_tokens"}:
        raise config_error("scripted", f"{path}.usage", "must be {input_tokens, output_tokens}")
    for key, value in usage.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise config_error("scripted", f"{path}.usage.{key}", "must be an integer >= 0")
    delay = turn.get("delay_ms", 0)
    if not isinstance(delay, int | float) or isinstance(delay, bool) or delay < 0:
        raise config_error("scripted", f"{path}.delay_ms", "must be a number >= 0")
    if "finish" in turn and turn["finish"] not in FINISH_VALUES:
        raise config_error("scripted", f"{path}.finish", f"must be one of {sorted(FINISH_VALUES)}")
    scores = turn.get("label_scores", {})
    if not isinstance(scores, dict) or not all(isinstance(score, dict) and "value" in score
                                               and isinstance(score.get("probability"), int | float)
                                               for score in scores.values()):
        raise config_error("scripted", f"{path}.label_scores",
                           'must map each field to {"value": ..., "probability": 0..1, "alternatives": [...]}')


def _compile_turn(turn: dict[str, Any], position: int) -> tuple[ModelTurn, list[str], float]:
    """The ModelTurn a script turn plays, its text chunks and its delay in seconds."""
    calls = []
    for index, call in enumerate(turn.get("tool_calls", ())):
        arguments = call.get("arguments", {})
        if isinstance(arguments, str):
            arguments = json.loads(arguments)
        calls.append(ToolCall(f"call_{position}_{index}", call["name"], arguments))
    usage = turn.get("usage", {})
    text = turn.get("text", "")
    model_turn = ModelTurn(text=text, tool_calls=calls,
                           input_tokens=usage.get("input_tokens", 0),
                           output_tokens=usage.get("output_tokens", 0),
                           finish_reason=turn.get("finish", "tool_calls" if calls else "stop"),
                           label_scores=dict(turn.get("label_scores") or {}))
    return model_turn, _chunks(text), turn.get("delay_ms", 0) / 1000.0


class _Compiled:
    """One checked config's turns, compiled on first play, and its children's.

    Shared by every adapter that plays that config (its replays and the children's
    adapters), so a script replayed many times (demos, benchmarks) is compiled once.
    """

    __slots__ = ("children", "turns")

    def __init__(self, script_length: int) -> None:
        self.turns: list[tuple[ModelTurn, list[str], float] | None] = [None] * script_length
        self.children: dict[str, _Compiled] = {}


def _chunks(text: str) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // STREAM_CHUNKS))
    return [text[i:i + size] for i in range(0, len(text), size)]


class ScriptedAdapter(ModelAdapter):
    name: ClassVar[str] = "scripted"

    def __init__(self, config: dict[str, Any] | None = None, *, _compiled: _Compiled | None = None) -> None:
        super().__init__(config)
        if _compiled is None:
            # a config given from outside is checked; replays and children share a checked one
            _check_config(self.config, "")
        self._script: list[dict[str, Any]] = self.config["script"]
        self._children: dict[str, Any] = self.config.get("children", {})
        self._compiled = _compiled if _compiled is not None else _Compiled(len(self._script))
        self.position = 0
        # every message list and tool list the adapter was called with (references, not
        # copies): tests read them to see what the model was told and offered
        self.received: list[list[Message]] = []
        self.received_tools: list[list[ToolSchema]] = []
        self.received_tool_choices: list[str | None] = []

    async def complete(self, messages: list[Message], tools: list[ToolSchema], *,
                       on_text: TextCallback | None = None,
                       tool_choice: str | None = None) -> ModelTurn:
        """Play the next turn; ``tool_choice`` is recorded, never obeyed (the script decides)."""
        position = self.position
        if position >= len(self._script):
            raise ProtocolError(
                ErrorCode.TOOL_FAILURE,
                f"Scripted adapter: the script has {len(self._script)} turn(s) and all were "
                f"played; turn {position + 1} was asked for. Add a turn to the script.",
                details={"adapter": "scripted", "position": position})
        self.received.append(messages)
        self.received_tools.append(tools)
        self.received_tool_choices.append(tool_choice)
        compiled = self._compiled.turns[position]
        if compiled is None:
            compiled = self._compiled.turns[position] = _compile_turn(self._script[position], position)
        model_turn, chunks, delay = compiled
        if delay:
            await asyncio.sleep(delay)
        if on_text is not None:
            for chunk in chunks:
                await on_text(chunk)
        self.position = position + 1
        # a fresh ModelTurn per call: the runner may keep it while the script is replayed
        return ModelTurn(text=model_turn.text, tool_calls=list(model_turn.tool_calls),
                         input_tokens=model_turn.input_tokens,
                         output_tokens=model_turn.output_tokens,
                         model=self.model_name, finish_reason=model_turn.finish_reason,
                         label_scores=dict(model_turn.label_scores))

    def replay(self) -> ScriptedAdapter:
        """A new adapter that plays the same (already checked) script from its first turn."""
        return ScriptedAdapter(self.config, _compiled=self._compiled)

    def for_child(self, label: str) -> ScriptedAdapter:
        child = self._children.get(label)
        if child is None:
            known = ", ".join(sorted(self._children)) or "none"
            raise ProtocolError(
                ErrorCode.INVALID_ADAPTER_CONFIG,
                f"Scripted adapter: no script for a child labelled '{label}' (config "
                f"'children' has: {known}). Add children['{label}'] or pass that label to "
                f"delegate_task.", details={"adapter": "scripted", "key": f"children.{label}"})
        compiled = self._compiled.children.get(label)
        if compiled is None:
            compiled = self._compiled.children[label] = _Compiled(len(child["script"]))
        return ScriptedAdapter(child, _compiled=compiled)

    def cost_usd(self, input_tokens: int, output_tokens: int) -> float | None:
        """The price from the config's ``prices``, or None (the runner's table decides)."""
        prices = self.config.get("prices")
        if not prices:
            return None
        return (input_tokens * prices.get("input_per_mtok", 0.0)
                + output_tokens * prices.get("output_per_mtok", 0.0)) / 1_000_000

    def export_state(self) -> dict[str, Any]:
        return {"position": self.position}

    def restore_state(self, state: dict[str, Any]) -> None:
        position = state.get("position", 0)
        if not isinstance(position, int) or not 0 <= position <= len(self._script):
            raise config_error("scripted", "state.position",
                               f"must be an integer between 0 and {len(self._script)}")
        self.position = position
