"""Real small models in-process: a GGUF from Handoff's catalog (:mod:`.local_models`, e.g.
SmolLM2-135M-Instruct or Gemma 3 270M) or a file of your own, run by llama-cpp-python.

The embedded default adapter. Answers are constrained by a JSON schema so
that, when tools are offered, every answer is a valid call of one of them::

    {"anyOf": [{"type": "object",
                "properties": {"name": {"const": "<tool>"}, "arguments": <its parameters>},
                "required": ["name", "arguments"]}, ...]}

How a call runs:

- the model runs in its own process, the model host (:mod:`.local_host` starts it,
  :mod:`.model_host` is its program), so a native crash of llama.cpp fails only the calls
  it was answering, with ERR_TOOL_FAILURE and a message saying the run can be retried;
- the host loads each model once per (file, n_ctx, n_threads, chat format) and keeps it;
  finding the file (a catalog model is checksummed, Gemma assembled on first use) happens
  here, in a worker thread, so the event loop keeps serving;
- a model whose chat format has no system role (Gemma) gets the system text at the head
  of the first user message (``model_host.fold_system_into_user``);
- generations stream their tokens back as they come; one generation at a time per loaded
  model (llama.cpp contexts are not thread-safe), others wait their turn in the host;
- a ``tool_choice`` narrows the tools to the one named, so the schema admits only its call;
- with tools, the raw JSON is streamed to ``on_text`` so people watch it being written,
  but the returned ``ModelTurn.text`` is ``""``: the answer *is* the tool call, which is
  returned as ``tool_calls[0]`` with a generated id. Without tools the model writes plain
  text, streamed and returned as ``text``;
- cancelling the awaiting coroutine tells the host to stop; generation stops within a
  token. Prompt evaluation cannot be interrupted (llama.cpp decodes the prompt in one
  call): a few hundred new tokens take 0.3-3 s on a busy 2-core machine; a repeated prefix
  is reused from the previous call, so later turns of a run evaluate only what is new. A
  host that does not answer a cancel within ``local_host.CANCEL_GRACE_S`` is killed;
- at temperature 0 the JSON grammar is checked lazily (``lazy_grammar.LazyGrammar``: the
  greedy token first, the whole vocabulary only when the grammar refuses it);
- free-form parts of the tool schemas are tightened for the grammar (see
  :func:`bounded_schema`: flat objects, capped strings and arrays) because a 135M model
  otherwise nests ``{"data": {"data": ...`` until max_tokens; an answer still cut off by
  max_tokens, or stopped because an object repeated a key (``model_host.RepeatedKeyGuard``:
  the sign of a loop), is closed after its last complete member (:func:`close_truncated_json`)
  and must then validate against the tool's own schema, else ERR_TOOL_FAILURE;
- token usage comes from llama.cpp's context (prompt) and the tokens streamed (output);
- criteria shape decoding (``yield_control``'s ``output_shapes``, from the runner): a field
  a ``quoted_from`` criterion checks decodes as a quote of its source (a character-level
  automaton over the source text, spliced into the grammar: :mod:`.quote_grammar`), a
  ``one_of_input`` field as one of the source's values, an ``appears_in`` number as one of
  the numbers the source holds, so those criteria hold by construction and the model only
  chooses. A shape whose source is empty leaves no value to decode: when ``yield_control``
  is the only tool, the call fails with ERR_INSUFFICIENT_CONTEXT naming the input;
- labels are scored (:mod:`.label_choice`, :mod:`.label_scoring`): for each enum or boolean
  output field the host reads every allowed value's probability on the label's few-shot
  prompt (the runner builds it from the skill's worked examples and the input), calibrated
  against the same prompt with the input's values replaced by "N/A" (weighed by
  ``CALIBRATION_WEIGHT``), and the answer is decoded with the likeliest calibrated value;
  the scores come back in ``ModelTurn.label_scores``. Only at temperature 0.

Config (checked when the adapter is built)::

    model        a catalog model by name: smollm2-135m or gemma3-270m
                 (default: local_models.DEFAULT_LOCAL_MODEL)
    model_path   a .gguf file of your own instead; wins over model, not checksummed
    n_ctx        context window in tokens, default 4096 (SmolLM2 supports 8192, Gemma 3 32768)
    temperature  default 0 (greedy: an answer held to a schema gains nothing from sampling,
                 and the same delegation gets the same answer)
    max_tokens   cap on generated tokens, default 512
    seed         sampling seed (default: random per call)
    n_threads    CPU threads for prompt and generation (default: every core the host may use;
                 1 on a machine shared with other work, see model_host.default_threads)

A missing or damaged model file or a missing llama-cpp-python is reported when a call is
made, as ``ProtocolError(ERR_TOOL_FAILURE)`` saying what to install or repair.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import uuid
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any, ClassVar

from ..errors import ErrorCode, ProtocolError
from ..schemas import validate_instance
from ..tools import YIELD_CONTROL
from . import config_checks as check
from .base import Message, ModelAdapter, ModelTurn, TextCallback, ToolCall, ToolSchema, config_error
from .local_host import model_host
from .local_models import DEFAULT_LOCAL_MODEL, SHIPPED_MODELS, ShippedModel, locate
from .quote_grammar import placeholder
from .tool_format import content_text, output_shapes, parameters_schema, tool_description

_CONFIG_KEYS = ("model", "model_path", "n_ctx", "temperature", "max_tokens", "seed", "n_threads")
INSTALL_HINT = "pip install 'llama-cpp-python>=0.3.8'"
_PROMPT_MARGIN = 64  # tokens the chat template and our tool list add around messages
# How much of the content-free prior a label's probability is divided by (0: none, 1: the
# full correction of "Calibrate Before Use"); chosen on make eval, see the README's
# local-model section.
CALIBRATION_WEIGHT = 1.0


def llama_cpp_missing() -> str | None:
    """Why llama-cpp-python cannot be used here, or None when it is installed."""
    if importlib.util.find_spec("llama_cpp") is None:
        return f"llama-cpp-python is not installed ({INSTALL_HINT})"
    return None


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


Shapes = dict[str, Any]   # criteria.shaping.OutputShapes.as_dict()


def shaped_parameters(parameters: dict[str, Any],
                      shapes: Shapes) -> tuple[dict[str, Any], list[list[Any]]]:
    """``yield_control``'s model parameters with the fields the criteria shape held to them,
    and the quotes to splice in (placeholder, text, may be empty). A quote field holds a
    placeholder const until the host puts its automaton there."""
    union = parameters.get("anyOf")
    options: list[dict[str, Any]] = union if isinstance(union, list) else [parameters]
    quotes: list[list[Any]] = []
    shaped_options = []
    for option in options:
        payload = (option.get("properties") or {}).get("output_payload")
        fields = payload.get("properties") if isinstance(payload, dict) else None
        if not isinstance(payload, dict) or not isinstance(fields, dict) \
                or option["properties"].get("status", {}).get("const") == "FAILURE":
            shaped_options.append(option)
            continue
        fields = dict(fields)
        for name, quote in (shapes.get("quotes") or {}).items():
            if name in fields:
                marker = placeholder(len(quotes))
                quotes.append([marker, quote["text"], bool(quote.get("may_be_empty"))])
                fields[name] = {"const": marker}
        for kind in ("choices", "numbers", "spans"):
            for name, values in (shapes.get(kind) or {}).items():
                if name in fields:
                    fields[name] = {"enum": list(values)}
        properties = {**option["properties"], "output_payload": {**payload, "properties": fields}}
        shaped_options.append({**option, "properties": properties})
    shaped = {**parameters, "anyOf": shaped_options} if "anyOf" in parameters else shaped_options[0]
    return shaped, quotes


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
    schema, _ = shaped_answer(tools)
    return schema


def shaped_answer(tools: list[ToolSchema]) -> tuple[dict[str, Any], list[list[Any]]]:
    """:func:`answer_schema` with ``yield_control``'s output fields shaped by its
    ``output_shapes``, and the quotes to splice into its grammar (see
    :func:`shaped_parameters`)."""
    options: list[dict[str, Any]] = []
    quotes: list[list[Any]] = []
    for tool in tools:
        parameters = model_parameters(tool)
        shapes = tool.get("output_shapes")
        if shapes and tool["name"] == YIELD_CONTROL:
            parameters, quotes = shaped_parameters(parameters, shapes)
        options.append({"type": "object",
                        "properties": {"name": {"const": tool["name"]},
                                       "arguments": bounded_schema(parameters)},
                        "required": ["name", "arguments"]})
    return (options[0] if len(options) == 1 else {"anyOf": options}), quotes


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


def _argument_problems(tool: ToolSchema, arguments: Any) -> list[str]:
    if not isinstance(arguments, dict):
        return ["arguments is not an object"]
    return [f"{issue.field or 'arguments'}: {issue.message}"
            for issue in validate_instance(parameters_schema(tool), arguments)][:3]


# --- the adapter ---------------------------------------------------------------------------

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
        self.system_info = ""  # llama.cpp's CPU features, once load() has run
        self._spec: dict[str, Any] | None = None

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

    def _model_spec(self) -> dict[str, Any]:
        """What the host loads: the checked model file and how to load it. Reads (and may
        assemble) the model, so it runs in a worker thread."""
        return {"path": str(self._resolved_path()), "n_ctx": self.n_ctx,
                "n_threads": self.n_threads,
                "chat_format": self.model.chat_format if self.model is not None else None}

    async def _host_call(self, request: dict[str, Any],
                         on_text: TextCallback | None = None) -> dict[str, Any]:
        if self._spec is None:  # found and checked once per adapter, off the loop
            self._spec = await asyncio.to_thread(self._model_spec)
        spec = self._spec
        try:
            return await model_host().call({**request, "model": spec}, on_text)
        except ProtocolError as exc:
            if exc.details.get("stage") != "load":
                raise
            raise ProtocolError(
                ErrorCode.TOOL_FAILURE,
                f"llama.cpp could not load the model file {spec['path']}: {exc.message}. "
                f"Check that it is a GGUF model file, or set config 'model' to one Handoff "
                f"ships ({', '.join(SHIPPED_MODELS)}).",
                details={"model_path": spec["path"]}) from None

    async def load(self) -> float:
        """Load (or reuse) the model in the host; returns how long the load took, in
        seconds. llama.cpp's report of the CPU features it uses goes to the log."""
        loaded = await self._host_call({"op": "load"})
        self.system_info = str(loaded.get("system_info", ""))
        return float(loaded.get("load_seconds", 0.0))

    async def complete(self, messages: list[Message], tools: list[ToolSchema], *,
                       on_text: TextCallback | None = None,
                       tool_choice: str | None = None) -> ModelTurn:
        if tool_choice is not None:
            # decoding constrained to the one tool: the answer cannot be anything but its call
            tools = [tool for tool in tools if tool["name"] == tool_choice] or tools
        tools = [tool for tool in tools if tool["name"] not in NOT_OFFERED] or tools
        examples = sum(1 for m in messages if m.get("example") and m.get("role") == "assistant")
        chat = to_chat_messages(messages, tools)
        request: dict[str, Any] = {
            "op": "generate", "chat": chat,
            "prompt_budget": self.n_ctx - self.max_tokens - _PROMPT_MARGIN,
            "examples": examples,
            "fold_system": self.model is not None and not self.model.system_role,
            "schema": None,
            "max_tokens": self.max_tokens, "temperature": self.temperature, "seed": self.seed,
        }
        if tools:
            request.update(self._shaped(tools))
        generation = await self._host_call(request, on_text)
        turn = ModelTurn(text=str(generation.get("text", "")),
                         input_tokens=int(generation.get("input_tokens", 0)),
                         output_tokens=int(generation.get("output_tokens", 0)),
                         model=self.model_name,
                         finish_reason=str(generation.get("finish_reason", "stop")),
                         label_scores=dict(generation.get("labels") or {}))
        if tools:
            turn.tool_calls = [self._tool_call(turn, tools)]
            turn.text = ""
            turn.finish_reason = "tool_calls"
        return turn

    def _shaped(self, tools: list[ToolSchema]) -> dict[str, Any]:
        """The request's schema, quotes and labels for ``tools`` (see the module
        docstring); raises ERR_INSUFFICIENT_CONTEXT when the only tool is
        ``yield_control`` and a criterion's source is empty."""
        schema, quotes = shaped_answer(tools)
        shapes = output_shapes(tools)
        if not shapes:
            return {"schema": schema}
        empty = shapes.get("empty") or []
        if empty and len(tools) == 1:
            sources = list(dict.fromkeys(str(item["source"]) for item in empty))
            named, fields = ", ".join(sources), ", ".join(dict.fromkeys(str(item["field"]) for item in empty))
            raise ProtocolError(
                ErrorCode.INSUFFICIENT_CONTEXT,
                f"The input has no {named} (or it is empty), and the success criteria say "
                f"{fields} must come from it: no answer can meet them. Give {named} and run "
                "again.", details={"missing_inputs": sources})
        return {"schema": schema, "quotes": quotes, "labels": shapes.get("labels") or {},
                "label_prompts": shapes.get("label_prompts") or {},
                "calibration_weight": CALIBRATION_WEIGHT}

    def _tool_call(self, generation: ModelTurn, tools: list[ToolSchema]) -> ToolCall:
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
