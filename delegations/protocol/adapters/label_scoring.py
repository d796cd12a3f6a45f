"""Each label value's probability, read from the model on the label's few-shot prompt.

Runs in the model host (:mod:`.model_host` loads it beside itself: it is run by path, not as
part of the package). A :class:`LabelScorer` holds a second, small llama.cpp context on the
weights the host already loaded (llama.cpp's public ``llama_init_from_model``: no second
copy of the weights), so scoring never evicts the chat prompt that the next answer reuses
from the main context's cache, and the label prompts' shared head (the worked examples) is
reused from its own cache from one run to the next.

A value's probability is the product of its tokens' probabilities after the prompt (`` ``
and the value as :func:`~.label_choice.verbal` writes it), renormalised over the values.
The prompt is decoded once (what the context already holds of it is reused) and each
value's tokens after it in one batch, whose rows of logits give every token's probability
at once: a span label (a sentence, a name) has ten or more tokens, and decoding them one
call each made scoring an answer's candidates take most of a second on 2 cores.
The content-free prompt's probabilities are remembered per prompt: a skill's prior is
computed once per host.
"""

from __future__ import annotations

import ctypes
import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

if __package__:
    from .label_choice import literal, verbal
else:  # the model host's program: this folder is on sys.path
    from label_choice import literal, verbal  # type: ignore[import-not-found,no-redef]

SCORER_N_CTX = 2048   # tokens a label prompt may take (its inputs are cut to fit)
BATCH = 512
PRIORS_KEPT = 256


class LabelScorer:
    """Scores label values on a small context of its own (see the module docstring)."""

    def __init__(self, llama: Any, n_threads: int) -> None:
        import llama_cpp.llama_cpp as low_level
        import numpy as np

        self._low, self._np, self._llama = low_level, np, llama
        params = low_level.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = SCORER_N_CTX, BATCH, BATCH
        params.n_threads = params.n_threads_batch = n_threads
        self._ctx = low_level.llama_init_from_model(llama.model, params)
        if not self._ctx:
            raise RuntimeError("llama.cpp could not make a context to score labels on")
        self._batch = low_level.llama_batch_init(BATCH, 0, 1)
        self._held: list[int] = []        # the tokens the context holds, in order
        self._logits: Any = None          # after the last of them
        self._n_vocab = int(llama.n_vocab())
        self._priors: OrderedDict[tuple[str, tuple[str, ...]], dict[str, float]] = OrderedDict()

    def probabilities(self, prompt: str, values: Sequence[Any]) -> dict[str, float]:
        """Each value's probability after ``prompt``, by :func:`literal`, summing to 1."""
        spoken = {literal(value): self._tokens(" " + verbal(value), bos=False) for value in values}
        longest = max((len(tokens) for tokens in spoken.values()), default=0)
        base = self._tokens(prompt, bos=True)[-(SCORER_N_CTX - longest - 1):]
        logs = {key: self._log_probability(base, tokens) for key, tokens in spoken.items()}
        peak = max(logs.values())
        shares = {key: math.exp(log - peak) for key, log in logs.items()}
        whole = sum(shares.values())
        return {key: share / whole for key, share in shares.items()}

    def prior(self, prompt: str, values: Sequence[Any]) -> dict[str, float]:
        """:meth:`probabilities` on a content-free prompt, remembered."""
        key = (prompt, tuple(literal(value) for value in values))
        found = self._priors.get(key)
        if found is None:
            found = self._priors[key] = self.probabilities(prompt, values)
            if len(self._priors) > PRIORS_KEPT:
                self._priors.popitem(last=False)
        return found

    def _tokens(self, text: str, *, bos: bool) -> list[int]:
        return list(self._llama.tokenize(text.encode("utf-8"), add_bos=bos, special=False))

    def _log_probability(self, base: list[int], tokens: list[int]) -> float:
        """The log probability of ``tokens`` following ``base``: the logits after ``base``
        give the first; the rest come from one batch of ``tokens[:-1]``, which is then
        taken out of the context again so that it holds ``base`` for the next value."""
        rows = [self._logits_after(base)]
        if len(tokens) > 1:
            rows.extend(self._decode(tokens[:-1], len(base), every_row=True))
            low = self._low
            low.llama_memory_seq_rm(low.llama_get_memory(self._ctx), 0, len(base), -1)
        logits = self._np.stack(rows)
        peak = logits.max(axis=1, keepdims=True)
        normal = peak[:, 0] + self._np.log(self._np.exp(logits - peak).sum(axis=1))
        return float((logits[self._np.arange(len(tokens)), tokens] - normal).sum())

    def _logits_after(self, tokens: list[int]) -> Any:
        """The next-token logits after ``tokens``, decoding only what the context lacks."""
        held = self._held
        if held == tokens and self._logits is not None:
            return self._logits
        common = 0
        for mine, theirs in zip(held, tokens, strict=False):
            if mine != theirs:
                break
            common += 1
        common = min(common, len(tokens) - 1)   # the last token is decoded again for its logits
        low = self._low
        low.llama_memory_seq_rm(low.llama_get_memory(self._ctx), 0, common, -1)
        self._held, self._logits = [], None
        self._logits = self._decode(tokens[common:], common, every_row=False)[-1]
        self._held = list(tokens)
        return self._logits

    def _decode(self, tokens: list[int], start: int, *, every_row: bool) -> list[Any]:
        """Decodes ``tokens`` at positions from ``start`` on; the logits after each of them
        (``every_row``, at most BATCH tokens) or after the last."""
        if every_row and len(tokens) > BATCH:
            raise ValueError(f"a label value is scored in one batch of at most {BATCH} tokens")
        low, batch = self._low, self._batch
        for offset in range(0, len(tokens), BATCH):
            chunk = tokens[offset:offset + BATCH]
            for index, token in enumerate(chunk):
                batch.token[index] = token
                batch.pos[index] = start + offset + index
                batch.n_seq_id[index] = 1
                batch.seq_id[index][0] = 0
                batch.logits[index] = every_row or offset + index == len(tokens) - 1
            batch.n_tokens = len(chunk)
            if low.llama_decode(self._ctx, batch) != 0:
                raise RuntimeError("llama.cpp could not decode a label prompt")
        wanted = len(tokens) if every_row else 1
        pointer = low.llama_get_logits(self._ctx) if every_row else low.llama_get_logits_ith(self._ctx, -1)
        block = self._np.ctypeslib.as_array(ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)),
                                            shape=(wanted, self._n_vocab)).copy()
        return list(block)

    def close(self) -> None:
        if self._ctx:
            self._low.llama_batch_free(self._batch)
            self._low.llama_free(self._ctx)
            self._ctx = None
