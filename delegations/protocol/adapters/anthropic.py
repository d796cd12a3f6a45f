"""Anthropic's Messages API through the official ``anthropic`` SDK, streamed.

The adapter-neutral history (base.py) is reshaped the way the Messages API requires:
system messages become the ``system`` prompt; assistant tool calls become ``tool_use``
blocks; tool results become ``tool_result`` blocks in a user turn; consecutive turns of
the same role are merged (the API wants user and assistant to alternate, starting with
user). While streaming, ``text_delta`` goes to ``on_text`` and each ``tool_use`` block's
``input_json_delta`` fragments are joined and parsed when the block ends.

Config (checked when the adapter is built)::

    endpoint            one of the operator's anthropic endpoints, by name; default
                        "anthropic" (ANTHROPIC_BASE_URL, else the API's; key ANTHROPIC_API_KEY)
    model               one the endpoint allows; default the endpoint's, e.g. "claude-sonnet-4-5"
    max_tokens          output cap, default 1024 (the API requires one)
    temperature         0..1 (model default when unset)
    timeout_s           per request, default 60
    max_retries         retries after the first try for 429/5xx/529/timeouts, default 2
    retry_base_delay_s  first backoff delay, default 0.5 (doubles each retry)
    tool_choice         "auto" (default) | "required" (the API's "any"); a call given a
                        tool_choice (the runner's forced last turn) sends {"type": "tool"}

The API key comes from the environment variable the endpoint names only.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import anthropic

from . import config_checks as check
from .base import Message, ModelTurn, TextCallback, ToolCall, ToolSchema
from .hosted import (
    HostedAdapter,
    ProviderFailure,
    ProviderSDK,
    retry_after_seconds,
    retryable_status,
    tool_arguments,
)
from .tool_format import content_text, parameters_schema, tool_description

_CONFIG_KEYS = ("model", "max_tokens", "temperature", "timeout_s", "max_retries",
                "retry_base_delay_s", "tool_choice")
_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls",
           "max_tokens": "length", "refusal": "content_filter"}
# Error types the API puts in its error bodies (also inside an open stream) that are
# worth another try.
_RETRYABLE_TYPES = frozenset({"overloaded_error", "rate_limit_error", "api_error",
                              "timeout_error"})


@dataclass(slots=True)
class _Block:
    kind: str
    id: str = ""
    name: str = ""
    json_parts: list[str] = field(default_factory=list)
    start_input: dict[str, Any] | None = None


@dataclass(slots=True)
class _StreamState:
    text_parts: list[str] = field(default_factory=list)
    blocks: dict[int, _Block] = field(default_factory=dict)
    finish_reason: str = "stop"
    input_tokens: int = 0
    output_tokens: int = 0
    model: str = ""


def _tool_use(call: dict[str, Any]) -> dict[str, Any]:
    arguments = call.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            arguments = {"raw": arguments}
    return {"type": "tool_use", "id": call["id"], "name": call["name"],
            "input": arguments if isinstance(arguments, dict) else {"value": arguments}}


def to_anthropic_messages(messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    """(system prompt, alternating user/assistant turns made of content blocks)."""
    system_parts: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": list(blocks)})

    for message in messages:
        role = message.get("role")
        text = content_text(message.get("content"))
        if role == "system":
            if text:
                system_parts.append(text)
        elif role == "assistant":
            blocks = [{"type": "text", "text": text}] if text.strip() else []
            blocks += [_tool_use(call) for call in message.get("tool_calls") or []]
            add("assistant", blocks)
        elif role == "tool":
            block: dict[str, Any] = {"type": "tool_result",
                                     "tool_use_id": message.get("tool_call_id", ""),
                                     "content": text or "(empty result)"}
            if message.get("is_error"):
                block["is_error"] = True
            add("user", [block])
        elif text.strip():
            add("user", [{"type": "text", "text": text}])
    if not turns or turns[0]["role"] != "user":
        # The API requires the conversation to open with a user turn.
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": "Begin."}]})
    return "\n\n".join(system_parts), turns


def to_anthropic_tools(tools: list[ToolSchema]) -> list[dict[str, Any]]:
    return [{"name": tool["name"], "description": tool_description(tool),
             "input_schema": parameters_schema(tool)} for tool in tools]


def _error_body(body: object) -> tuple[str | None, str | None]:
    """(error type, message) from an API error body {"type": "error", "error": {...}}."""
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            kind, message = error.get("type"), error.get("message")
            return (kind if isinstance(kind, str) else None,
                    message if isinstance(message, str) else None)
    return None, None


class AnthropicAdapter(HostedAdapter[anthropic.AsyncAnthropic]):
    name: ClassVar[str] = "anthropic"
    sdk = ProviderSDK(anthropic.AsyncAnthropic, anthropic.APITimeoutError,
                      anthropic.APIConnectionError, anthropic.APIStatusError, anthropic.APIError,
                      anthropic.AnthropicError)
    config_keys = _CONFIG_KEYS
    missing_key_message = ("No Anthropic API key for endpoint '{endpoint}': the server's operator "
                           "sets the environment variable {env}.")

    def _read_settings(self) -> None:
        adapter, cfg = self.name, self.config
        self.max_tokens = check.integer(adapter, cfg, "max_tokens", minimum=1,
                                        default=1024) or 1024
        self.temperature = check.number(adapter, cfg, "temperature", minimum=0, maximum=1)
        self.timeout_s = check.timeout_s(adapter, cfg)
        self.tool_choice = check.tool_choice(adapter, cfg)

    def _status_failure(self, exc: anthropic.APIStatusError) -> ProviderFailure:
        kind, message = _error_body(exc.body)
        status = exc.status_code
        text = f"{kind}: {message}" if kind and message else (message or exc.message)
        # An error event inside a 200 stream carries its meaning in the body, not the status.
        return ProviderFailure(text, retryable_status(status) or kind in _RETRYABLE_TYPES,
                               status if status >= 400 else None,
                               retry_after_seconds(exc.response.headers))

    def _stream_failure(self, exc: anthropic.APIError) -> ProviderFailure:
        kind, message = _error_body(exc.body)
        return ProviderFailure(message or exc.message, kind in _RETRYABLE_TYPES)

    def _request(self, messages: list[Message], tools: list[ToolSchema],
                 tool_choice: str | None = None) -> dict[str, Any]:
        system, turns = to_anthropic_messages(messages)
        request: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens,
                                   "messages": turns}
        if system:
            request["system"] = system
        if tools:
            request["tools"] = to_anthropic_tools(tools)
            request["tool_choice"] = (
                {"type": "tool", "name": tool_choice} if tool_choice is not None
                else {"type": "any" if self.tool_choice == "required" else "auto"})
        if self.temperature is not None:
            # Sent as a raw body field: recent SDKs no longer list it as a typed parameter.
            request["extra_body"] = {"temperature": self.temperature}
        return request

    async def _attempt(self, client: anthropic.AsyncAnthropic, request: dict[str, Any],
                       on_text: TextCallback | None) -> ModelTurn:
        state = _StreamState()
        stream = await client.messages.create(**request, stream=True)
        try:
            await self._consume(stream, state, on_text)
        finally:
            await stream.close()
        return self._turn(state)

    async def _consume(self, events: AsyncIterable[Any], state: _StreamState,
                       on_text: TextCallback | None) -> None:
        async for event in events:
            kind = event.type
            if kind == "message_start":
                usage = event.message.usage
                state.model = event.message.model or state.model
                state.input_tokens = ((usage.input_tokens or 0)
                                      + (usage.cache_creation_input_tokens or 0)
                                      + (usage.cache_read_input_tokens or 0))
                state.output_tokens = usage.output_tokens or 0
            elif kind == "content_block_start":
                block = event.content_block
                if block.type == "tool_use":
                    state.blocks[event.index] = _Block(
                        "tool_use", block.id, block.name,
                        start_input=block.input if isinstance(block.input, dict) else None)
                else:
                    state.blocks[event.index] = _Block(block.type)
                    initial = getattr(block, "text", "") if block.type == "text" else ""
                    if initial:
                        await self._emit(initial, state, on_text)
            elif kind == "content_block_delta":
                delta = event.delta
                if delta.type == "text_delta":
                    await self._emit(delta.text, state, on_text)
                elif delta.type == "input_json_delta":
                    target = state.blocks.get(event.index)
                    if target is not None:
                        target.json_parts.append(delta.partial_json)
            elif kind == "message_delta":
                if event.delta.stop_reason:
                    state.finish_reason = _FINISH.get(event.delta.stop_reason,
                                                      event.delta.stop_reason)
                # message_delta's usage is cumulative for the whole message.
                state.output_tokens = event.usage.output_tokens or state.output_tokens
                if event.usage.input_tokens:
                    state.input_tokens = max(state.input_tokens, event.usage.input_tokens)

    @staticmethod
    async def _emit(text: str, state: _StreamState, on_text: TextCallback | None) -> None:
        state.text_parts.append(text)
        if on_text is not None:
            await on_text(text)

    def _turn(self, state: _StreamState) -> ModelTurn:
        calls: list[ToolCall] = []
        for index in sorted(state.blocks):
            block = state.blocks[index]
            if block.kind != "tool_use":
                continue
            arguments = tool_arguments(block.name, "".join(block.json_parts),
                                       when_empty=block.start_input)
            calls.append(ToolCall(id=block.id, name=block.name, arguments=arguments))
        return ModelTurn(text="".join(state.text_parts), tool_calls=calls,
                         input_tokens=state.input_tokens, output_tokens=state.output_tokens,
                         model=state.model or self.model, finish_reason=state.finish_reason)
