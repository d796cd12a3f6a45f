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
     "temperature": X, "seed": N | null, "lazy_grammar": bool (default true)}
    {"op": "load", "id": N, "model": MODEL}
    {"op": "cancel", "id": N}

    MODEL = {"path": str, "n_ctx": N, "n_threads": N | null, "chat_format": str | null}

and answers leave on the protocol pipe (the process's original stdout; fd 1 is pointed at
stderr so that nothing native can write into the protocol)::

    {"id": N, "event": "text", "text": "..."}            streamed pieces of a generation
    {"id": N, "event": "done", "result": {...}}          a generation's figures, or a load's
    {"id": N, "event": "error", "message": "..."}        the request failed; the host lives on

The host exits when stdin closes (its parent is gone, however it went), so it never
outlives the process that started it.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

CANCEL_POLL_S = 0.05


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


# --- lazy grammar: sample first, check only the sampled token -----------------------------

class LazyGrammar:
    """Holds greedy decoding to a GBNF grammar, checking the grammar lazily.

    llama-cpp-python applies a grammar to every token of the vocabulary at every step:
    262,144 candidates for Gemma 3, which took its generation from about 48 tokens/s to 15.
    This logits processor takes the most likely token first and asks the grammar about
    that one token only, then about the next likeliest ones; only when the grammar refuses
    them all is the full vocabulary masked and the best allowed token taken (llama.cpp's
    own common sampler resamples the same way). The answer is the token greedy decoding
    under the full mask would pick: the likeliest one the grammar allows. Used at temperature 0,
    the adapter's default; sampled decoding keeps llama-cpp-python's full grammar.
    """

    def __init__(self, llama: Any, gbnf: str) -> None:
        import llama_cpp.llama_cpp as low_level
        import numpy as np

        self._low = low_level
        self._np = np
        vocab = low_level.llama_model_get_vocab(llama.model)
        self._sampler = low_level.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"),
                                                             b"root")
        if not self._sampler:
            raise ValueError("the answer's JSON schema did not make a valid grammar")
        self._one: Any = low_level.llama_token_data()
        self._one_array = low_level.llama_token_data_array(
            data=ctypes.pointer(self._one), size=1, selected=-1, sorted=False)
        self._buffer: Any = None
        self.failure: Exception | None = None
        self.full_masks = 0  # steps that needed the whole vocabulary (for the figures)

    # Candidates the grammar is asked about, as one batch, when it refuses the likeliest
    # token: a const string the model would not write (a tool's name) needs more than a
    # few. Gemma 3 270M, one constrained answer: 18 whole-vocabulary masks with none, 5
    # with 32 candidates, 0-1 with 2048 (each mask of 262,144 tokens costs ~40 ms).
    LIKELIEST = 2048

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        # llama-cpp-python calls this from a ctypes callback, where an exception is printed
        # and dropped and decoding goes on unconstrained: keep it, end the answer, raise it
        # afterwards (:meth:`check`).
        if self.failure is not None:
            return scores
        try:
            return self._constrain(scores)
        except Exception as exc:
            self.failure = exc
            return scores

    def check(self) -> None:
        if self.failure is not None:
            raise RuntimeError(f"the grammar check failed: {self.failure}") from self.failure

    def _constrain(self, scores: Any) -> Any:
        np = self._np
        token = int(np.argmax(scores))
        if not self._allows(token, float(scores[token])):
            likeliest = np.argpartition(scores, -self.LIKELIEST)[-self.LIKELIEST:]
            found = self._best_allowed(scores, likeliest)
            if found is None:
                found = self._best_allowed(scores, np.arange(len(scores)))
                self.full_masks += 1
            assert found is not None, "the grammar allows no token at all"
            token = found
        self._low.llama_sampler_accept(self._sampler, token)
        chosen = np.full_like(scores, -math.inf)
        chosen[token] = 0.0
        return chosen

    def _allows(self, token: int, logit: float) -> bool:
        self._one.id, self._one.logit, self._one.p = token, logit, 0.0
        self._one_array.size, self._one_array.selected = 1, -1
        self._low.llama_sampler_apply(self._sampler, ctypes.byref(self._one_array))
        return self._one_array.size == 1 and not math.isinf(self._one.logit)

    def _best_allowed(self, scores: Any, candidates: Any) -> int | None:
        """The likeliest of ``candidates`` (token ids) that the grammar allows, or None."""
        np, low = self._np, self._low
        size = len(candidates)
        if self._buffer is None or len(self._buffer) < size:
            self._buffer = (low.llama_token_data * len(scores))()
        view = np.ctypeslib.as_array(self._buffer).view(
            np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True))
        view = view.reshape(-1)[:size]
        view["id"] = candidates
        view["logit"] = scores[candidates]
        view["p"] = 0.0
        array = low.llama_token_data_array(data=self._buffer, size=size, selected=-1,
                                           sorted=False)
        low.llama_sampler_apply(self._sampler, ctypes.byref(array))
        kept = view[: array.size]
        allowed = kept[~np.isinf(kept["logit"])]
        if not len(allowed):
            return None
        return int(allowed["id"][int(np.argmax(allowed["logit"]))])

    def close(self) -> None:
        if self._sampler:
            self._low.llama_sampler_free(self._sampler)
            self._sampler = None


# --- generations ---------------------------------------------------------------------------

@dataclass(slots=True)
class Generation:
    """A generation's figures, as sent back in its ``done`` event."""

    text: str = ""
    output_tokens: int = 0
    input_tokens: int = 0
    finish_reason: str = "stop"
    full_grammar_masks: int = 0


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


def _generate_locked(loaded: LoadedModel, job: dict[str, Any], cancel: threading.Event,
                     emit: Callable[[str], None]) -> Generation:
    llama = loaded.llama

    def count_tokens(text: str) -> int:
        return len(llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    chat = fit_to_context(job["chat"], count_tokens, int(job["prompt_budget"]),
                          examples=int(job.get("examples") or 0))
    if job.get("fold_system"):
        chat = fold_system_into_user(chat)
    request: dict[str, Any] = {"messages": chat, "max_tokens": int(job["max_tokens"]),
                               "temperature": float(job.get("temperature") or 0.0),
                               "stream": True}
    if job.get("seed") is not None:
        request["seed"] = int(job["seed"])
    schema = job.get("schema")
    lazy: LazyGrammar | None = None
    if schema is not None and request["temperature"] == 0.0 and job.get("lazy_grammar", True):
        from llama_cpp.llama_grammar import json_schema_to_gbnf

        lazy = LazyGrammar(llama, json_schema_to_gbnf(json.dumps(schema)))
        request["logits_processor"] = [lazy]
    elif schema is not None:
        request["response_format"] = {"type": "json_object", "schema": schema}
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
    return result


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
            loaded = self._models.get(key)
            if loaded is None:
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
