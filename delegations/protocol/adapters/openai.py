"""Any OpenAI-compatible Chat Completions server through the official ``openai`` SDK.

Works with OpenAI itself and with vLLM, Ollama, LM Studio and llama.cpp's servers (an
operator's endpoint with their ``base_url``, see ``endpoints.py``). Answers are streamed: text deltas go to ``on_text`` as they arrive,
tool-call fragments are joined by their ``index`` and parsed when the stream ends.

Config (checked when the adapter is built)::

    endpoint            one of the operator's openai endpoints, by name; default "openai"
                        (OPENAI_BASE_URL, else api.openai.com; key OPENAI_API_KEY)
    model               one the endpoint allows; default the endpoint's, e.g. "gpt-4o-mini"
    temperature         0..2 (server default when unset)
    max_tokens          output token cap (server default when unset)
    seed                an integer, for servers that sample reproducibly (unset: none)
    timeout_s           per request, default 60
    max_retries         retries after the first try for 429/5xx/timeouts, default 2
    retry_base_delay_s  first backoff delay, default 0.5 (doubles each retry)
    tool_choice         "auto" (default) | "required"; a call given a tool_choice (the
                        runner's forced last turn) names that function instead
    stream              default true; false for servers that cannot stream at all
    logprobs            default true: when the answer has labels to score (enum or boolean
                        output fields), ask for ``logprobs`` and read each label's
                        probability from them where the server gives them
                        (``logprob_labels``); false for servers that refuse the parameter

A stream that ends or breaks off before its first chunk while tools were offered
(llama-cpp-python's server does this for an automatic tool choice, which it cannot
stream) is asked again without streaming; the answer then reaches ``on_text`` in one piece.

The API key is read from the environment variable the endpoint names. A local server (an
endpoint with a ``base_url``) needs none; the SDK is then given a dummy key. When a server sends no usage figures, tokens are
estimated at four characters a token so budgets still bite.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import openai

from ..errors import ErrorCode, ProtocolError
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
from .logprob_labels import TokenLogprobs, labels_from_logprobs
from .tool_format import (
    arguments_json,
    content_text,
    output_shapes,
    parameters_schema,
    tool_description,
)

# base_urls (or "default") seen failing to stream an answer when tools were offered.
_NO_TOOL_STREAMING: set[str] = set()
_CONFIG_KEYS = ("model", "temperature", "max_tokens", "seed", "timeout_s", "max_retries",
                "retry_base_delay_s", "tool_choice", "stream", "logprobs")
TOP_LOGPROBS = 5
_FINISH = {"tool_calls": "tool_calls", "function_call": "tool_calls", "stop": "stop",
           "length": "length", "content_filter": "content_filter"}


def estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


@dataclass(slots=True)
class _PartialCall:
    id: str = ""
    name: str = ""
    argument_parts: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _StreamState:
    text_parts: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    finish_reason: str = "stop"
    input_tokens: int | None = None
    output_tokens: int | None = None
    model: str = ""
    finished: bool = False  # a chunk carried a finish_reason
    logprobs: list[TokenLogprobs] = field(default_factory=list)   # per generated token, if sent

    def is_empty(self) -> bool:
        return not (self.finished or self.text_parts or self.calls)


def to_openai_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """The adapter-neutral history (base.py) in Chat Completions form."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            entry: dict[str, Any] = {"role": "assistant",
                                     "content": content_text(message.get("content")) or None}
            calls = message.get("tool_calls") or []
            if calls:
                entry["tool_calls"] = [
                    {"id": call["id"], "type": "function",
                     "function": {"name": call["name"],
                                  "arguments": arguments_json(call.get("arguments"))}}
                    for call in calls]
            out.append(entry)
        elif role == "tool":
            out.append({"role": "tool", "tool_call_id": message.get("tool_call_id", ""),
                        "content": content_text(message.get("content"))})
        else:
            out.append({"role": role if role in ("system", "user", "developer") else "user",
                        "content": content_text(message.get("content"))})
    return out


def to_openai_tools(tools: list[ToolSchema]) -> list[dict[str, Any]]:
    return [{"type": "function",
             "function": {"name": tool["name"], "description": tool_description(tool),
                          "parameters": parameters_schema(tool)}}
            for tool in tools]


def _provider_message(exc: openai.APIError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(body.get("detail"), str):
            return str(body["detail"])
    return str(exc.message or exc)


class OpenAIAdapter(HostedAdapter[openai.AsyncOpenAI]):
    name: ClassVar[str] = "openai"
    sdk = ProviderSDK(openai.AsyncOpenAI, openai.APITimeoutError, openai.APIConnectionError,
                      openai.APIStatusError, openai.APIError, openai.OpenAIError)
    config_keys = _CONFIG_KEYS
    missing_key_message = ("No OpenAI API key for endpoint '{endpoint}': the server's operator "
                           "sets the environment variable {env}, or gives the endpoint the "
                           "base_url of an OpenAI-compatible server that needs no key.")

    def _read_settings(self) -> None:
        adapter, cfg = self.name, self.config
        self.temperature = check.number(adapter, cfg, "temperature", minimum=0, maximum=2)
        self.max_tokens = check.integer(adapter, cfg, "max_tokens", minimum=1)
        self.seed = check.integer(adapter, cfg, "seed", minimum=0, maximum=2**63 - 1)
        self.timeout_s = check.timeout_s(adapter, cfg)
        self.tool_choice = check.tool_choice(adapter, cfg)
        self.stream = check.boolean(adapter, cfg, "stream", default=True)
        self.logprobs = check.boolean(adapter, cfg, "logprobs", default=True)
        self._labels: dict[str, list[Any]] = {}   # this call's labels to score (see _request)

    def _status_failure(self, exc: openai.APIStatusError) -> ProviderFailure:
        status = exc.status_code
        return ProviderFailure(_provider_message(exc), retryable_status(status), status,
                               retry_after_seconds(exc.response.headers))

    def _stream_failure(self, exc: openai.APIError) -> ProviderFailure:
        # An error event inside an open stream: the server broke off mid-answer.
        return ProviderFailure(_provider_message(exc), True)

    def _request(self, messages: list[Message], tools: list[ToolSchema],
                 tool_choice: str | None = None) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model, "messages": to_openai_messages(messages)}
        if tools:
            request["tools"] = to_openai_tools(tools)
            if tool_choice is None and self.tool_choice == "required" and len(tools) == 1:
                # Naming the one tool is understood by more servers (llama.cpp) than "required".
                tool_choice = tools[0]["name"]
            if tool_choice is not None:
                request["tool_choice"] = {"type": "function", "function": {"name": tool_choice}}
            else:
                request["tool_choice"] = self.tool_choice
        if self.temperature is not None:
            request["temperature"] = self.temperature
        if self.max_tokens is not None:
            request["max_tokens"] = self.max_tokens
        if self.seed is not None:
            request["seed"] = self.seed
        shapes = output_shapes(tools)
        # a span (a passage's names and sentences) is the local model's choice: a hosted
        # model writes its answer freely, and only enum labels are read from its logprobs
        self._labels = {name: values for name, values in (shapes.get("labels") or {}).items()
                        if name not in (shapes.get("spans") or {})} if self.logprobs else {}
        if self._labels:
            request["logprobs"], request["top_logprobs"] = True, TOP_LOGPROBS
        return request

    async def _attempt(self, client: openai.AsyncOpenAI, request: dict[str, Any],
                       on_text: TextCallback | None) -> ModelTurn:
        state = _StreamState()
        tools = "tools" in request
        server = self.base_url or "default"
        if self.stream and not (tools and server in _NO_TOOL_STREAMING):
            try:
                await self._stream(client, request, state, on_text)
            except openai.APITimeoutError:
                raise
            except openai.APIConnectionError:
                if not (tools and state.is_empty()):
                    raise
            if tools and state.is_empty():
                # Some servers (llama-cpp-python's chatml-function-calling) cannot stream
                # an automatic tool choice: the stream ends, or the connection drops,
                # before the first chunk. Ask again unstreamed, and remember the server
                # (a retry, a later turn or a child then asks unstreamed at once).
                _NO_TOOL_STREAMING.add(server)
                state = _StreamState()
                response = await client.chat.completions.create(**request)
                await self._absorb_response(response, state, on_text)
        else:
            response = await client.chat.completions.create(**request)
            await self._absorb_response(response, state, on_text)
        return self._turn(state, request["messages"])

    async def _stream(self, client: openai.AsyncOpenAI, request: dict[str, Any],
                      state: _StreamState, on_text: TextCallback | None) -> None:
        stream = await client.chat.completions.create(
            **request, stream=True, stream_options={"include_usage": True})
        try:
            await self._consume(stream, state, on_text)
        finally:
            await stream.close()

    async def _consume(self, chunks: AsyncIterable[Any], state: _StreamState,
                       on_text: TextCallback | None) -> None:
        async for chunk in chunks:
            state.model = chunk.model or state.model
            if chunk.usage is not None:
                state.input_tokens = chunk.usage.prompt_tokens
                state.output_tokens = chunk.usage.completion_tokens
            for choice in chunk.choices or []:
                _read_logprobs(choice, state)
                delta = choice.delta
                if delta is not None and delta.content:
                    state.text_parts.append(delta.content)
                    if on_text is not None:
                        await on_text(delta.content)
                for fragment in (delta.tool_calls if delta is not None else None) or []:
                    partial = state.calls.setdefault(fragment.index, _PartialCall())
                    if fragment.id:
                        partial.id = fragment.id
                    if fragment.function is not None:
                        if fragment.function.name:
                            partial.name = fragment.function.name
                        if fragment.function.arguments:
                            partial.argument_parts.append(fragment.function.arguments)
                if choice.finish_reason:
                    state.finished = True
                    state.finish_reason = _FINISH.get(choice.finish_reason, choice.finish_reason)

    async def _absorb_response(self, response: Any, state: _StreamState,
                               on_text: TextCallback | None) -> None:
        state.model = response.model or ""
        if response.usage is not None:
            state.input_tokens = response.usage.prompt_tokens
            state.output_tokens = response.usage.completion_tokens
        if not response.choices:
            raise ProtocolError(ErrorCode.TOOL_FAILURE,
                                f"{self.name} server returned no choices for model {self.model}.")
        choice = response.choices[0]
        _read_logprobs(choice, state)
        message = choice.message
        if message.content:
            state.text_parts.append(message.content)
            if on_text is not None:
                await on_text(message.content)
        for index, call in enumerate(message.tool_calls or []):
            function = getattr(call, "function", None)
            if function is not None:
                state.calls[index] = _PartialCall(call.id, function.name,
                                                  [function.arguments or ""])
        state.finish_reason = _FINISH.get(choice.finish_reason or "stop",
                                          choice.finish_reason or "stop")

    def _turn(self, state: _StreamState, chat_messages: list[dict[str, Any]]) -> ModelTurn:
        calls: list[ToolCall] = []
        for index in sorted(state.calls):
            partial = state.calls[index]
            if not partial.name:
                raise ProtocolError(
                    ErrorCode.TOOL_FAILURE,
                    f"{self.name} server streamed a tool call without a function name "
                    f"(model {self.model}).")
            arguments = tool_arguments(partial.name, "".join(partial.argument_parts))
            calls.append(ToolCall(id=partial.id or f"call_{index}", name=partial.name,
                                  arguments=arguments))
        text = "".join(state.text_parts)
        input_tokens = state.input_tokens
        if input_tokens is None:
            input_tokens = estimate_tokens(json.dumps(chat_messages))
        output_tokens = state.output_tokens
        if output_tokens is None:
            output_tokens = estimate_tokens(text + "".join(
                "".join(p.argument_parts) for p in state.calls.values()))
        finish = state.finish_reason
        if calls and finish == "stop":
            finish = "tool_calls"
        scores = labels_from_logprobs(state.logprobs, self._labels) if state.logprobs and self._labels else {}
        return ModelTurn(text=text, tool_calls=calls, input_tokens=input_tokens,
                         output_tokens=output_tokens, model=state.model or self.model,
                         finish_reason=finish, label_scores=scores)


def _read_logprobs(choice: Any, state: _StreamState) -> None:
    """The choice's per-token logprobs, when the server sent them."""
    logprobs = getattr(choice, "logprobs", None)
    for entry in getattr(logprobs, "content", None) or []:
        alternatives = [(str(alt.token), float(alt.logprob)) for alt in getattr(entry, "top_logprobs", None) or []]
        state.logprobs.append((str(entry.token), float(entry.logprob), alternatives))
