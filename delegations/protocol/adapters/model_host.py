"""The local model's own process: loads GGUF models with llama-cpp-python and answers chat
completions for the ``local`` adapter (:mod:`.local_host` starts and talks to it).

llama.cpp is native code and can crash (a segfault in a CPU kernel, an abort, running out
of memory); in its own process such a crash fails only the calls it was answering, never
the web server, the worker or other runs. This file is run as a script by path, not as a
package module, and imports only the standard library and llama-cpp-python, so a host is
up in a fraction of a second (the protocol package and its pydantic models stay out).

The wire: one JSON object per line. Requests arrive on stdin::

    {"op": "generate", "id": N, "model": MODEL, "chat": [...], "prompt_budget": N,
     "examples": N, "fold_system": bool, "schema": {...} | null, "max_tokens": N,
     "temperature": X, "seed": N | null, "lazy_grammar": bool (default true),
     "quotes": [[PLACEHOLDER, TEXT, MAY_BE_EMPTY], ...], "labels": {FIELD: [VALUE, ...]},
     "label_prompts": {FIELD: {"prompt": TEXT, "content_free": TEXT}}, "calibration_weight": X}
    {"op": "load", "id": N, "model": MODEL}
    {"op": "cancel", "id": N}

    MODEL = {"path": str, "n_ctx": N, "n_threads": N | null, "chat_format": str | null}

``quotes`` splice a quote automaton into the schema's grammar where a field holds its
placeholder const (:mod:`.quote_grammar`). ``labels`` are the output fields whose values
are scored before the answer is decoded, each on its label prompt and calibrated against
the content-free one (:mod:`.label_scoring`, :mod:`.label_choice`), and kept to the value
chosen while the answer is written. Labels apply to greedy decoding (temperature 0); the
``done`` result then carries ``labels``: per field, the value chosen, its calibrated
probability, and every value's calibrated, raw and content-free probability.

and answers leave on the protocol pipe (the process's original stdout; fd 1 is pointed at
stderr so that nothing native can write into the protocol)::

    {"id": N, "event": "text", "text": "..."}            streamed pieces of a generation
    {"id": N, "event": "done", "result": {...}}          a generation's figures, or a load's
    {"id": N, "event": "error", "message": "..."}        the request failed; the host lives on

The host exits when stdin closes (its parent is gone, however it went), so it never
outlives the process that started it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

if __package__:
    from .label_choice import JsonPath, LabelChooser, LabelScore, choose
    from .label_scoring import LabelScorer
    from .lazy_grammar import LazyGrammar
    from .quote_grammar import gbnf_literal, splice_quotes
else:  # run by path as the host's program: this folder is on sys.path
    from label_choice import JsonPath, LabelChooser, LabelScore, choose  # type: ignore[import-not-found,no-redef]
    from label_scoring import LabelScorer  # type: ignore[import-not-found,no-redef]
    from lazy_grammar import LazyGrammar  # type: ignore[import-not-found,no-redef]
    from quote_grammar import gbnf_literal, splice_quotes  # type: ignore[import-not-found,no-redef]

CANCEL_POLL_S = 0.05
MAX_LOADED_MODELS = 2   # the two shipped models side by side (make eval runs both)


# --- what runs next to llama.cpp: prompt shaping -------------------------------------------

def fit_to_context(chat: list[dict[str, str]], count_tokens: Callable[[str], int], budget: int,
                   *, examples: int = 0) -> list[dict[str, str]]:
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


class RepeatedKeyGuard:
    """Watches JSON being written and reports the moment an object repeats a key.

    A repeated key is how a tiny model's loop shows (``"type": "json", "data": ...,
    "type": "json", ...``); generation stops there and the answer is closed after its last
    complete member instead of burning the rest of max_tokens. It follows the JSON with the
    label chooser's :class:`JsonPath`, which keeps the keys each open object has had.
    """

    def __init__(self) -> None:
        self._path = JsonPath()

    def feed(self, piece: str) -> bool:
        """True once a key repeats within one object."""
        self._path.feed(piece)
        return self._path.repeated_key


# --- loading models safely on every CPU ----------------------------------------------------

def system_info() -> str:
    """llama.cpp's report of the CPU features its kernels use (AVX2, AVX512, AMX ...)."""
    import llama_cpp

    return bytes(llama_cpp.llama_print_system_info()).decode("utf-8", "replace").strip()


def has_amx_kernels(info: str) -> bool:
    """Whether this build of llama.cpp runs its AMX kernels (``AMX_INT8 = 1``)."""
    return any(part.strip().replace(" ", "") == "AMX_INT8=1" for part in info.split("|"))


def extra_buffer_types_allowed(info: str) -> bool:
    """Whether models may be loaded with llama.cpp's extra buffer types (weight repacking).

    The AMX kernels live there, and on an Intel Xeon with AMX they segfault on the first
    decode of both shipped models (``ggml_backend_amx_mul_mat``). ``make install`` builds
    llama.cpp without them (deploy/llama_cmake_args.sh); a build that has them anyway (a
    wheel cached from a native build, or one made by hand) loads models without the extra
    buffer types, which sidesteps the crash at the cost of repacking (see local_host's
    figures). Elsewhere repacking stays on.
    """
    return not has_amx_kernels(info)


def default_threads() -> int:
    """Every core this process may use, for prompt evaluation and generation alike.

    The host is where a worker's heavy work happens, and generations take turns, so the
    cores are usually its own. Gemma 3 270M on 2 free cores here: 40-45 tokens/s and a
    600-token prompt in 0.6-0.8 s with 2 threads, 22-25 tokens/s and 1.1-1.2 s with 1;
    ``make eval``'s median per case 1.74 s against 3.14 s. With the other core busy it
    turns round (2 threads 13-16 tokens/s, 1 thread 24: llama.cpp's OpenMP workers spin
    while they wait), so a machine shared with other work, or several workers on few
    cores, should set the adapter's ``n_threads`` to 1.
    """
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else os.cpu_count() or 1)


@dataclass(slots=True)
class LoadedModel:
    llama: Any
    load_seconds: float
    extra_buffer_types: bool
    lock: threading.Lock = field(default_factory=threading.Lock)
    scorer: LabelScorer | None = None   # made on the first labels to score

    def label_scorer(self) -> LabelScorer:
        if self.scorer is None:
            self.scorer = LabelScorer(self.llama, self.llama.n_threads)
        return self.scorer


def load_model(model: dict[str, Any], info: str) -> LoadedModel:
    """A Llama for ``model`` (see the wire format), loaded with the safe setting for this
    CPU in force."""
    import llama_cpp.llama_cpp as low_level
    from llama_cpp import Llama

    path = str(model["path"])
    if not os.path.isfile(path):
        raise ValueError(f"the model file {path} does not exist")
    extra = extra_buffer_types_allowed(info)
    threads = model.get("n_threads") or default_threads()
    started = time.perf_counter()
    # Llama() takes no use_extra_bufts argument: it builds its model parameters from
    # llama_model_default_params() inside __init__, so the default is narrowed for the one
    # load. A host loads its models one at a time (the caller holds MODELS_LOCK).
    defaults = low_level.llama_model_default_params

    def safe_defaults() -> Any:
        params = defaults()
        params.use_extra_bufts = extra
        return params

    low_level.llama_model_default_params = safe_defaults
    try:
        llama = Llama(model_path=path, n_ctx=int(model["n_ctx"]), n_threads=threads,
                      n_threads_batch=threads, chat_format=model.get("chat_format"),
                      verbose=False)
    finally:
        low_level.llama_model_default_params = defaults
    return LoadedModel(llama, time.perf_counter() - started, extra)


# --- generations ---------------------------------------------------------------------------

@dataclass(slots=True)
class Generation:
    """A generation's figures, as sent back in its ``done`` event."""

    text: str = ""
    output_tokens: int = 0
    input_tokens: int = 0
    finish_reason: str = "stop"
    full_grammar_masks: int = 0
    labels: dict[str, Any] = field(default_factory=dict)   # field -> its scored value


def generate(loaded: LoadedModel, job: dict[str, Any], cancel: threading.Event,
             emit: Callable[[str], None]) -> Generation:
    """One chat completion on a loaded model; waits for the model, streams, stops when
    ``cancel`` is set."""
    while not loaded.lock.acquire(timeout=CANCEL_POLL_S):
        if cancel.is_set():
            return Generation(finish_reason="cancelled")
    try:
        if cancel.is_set():
            return Generation(finish_reason="cancelled")
        return _generate_locked(loaded, job, cancel, emit)
    finally:
        loaded.lock.release()


def grammar_for(schema: dict[str, Any], quotes: list[Any]) -> str:
    """The GBNF grammar of ``schema``, its quote placeholders replaced by their automata.

    llama-cpp-python's converter (its ``json_schema_to_gbnf``, by its public steps) with
    two literals written right: its literal escapes quote marks but not backslashes, so a
    value holding a quote mark (a span of a passage that quotes a sign, as JSON
    ``"said \\"Open\\""``) made a grammar that does not parse, and every such run failed; and
    a value is written as the answer writes it (``ensure_ascii=False``, as the label
    chooser steers it), not with ``\\u`` escapes the model would have to spell."""
    from llama_cpp.llama_grammar import SchemaConverter

    class Converter(SchemaConverter):  # type: ignore[misc]
        def _format_literal(self, literal: str) -> str:
            return gbnf_literal(literal)

        def _generate_constant_rule(self, value: Any) -> str:
            return gbnf_literal(json.dumps(value, ensure_ascii=False))

    converter = Converter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    converter.visit(converter.resolve_refs(schema, "stdin"), "")
    gbnf = converter.format_grammar()
    return splice_quotes(gbnf, [(str(marker), str(text), bool(empty)) for marker, text, empty in quotes])


def _chat(llama: Any, job: dict[str, Any]) -> list[dict[str, str]]:
    def count_tokens(text: str) -> int:
        return len(llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    chat = fit_to_context(job["chat"], count_tokens, int(job["prompt_budget"]),
                          examples=int(job.get("examples") or 0))
    return fold_system_into_user(chat) if job.get("fold_system") else chat


def _generate_locked(loaded: LoadedModel, job: dict[str, Any], cancel: threading.Event,
                     emit: Callable[[str], None]) -> Generation:
    llama = loaded.llama
    request: dict[str, Any] = {"messages": _chat(llama, job),
                               "max_tokens": int(job["max_tokens"]),
                               "temperature": float(job.get("temperature") or 0.0),
                               "stream": True}
    if job.get("seed") is not None:
        request["seed"] = int(job["seed"])
    schema = job.get("schema")
    quotes = job.get("quotes") or []
    labels = job.get("labels") or {}
    lazy: LazyGrammar | None = None
    chosen: dict[str, LabelScore] = {}
    if schema is not None and request["temperature"] == 0.0 and job.get("lazy_grammar", True):
        if labels:
            chosen = score_labels(loaded, labels, job.get("label_prompts") or {},
                                  float(job.get("calibration_weight", 1.0)))
        lazy = LazyGrammar(llama, grammar_for(schema, quotes), LabelChooser(chosen) if chosen else None)
        request["logits_processor"] = [lazy]
    elif schema is not None:
        from llama_cpp.llama_grammar import LlamaGrammar

        request["grammar"] = LlamaGrammar.from_string(grammar_for(schema, quotes), verbose=False)

    def stopped() -> bool:
        return cancel.is_set() or (lazy is not None and lazy.failure is not None)

    try:
        result = _stream(llama, request, stopped, emit, guard=schema is not None)
    finally:
        if lazy is not None:
            lazy.close()
    if lazy is not None:
        lazy.check()
        result.full_grammar_masks = lazy.full_masks
    result.labels = {name: score.as_dict(labels[name]) for name, score in chosen.items()}
    return result


def score_labels(loaded: LoadedModel, labels: dict[str, list[Any]], prompts: dict[str, dict[str, str]],
                 weight: float) -> dict[str, LabelScore]:
    """Each label's value chosen on its prompt, calibrated against the content-free one
    (see the module docstring). The caller holds the model's lock."""
    scorer = loaded.label_scorer()
    chosen = {}
    for name, values in labels.items():
        prompt = prompts.get(name)
        if not prompt or len(values) < 2:
            continue
        raw = scorer.probabilities(prompt["prompt"], values)
        prior = scorer.prior(prompt["content_free"], values) if weight and prompt.get("content_free") else None
        chosen[name] = choose(values, raw, prior, weight)
    return chosen


def _stream(llama: Any, request: dict[str, Any], stopped: Callable[[], bool],
            emit: Callable[[str], None], *, guard: bool) -> Generation:
    result = Generation()
    parts: list[str] = []
    chunks: Iterator[Any] = llama.create_chat_completion(**request)
    repeated = RepeatedKeyGuard() if guard else None
    try:
        for chunk in chunks:
            if stopped():
                result.finish_reason = "cancelled"
                break
            choice = chunk["choices"][0]
            piece = choice.get("delta", {}).get("content")
            if piece:
                parts.append(piece)
                result.output_tokens += 1
                emit(piece)
                if repeated is not None and repeated.feed(piece):
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
    result.input_tokens = max(0, int(llama.n_tokens) - evaluated_output)
    return result


# --- the process ---------------------------------------------------------------------------

class Host:
    """The request loop: one thread per request, one generation at a time per model."""

    def __init__(self, out: Any) -> None:
        self._out = out
        self._write_lock = threading.Lock()
        self._models: dict[str, LoadedModel] = {}
        self._models_lock = threading.Lock()
        self._cancels: dict[int, threading.Event] = {}
        self._info: str | None = None

    def send(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, ensure_ascii=False) + "\n"
        with self._write_lock:
            self._out.write(line)
            self._out.flush()

    def serve(self, lines: Iterator[str]) -> None:
        for line in lines:
            try:
                request = json.loads(line)
            except json.JSONDecodeError:
                continue  # the parent writes whole lines; a torn one has no id to answer
            if request.get("op") == "cancel":
                event = self._cancels.get(int(request.get("id", -1)))
                if event is not None:
                    event.set()
                continue
            cancel = self._cancels[int(request["id"])] = threading.Event()
            threading.Thread(target=self._answer, args=(request, cancel), daemon=True,
                             name=f"model-host-{request['id']}").start()

    def _answer(self, request: dict[str, Any], cancel: threading.Event) -> None:
        request_id = int(request["id"])
        try:
            loaded = self._loaded(request["model"])
        except Exception as exc:
            self._cancels.pop(request_id, None)
            self.send({"id": request_id, "event": "error", "stage": "load", "message": str(exc)})
            return
        try:
            if request["op"] == "load":
                self.send({"id": request_id, "event": "done", "result": {
                    "load_seconds": loaded.load_seconds, "system_info": self.info(),
                    "extra_buffer_types": loaded.extra_buffer_types}})
                return
            generation = generate(loaded, request, cancel, lambda piece: self.send(
                {"id": request_id, "event": "text", "text": piece}))
            self.send({"id": request_id, "event": "done", "result": asdict(generation)})
        except Exception as exc:
            self.send({"id": request_id, "event": "error",
                       "message": f"{type(exc).__name__}: {exc}"})
        finally:
            self._cancels.pop(request_id, None)

    def info(self) -> str:
        if self._info is None:
            self._info = system_info()
        return self._info

    def _loaded(self, model: dict[str, Any]) -> LoadedModel:
        key = json.dumps(model, sort_keys=True)
        with self._models_lock:
            loaded = self._models.pop(key, None)
            if loaded is not None:
                self._models[key] = loaded   # the most recently used last
            else:
                # one model per (file, n_ctx, n_threads) a run asks for: kept without end,
                # seven runs' settings took the host from 0.7 to 4.3 GB. The least recently
                # used is let go (a generation still on it keeps it until it ends).
                while len(self._models) >= MAX_LOADED_MODELS:
                    self._models.pop(next(iter(self._models)))
                loaded = self._models[key] = load_model(model, self.info())
                repacking = ("on" if loaded.extra_buffer_types else
                             "off (this llama.cpp build has AMX kernels, which crash)")
                print(f"handoff model host {os.getpid()}: loaded {model['path']} in "
                      f"{loaded.load_seconds:.2f} s; weight repacking {repacking}; "
                      f"llama.cpp: {self.info()}", file=sys.stderr, flush=True)
            return loaded


def main() -> None:
    # The protocol gets the original stdout; fd 1 then points at stderr, so anything
    # llama.cpp or a library prints goes to the log instead of into the protocol.
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # Ctrl+C in a terminal reaches the whole process group: the host ends when its parent
    # closes stdin, not in the middle of an answer.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    Host(protocol).serve(iter(sys.stdin.readline, ""))
    os._exit(0)  # daemon threads may be inside llama.cpp: no interpreter teardown under them


if __name__ == "__main__":
    main()
