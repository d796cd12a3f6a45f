"""Real small models in-process: a GGUF from Handoff's catalog (:mod:`.local_models`, e.g.
SmolLM2-135M-Instruct or Gemma 3 270M) or a file of your own, run by llama-cpp-python.

The embedded default adapter. Answers are constrained by a JSON schema so
that, when tools are offered, every answer is a valid call of one of them::

    {"anyOf": [{"type": "object",
                "properties": {"name": {"const": "<tool>"}, "arguments": <its parameters>},
                "required": ["name", "arguments"]}, ...]}

How a call runs:

- the model is loaded once per process per (file, n_ctx, n_threads, chat format) and
  cached; finding the file (a catalog model is checksummed, Gemma assembled on first use)
  and loading it run in a worker thread so the event loop keeps serving;
- a model whose chat format has no system role (Gemma) gets the system text at the head
  of the first user message (:func:`fold_system_into_user`);
- generation runs in its own thread and streams tokens back to the loop
  (``call_soon_threadsafe`` into an ``asyncio.Queue``); one generation at a time per
  loaded model (llama.cpp contexts are not thread-safe), others wait their turn;
- a ``tool_choice`` narrows the tools to the one named, so the schema admits only its call;
- with tools, the raw JSON is streamed to ``on_text`` so people watch it being written,
  but the returned ``ModelTurn.text`` is ``""``: the answer *is* the tool call, which is
  returned as ``tool_calls[0]`` with a generated id. Without tools the model writes plain
  text, streamed and returned as ``text``;
- cancelling the awaiting coroutine sets an event the generation thread checks after
  every token; it closes llama.cpp's token stream, so generation stops within a token.
  Prompt evaluation cannot be interrupted (llama.cpp decodes the prompt in one call): a
  few hundred new tokens take 0.3-3 s on a busy 2-core machine; a repeated prefix is
  reused from the previous call, so later turns of a run evaluate only what is new;
- free-form parts of the tool schemas are tightened for the grammar (see
  :func:`bounded_schema`: flat objects, capped strings and arrays) because a 135M model
  otherwise nests ``{"data": {"data": ...`` until max_tokens; an answer still cut off by
  max_tokens, or stopped because an object repeated a key (:class:`RepeatedKeyGuard`: the
  sign of a loop), is closed after its last complete member (:func:`close_truncated_json`)
  and must then validate against the tool's own schema, else ERR_TOOL_FAILURE;
- token usage comes from llama.cpp's context (prompt) and the tokens streamed (output).

Config (checked when the adapter is built)::

    model        a catalog model by name: smollm2-135m or gemma3-270m
                 (default: local_models.DEFAULT_LOCAL_MODEL)
    model_path   a .gguf file of your own instead; wins over model, not checksummed
    n_ctx        context window in tokens, default 4096 (SmolLM2 supports 8192, Gemma 3 32768)
    temperature  default 0 (greedy: an answer held to a schema gains nothing from sampling,
                 and the same delegation gets the same answer)
    max_tokens   cap on generated tokens, default 512
    seed         sampling seed (default: random per call)
    n_threads    CPU threads for prompt and generation (default: half the cores, >= 1)

A missing or damaged model file or a missing llama-cpp-python is reported when a call is
made, as ``ProtocolError(ERR_TOOL_FAILURE)`` saying what to install or repair.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib.util
import json
import os
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import islice
from pathlib import Path
from typing import Any, ClassVar

from jsonschema import Draft202012Validator

from ..errors import ErrorCode, ProtocolError
from . import config_checks as check
from .base import Message, ModelAdapter, ModelTurn, TextCallback, ToolCall, ToolSchema, config_error
from .local_models import DEFAULT_LOCAL_MODEL, SHIPPED_MODELS, ShippedModel, locate
from .tool_format import content_text, parameters_schema, tool_description

_CONFIG_KEYS = ("model", "model_path", "n_ctx", "temperature", "max_tokens", "seed", "n_threads")
INSTALL_HINT = "pip install 'llama-cpp-python>=0.3.8'"
GENERATION_THREAD = "handoff-local-model"
_PROMPT_MARGIN = 64  # tokens the chat template and our tool list add around messages


def llama_cpp_missing() -> str | None:
    """Why llama-cpp-python cannot be used here, or None when it is installed."""
    if importlib.util.find_spec("llama_cpp") is None:
        return f"llama-cpp-python is not installed ({INSTALL_HINT})"
    return None


# --- loaded models, shared by every adapter in the process ---------------------------------

@dataclass(slots=True)
class _LoadedModel:
    llama: Any
    load_seconds: float
    generate_lock: threading.Lock = field(default_factory=threading.Lock)


_MODELS: dict[tuple[str, int, int | None, str | None], _LoadedModel] = {}
_MODELS_LOCK = threading.Lock()


@atexit.register
def _free_models() -> None:
    """Free the loaded models while llama_cpp is still whole: left to ``Llama.__del__`` at
    interpreter shutdown, freeing runs after llama_cpp's module globals are gone and prints
    a TypeError traceback at the end of every process that used the model."""
    with _MODELS_LOCK:
        loaded = list(_MODELS.values())
        _MODELS.clear()
    for model in loaded:
        # a generation still running (its thread is a daemon) keeps the model: closing it
        # under llama.cpp would crash the process on its way out
        if model.generate_lock.acquire(timeout=1.0):
            model.llama.close()


def _load(path: Path, n_ctx: int, n_threads: int | None,
          chat_format: str | None = None) -> _LoadedModel:
    key = (str(path), n_ctx, n_threads, chat_format)
    with _MODELS_LOCK:
        cached = _MODELS.get(key)
        if cached is not None:
            return cached
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise ProtocolError(
                ErrorCode.TOOL_FAILURE,
                f"The local adapter needs llama-cpp-python, which could not be imported "
                f"({exc}). Install it: {INSTALL_HINT}.") from None
        started = time.perf_counter()
        # Prompt evaluation gets the same threads as generation, not llama.cpp's default of
        # every core: its OpenMP workers spin while waiting, and on a shared 2-core machine
        # two spinning threads evaluated a 200-token prompt ~3x slower than one.
        threads = n_threads or max(1, (os.cpu_count() or 2) // 2)
        try:
            llama = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads,
                          n_threads_batch=threads, chat_format=chat_format, verbose=False)
        except (ValueError, RuntimeError, OSError) as exc:
            raise ProtocolError(
                ErrorCode.TOOL_FAILURE,
                f"llama.cpp could not load the model file {path}: {exc}. Check that it is a "
                f"GGUF model file, or set config 'model' to one Handoff ships "
                f"({', '.join(SHIPPED_MODELS)}).",
                details={"model_path": str(path)}) from None
        loaded = _LoadedModel(llama, time.perf_counter() - started)
        _MODELS[key] = loaded
        return loaded


# --- prompt and schema ---------------------------------------------------------------------

# Tools a small model is not offered: it cannot judge when it lacks a capability. Offered
# request_capability on a critic's task, SmolLM2-135M asked four times for the capability
# "Delete all user files from the old storage." before its forced last turn.
NOT_OFFERED = frozenset({"request_capability"})
_ERROR_REPORT = {"type": "object",
                 "properties": {"code": {"type": "string", "pattern": "^ERR_[A-Z_]{2,30}$"},
                                "message": {"type": "string", "maxLength": 200}},
                 "required": ["code", "message"]}


def model_parameters(tool: ToolSchema) -> dict[str, Any]:
    """The parameters schema the model is shown and held to.

    ``yield_control`` is split in two answers: a result (SUCCESS or PARTIAL_COMPLETION and
    a real output_payload, nothing else) or a FAILURE with an empty payload and an
    ``error_report {code, message}``; a small model does not ask for clarification (it
    would park the run for a person over noise). Given the protocol's free-form shape, Gemma 3 270M
    wrote an error_report on a SUCCESS with a 200-digit code (262 tokens, 14 s), and
    SmolLM2-135M spent 110 of 160 output tokens on a log_summary repeating its input.
    """
    schema = parameters_schema(tool)
    properties = schema.get("properties")
    if tool["name"] != "yield_control" or not isinstance(properties, dict):
        return schema
    payload = properties.get("output_payload") or {"type": "object"}
    # the expected output schema, without the {} that only a FAILURE or a question may give
    real = [option for option in payload.get("anyOf") or [] if option != {"const": {}}]
    result = {"type": "object",
              "properties": {"status": {"enum": ["SUCCESS", "PARTIAL_COMPLETION"]},
                             "output_payload": real[0] if len(real) == 1 else payload},
              "required": ["status", "output_payload"], "additionalProperties": False}
    failure = {"type": "object",
               "properties": {"status": {"const": "FAILURE"},
                              "output_payload": {"const": {}},
                              "error_report": _ERROR_REPORT},
               "required": ["status", "output_payload", "error_report"],
               "additionalProperties": False}
    return {"anyOf": [result, failure]}


def _parameter_names(schema: dict[str, Any]) -> list[str]:
    """Parameter names as the tool note lists them: optional ones marked with '?'."""
    union = schema.get("anyOf")
    options: list[dict[str, Any]] = union if isinstance(union, list) else [schema]
    names = list(dict.fromkeys(name for option in options
                               for name in (option.get("properties") or {})))
    always = set.intersection(*(set(option.get("required", [])) for option in options))
    return [name if name in always else f"{name}?" for name in names]


def tools_prompt(tools: list[ToolSchema]) -> str:
    """A compact system note, one short line per tool: the prompt is most of a small
    model's time (SmolLM2-135M evaluates about 150 prompt tokens/s on one core here), and
    constrained decoding already holds each answer to its tool's full schema."""
    lines = ['Reply with one JSON object: {"name": TOOL, "arguments": {...}}. Tools:']
    for tool in tools:
        params = ", ".join(_parameter_names(model_parameters(tool)))
        lines.append(f"- {tool['name']}({params}): {_first_sentence(tool_description(tool))}")
    return "\n".join(lines)


def _first_sentence(text: str) -> str:
    head, _, _ = text.partition(". ")
    return head.rstrip(".") + "."


_MAX_STRING = 200
_MAX_ITEMS = 8
_SCALAR: dict[str, Any] = {"anyOf": [{"type": "string", "maxLength": _MAX_STRING},
                                     {"type": "number"}, {"type": "boolean"},
                                     {"type": "null"}]}
_FREE_OBJECT: dict[str, Any] = {"type": "object", "additionalProperties": _SCALAR}


def bounded_schema(schema: Any) -> Any:
    """A stricter copy of ``schema`` that a 135M model cannot wander around in forever.

    Free-form parts are where a tiny model loops (``{"data": {"data": {...`` until
    max_tokens): free objects get flat scalar values, arrays at most a few items, strings
    a length cap. Everything this accepts the original schema accepts too.
    """
    if not isinstance(schema, dict):
        return _SCALAR
    if any(key in schema for key in ("enum", "const", "$ref")):
        return schema
    for union in ("anyOf", "oneOf"):
        if isinstance(schema.get(union), list):
            return {**schema, union: [bounded_schema(option) for option in schema[union]]}
    kind = schema.get("type")
    if isinstance(kind, list):
        options = [bounded_schema({**schema, "type": one}) for one in kind]
        rest = {k: v for k, v in schema.items() if k not in ("type", "properties", "required",
                                                            "items", "additionalProperties")}
        return {**rest, "anyOf": options}
    if kind == "object" or (kind is None and "properties" in schema):
        if not isinstance(schema.get("properties"), dict) or not schema["properties"]:
            return {**_FREE_OBJECT, **{k: schema[k] for k in ("description",) if k in schema}}
        properties = {name: bounded_schema(spec)
                      for name, spec in schema["properties"].items()}
        return {**schema, "properties": properties}
    if kind == "array":
        return {**schema, "items": bounded_schema(schema.get("items", _SCALAR)),
                "maxItems": min(int(schema.get("maxItems", _MAX_ITEMS)), _MAX_ITEMS)}
    if kind == "string" and not any(key in schema for key in ("pattern", "format")):
        return {**schema, "maxLength": min(int(schema.get("maxLength", _MAX_STRING)),
                                           _MAX_STRING)}
    if kind is None:
        return _SCALAR
    return schema


def answer_schema(tools: list[ToolSchema]) -> dict[str, Any]:
    """The JSON schema every constrained answer follows: a call of one offered tool."""
    options = [{"type": "object",
                "properties": {"name": {"const": tool["name"]},
                               "arguments": bounded_schema(model_parameters(tool))},
                "required": ["name", "arguments"]}
               for tool in tools]
    return options[0] if len(options) == 1 else {"anyOf": options}


def closed_prefixes(text: str) -> Iterator[Any]:
    """Cut-off JSON made whole, longest first: each prefix ending after a complete member,
    with its open objects and arrays closed.

    Schema-constrained output can still be cut short (max_tokens, or a loop stopped by
    :class:`RepeatedKeyGuard`); closing it at a member boundary keeps the values the model
    finished and invents none. Callers take the first candidate that is a valid call.
    """
    stack: list[str] = []
    cut_points: list[tuple[int, str]] = []  # (end index, closers) after a complete member
    in_string = escaped = False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            in_string = True
        elif char in "{[":
            stack.append("}" if char == "{" else "]")
            cut_points.append((index + 1, "".join(reversed(stack))))
        elif char in "}]" and stack:
            stack.pop()
            cut_points.append((index + 1, "".join(reversed(stack))))
        elif char == "," and stack:
            cut_points.append((index, "".join(reversed(stack))))
    for end, closers in reversed(cut_points):
        try:
            yield json.loads(text[:end] + closers)
        except json.JSONDecodeError:
            continue


def close_truncated_json(text: str) -> Any:
    """The longest closed prefix of cut-off JSON (see :func:`closed_prefixes`), or None."""
    return next(closed_prefixes(text), None)


def to_chat_messages(messages: list[Message], tools: list[ToolSchema]) -> list[dict[str, str]]:
    """The history as plain role/content messages the GGUF's chat template understands."""
    chat: list[dict[str, str]] = []
    for message in messages:
        role = message.get("role")
        text = content_text(message.get("content"))
        if role == "assistant":
            calls = message.get("tool_calls") or []
            # The model sees its earlier calls written the way it is asked to answer.
            text = "\n".join([text] * bool(text) + [
                json.dumps({"name": c["name"], "arguments": c.get("arguments", {})},
                           ensure_ascii=False) for c in calls])
            chat.append({"role": "assistant", "content": text})
        elif role == "tool":
            if message.get("example"):
                continue  # a worked example reads best as input -> answer, input -> answer
            # Small chat templates know no "tool" role: results come back as user turns.
            name = message.get("name") or "tool"
            chat.append({"role": "user", "content": f"Result of {name}: {text}"})
        else:
            chat.append({"role": "system" if role == "system" else "user", "content": text})
    if tools:
        note = tools_prompt(tools)
        if chat and chat[0]["role"] == "system":
            chat[0] = {"role": "system", "content": f"{chat[0]['content']}\n\n{note}"}
        else:
            chat.insert(0, {"role": "system", "content": note})
    return chat


def fit_to_context(chat: list[dict[str, str]], count_tokens: Any, budget: int, *,
                   examples: int = 0) -> list[dict[str, str]]:
    """Drop the oldest turns after the opening (system, ``examples`` worked examples of
    two messages each, the task), then shorten the longest message, until the prompt fits
    ``budget`` tokens."""
    chat = list(chat)
    sizes = [count_tokens(m["content"]) + 4 for m in chat]
    opening = 2 + 2 * examples
    keep_head = opening if len(chat) > opening and chat[0]["role"] == "system" else 1
    while sum(sizes) > budget and len(chat) > keep_head + 1:
        del chat[keep_head]
        del sizes[keep_head]
    while sum(sizes) > budget:
        longest = max(range(len(chat)), key=sizes.__getitem__)
        excess = sum(sizes) - budget
        content = chat[longest]["content"]
        keep_chars = max(0, int(len(content) * (1 - (excess + 8) / max(sizes[longest], 1))))
        shortened = content[:keep_chars] + " [...]"
        chat[longest] = {**chat[longest], "content": shortened}
        new_size = count_tokens(shortened) + 4
        if new_size >= sizes[longest]:
            break
        sizes[longest] = new_size
    return chat


@lru_cache(maxsize=64)
def _validator(schema_json: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(schema_json))


def _argument_problems(tool: ToolSchema, arguments: Any) -> list[str]:
    if not isinstance(arguments, dict):
        return ["arguments is not an object"]
    validator = _validator(json.dumps(parameters_schema(tool), sort_keys=True))
    return [f"{'.'.join(map(str, error.absolute_path)) or 'arguments'}: {error.message}"
            for error in validator.iter_errors(arguments)][:3]


class RepeatedKeyGuard:
    """Watches JSON being written and reports the moment an object repeats a key.

    A repeated key is how a tiny model's loop shows (``"type": "json", "data": ...,
    "type": "json", ...``); generation stops there and the answer is closed after its last
    complete member instead of burning the rest of max_tokens.
    """

    def __init__(self) -> None:
        self._objects: list[set[str] | None] = []  # keys seen per open object; None: array
        self._expect_key = False
        self._in_string = False
        self._escaped = False
        self._key: list[str] | None = None

    def feed(self, piece: str) -> bool:
        """True once a key repeats within one object."""
        for char in piece:
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif char == "\\":
                    self._escaped = True
                elif char == '"':
                    self._in_string = False
                    if self._key is not None and self._finish_key("".join(self._key)):
                        return True
                    continue
                if self._key is not None:
                    self._key.append(char)
            elif char == '"':
                self._in_string = True
                in_object = bool(self._objects) and self._objects[-1] is not None
                self._key = [] if in_object and self._expect_key else None
            elif char in "{[":
                self._objects.append(set() if char == "{" else None)
                self._expect_key = char == "{"
            elif char in "}]":
                if self._objects:
                    self._objects.pop()
                self._expect_key = False
            elif char == ",":
                self._expect_key = bool(self._objects) and self._objects[-1] is not None
            elif char == ":":
                self._expect_key = False
        return False

    def _finish_key(self, key: str) -> bool:
        self._key = None
        self._expect_key = False
        keys = self._objects[-1]
        assert keys is not None
        if key in keys:
            return True
        keys.add(key)
        return False


def fold_system_into_user(chat: list[dict[str, str]]) -> list[dict[str, str]]:
    """The chat for a format without a system role (llama-cpp-python's Gemma format drops
    system messages): system text opens the next user message, as Gemma 3's own template
    does, or becomes a user message of its own."""
    folded: list[dict[str, str]] = []
    pending: list[str] = []
    for message in chat:
        if message["role"] == "system":
            pending.append(message["content"])
            continue
        if pending and message["role"] == "user":
            message = {"role": "user", "content": "\n\n".join([*pending, message["content"]])}
        elif pending:
            folded.append({"role": "user", "content": "\n\n".join(pending)})
        pending = []
        folded.append(message)
    if pending:
        folded.append({"role": "user", "content": "\n\n".join(pending)})
    return folded


# --- the adapter ---------------------------------------------------------------------------

@dataclass(slots=True)
class _Generation:
    """What the generation thread hands back to the event loop."""

    text: str = ""
    output_tokens: int = 0
    input_tokens: int = 0
    finish_reason: str = "stop"
    seconds: float = 0.0


class LocalAdapter(ModelAdapter):
    name: ClassVar[str] = "local"
    compact_prompt: ClassVar[bool] = True

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__(config)
        adapter, cfg = self.name, self.config
        check.reject_unknown_keys(adapter, cfg, _CONFIG_KEYS)
        name = check.text(adapter, cfg, "model", choices=SHIPPED_MODELS)
        path = check.text(adapter, cfg, "model_path")
        self.model_path: Path | None = Path(path).expanduser() if path else None
        if self.model_path is not None and self.model_path.suffix.lower() != ".gguf":
            raise config_error(adapter, "model_path",
                               f"must be a .gguf model file, not {str(self.model_path)!r}")
        self.model: ShippedModel | None = (
            None if self.model_path else SHIPPED_MODELS[name or DEFAULT_LOCAL_MODEL])
        self.n_ctx = check.integer(adapter, cfg, "n_ctx", minimum=256, maximum=131072,
                                   default=4096) or 4096
        self.temperature = check.number(adapter, cfg, "temperature", minimum=0, maximum=2,
                                        default=0.0)
        self.max_tokens = check.integer(adapter, cfg, "max_tokens", minimum=1,
                                        default=512) or 512
        if self.max_tokens >= self.n_ctx:
            raise config_error(adapter, "max_tokens",
                               f"must be smaller than n_ctx ({self.n_ctx}) to leave room for "
                               "the prompt")
        self.seed = check.integer(adapter, cfg, "seed", minimum=0, maximum=2**31 - 1)
        self.n_threads = check.integer(adapter, cfg, "n_threads", minimum=1, maximum=256)

    @property
    def model_name(self) -> str:
        if self.model is not None:
            return f"local/{self.model.name}"
        assert self.model_path is not None
        return f"local/{self.model_path.stem}"

    def _resolved_path(self) -> Path:
        """The model file to load; reads (and may assemble) the model, so it runs in a
        worker thread."""
        problem = llama_cpp_missing()
        if problem is not None:
            raise ProtocolError(ErrorCode.TOOL_FAILURE,
                                f"The local adapter cannot run: {problem}.")
        if self.model is not None:
            return locate(self.model.name)
        assert self.model_path is not None
        if not self.model_path.is_file():
            raise ProtocolError(
                ErrorCode.TOOL_FAILURE,
                f"The local model file {self.model_path} does not exist. Set config "
                "'model_path' to an existing .gguf file, or leave it unset and set 'model' to "
                f"one Handoff ships ({', '.join(SHIPPED_MODELS)}).",
                details={"model_path": str(self.model_path)})
        return self.model_path

    def _resolve_and_load(self) -> _LoadedModel:
        chat_format = self.model.chat_format if self.model is not None else None
        return _load(self._resolved_path(), self.n_ctx, self.n_threads, chat_format)

    async def load(self) -> float:
        """Load (or reuse) the model; returns how long the load took, in seconds."""
        loaded = await asyncio.to_thread(self._resolve_and_load)
        return loaded.load_seconds

    async def complete(self, messages: list[Message], tools: list[ToolSchema], *,
                       on_text: TextCallback | None = None,
                       tool_choice: str | None = None) -> ModelTurn:
        if tool_choice is not None:
            # decoding constrained to the one tool: the answer cannot be anything but its call
            tools = [tool for tool in tools if tool["name"] == tool_choice] or tools
        tools = [tool for tool in tools if tool["name"] not in NOT_OFFERED] or tools
        loaded = await asyncio.to_thread(self._resolve_and_load)
        llama = loaded.llama

        def count_tokens(text: str) -> int:
            return len(llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))

        chat = to_chat_messages(messages, tools)
        examples = sum(1 for m in messages if m.get("example") and m.get("role") == "assistant")
        chat = fit_to_context(chat, count_tokens, self.n_ctx - self.max_tokens - _PROMPT_MARGIN,
                              examples=examples)
        if self.model is not None and not self.model.system_role:
            chat = fold_system_into_user(chat)
        request: dict[str, Any] = {"messages": chat, "max_tokens": self.max_tokens,
                                   "temperature": self.temperature, "stream": True}
        if self.seed is not None:
            request["seed"] = self.seed
        if tools:
            request["response_format"] = {"type": "json_object", "schema": answer_schema(tools)}

        generation = await self._generate(loaded, request, on_text)
        turn = ModelTurn(text=generation.text, input_tokens=generation.input_tokens,
                         output_tokens=generation.output_tokens, model=self.model_name,
                         finish_reason=generation.finish_reason)
        if tools:
            turn.tool_calls = [self._tool_call(generation, tools)]
            turn.text = ""
            turn.finish_reason = "tool_calls"
        return turn

    def _tool_call(self, generation: _Generation, tools: list[ToolSchema]) -> ToolCall:
        try:
            candidates: Iterable[Any] = [json.loads(generation.text)]
        except json.JSONDecodeError:
            # Cut short: the longest complete-member prefix that is still a valid call.
            candidates = closed_prefixes(generation.text)
        answer: Any = None
        tool: ToolSchema | None = None
        problems: list[str] = []
        for answer in islice(candidates, 200):
            tool = next((t for t in tools if isinstance(answer, dict)
                         and t["name"] == answer.get("name")), None)
            problems = [] if tool is None else _argument_problems(tool, answer.get("arguments"))
            if tool is not None and not problems:
                break
        if tool is None or problems:
            hint = (f" It stopped at max_tokens ({self.max_tokens}) before finishing: raise "
                    "config 'max_tokens'." if generation.finish_reason == "length" else "")
            names = sorted(t["name"] for t in tools)
            detail = f" ({problems[0]})" if problems else ""
            raise ProtocolError(
                ErrorCode.TOOL_FAILURE,
                f"The local model's answer is not a valid call of one of {names}{detail}.{hint}",
                details={"answer": generation.text[:300]})
        assert isinstance(answer, dict)
        return ToolCall(id=f"call_{uuid.uuid4().hex[:24]}", name=str(answer["name"]),
                        arguments=dict(answer["arguments"]))

    async def _generate(self, loaded: _LoadedModel, request: dict[str, Any],
                        on_text: TextCallback | None) -> _Generation:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        cancel = threading.Event()

        def send(kind: str, value: Any) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, (kind, value))
            except RuntimeError:
                cancel.set()  # the loop is gone: nobody is listening any more

        def work() -> None:
            try:
                send("done", _run_generation(loaded, request, cancel,
                                             lambda piece: send("text", piece)))
            except ProtocolError as exc:
                send("error", exc)
            except Exception as exc:
                send("error", ProtocolError(ErrorCode.TOOL_FAILURE,
                                            f"The local model failed: {exc}"))

        # A dedicated thread rather than the default executor: a generation waiting for the
        # model lock must not hold one of the few shared executor workers.
        threading.Thread(target=work, name=GENERATION_THREAD, daemon=True).start()
        try:
            while True:
                kind, value = await queue.get()
                if kind == "text":
                    if on_text is not None:
                        await on_text(value)
                elif kind == "done":
                    result: _Generation = value
                    return result
                else:
                    raise value
        finally:
            # Reached on success, error and cancellation alike; stops a generation that is
            # still running (cancelled coroutine) within one token.
            cancel.set()


def _run_generation(loaded: _LoadedModel, request: dict[str, Any], cancel: threading.Event,
                    emit: Any) -> _Generation:
    """Runs in the generation thread: waits for the model, streams, stops when cancelled."""
    while not loaded.generate_lock.acquire(timeout=0.05):
        if cancel.is_set():
            return _Generation(finish_reason="cancelled")
    try:
        if cancel.is_set():
            return _Generation(finish_reason="cancelled")
        started = time.perf_counter()
        result = _Generation()
        parts: list[str] = []
        try:
            chunks = loaded.llama.create_chat_completion(**request)
        except ValueError as exc:
            raise ProtocolError(ErrorCode.TOOL_FAILURE,
                                f"The local model refused the request: {exc}") from None
        guard = RepeatedKeyGuard() if "response_format" in request else None
        try:
            for chunk in chunks:
                if cancel.is_set():
                    result.finish_reason = "cancelled"
                    break
                choice = chunk["choices"][0]
                piece = choice.get("delta", {}).get("content")
                if piece:
                    parts.append(piece)
                    result.output_tokens += 1
                    emit(piece)
                    if guard is not None and guard.feed(piece):
                        result.finish_reason = "stop"
                        break
                if choice.get("finish_reason"):
                    result.finish_reason = choice["finish_reason"]
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()  # ends llama.cpp's token loop at once if we broke out early
        result.text = "".join(parts)
        # n_tokens counts what the context evaluated: the prompt plus every generated token
        # but the last (a token is evaluated only when the next one is asked for).
        evaluated_output = max(0, result.output_tokens - 1)
        result.input_tokens = max(0, int(loaded.llama.n_tokens) - evaluated_output)
        result.seconds = time.perf_counter() - started
        return result
    finally:
        loaded.generate_lock.release()
