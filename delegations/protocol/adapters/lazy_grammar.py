"""Greedy decoding held to a grammar, checked lazily, with label fields scored on the way.

Runs in the model host (:mod:`.model_host` loads it beside itself: it is run by path, not as
part of the package), so it imports only the standard library at module level, and numpy
and llama-cpp-python when a grammar is built.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

if __package__:
    from .label_choice import LabelChooser
else:  # the model host's program: this folder is on sys.path
    from label_choice import LabelChooser  # type: ignore[import-not-found,no-redef]


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

    With a :class:`~.label_choice.LabelChooser`, the text chosen so far is followed, and while
    a label field's value is written each token keeps to the value chosen for it (the
    likeliest such token the grammar allows; else the first token of the value's rest).
    """

    # Candidates the grammar is asked about, as one batch, when it refuses the likeliest
    # token: a const string the model would not write (a tool's name) needs more than a
    # few. Gemma 3 270M, one constrained answer: 18 whole-vocabulary masks with none, 5
    # with 32 candidates, 0-1 with 2048 (each mask of 262,144 tokens costs ~40 ms).
    LIKELIEST = 2048

    def __init__(self, llama: Any, gbnf: str, chooser: LabelChooser | None = None) -> None:
        import llama_cpp.llama_cpp as low_level
        import numpy as np

        self._llama = llama
        self._low = low_level
        self._np = np
        self._vocab = low_level.llama_model_get_vocab(llama.model)
        self._sampler = low_level.llama_sampler_init_grammar(self._vocab, gbnf.encode("utf-8"),
                                                             b"root")
        if not self._sampler:
            raise ValueError("the answer's JSON schema did not make a valid grammar")
        self._one: Any = low_level.llama_token_data()
        self._one_array = low_level.llama_token_data_array(
            data=ctypes.pointer(self._one), size=1, selected=-1, sorted=False)
        self._buffer: Any = None
        self._pieces: dict[int, str] = {}
        self.chooser = chooser
        self.failure: Exception | None = None
        self.full_masks = 0  # steps that needed the whole vocabulary (for the figures)

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
        label = self.chooser.current() if self.chooser is not None else None
        token = self._label_step(scores, label) if label is not None else None
        if token is None:
            token = self._greedy_allowed(scores)
        self._low.llama_sampler_accept(self._sampler, token)
        if self.chooser is not None:
            self.chooser.path.feed(self.piece(token))
        chosen = np.full_like(scores, -math.inf)
        chosen[token] = 0.0
        return chosen

    def _greedy_allowed(self, scores: Any) -> int:
        np = self._np
        token = int(np.argmax(scores))
        if self._allows(token, float(scores[token])):
            return token
        likeliest = np.argpartition(scores, -self.LIKELIEST)[-self.LIKELIEST:]
        found = self._best_allowed(scores, likeliest)
        if found is None:
            found = self._best_allowed(scores, np.arange(len(scores)))
            self.full_masks += 1
        assert found is not None, "the grammar allows no token at all"
        return found

    def _label_step(self, scores: Any, name: str) -> int | None:
        """The token for this step of label ``name``'s value, kept to the value chosen for
        it; None: the ordinary greedy step."""
        np, chooser = self._np, self.chooser
        assert chooser is not None
        greedy = int(np.argmax(scores))
        if chooser.keeps(name, self.piece(greedy)) and self._allows(greedy, float(scores[greedy])):
            return greedy
        top = np.argpartition(scores, -self.LIKELIEST)[-self.LIKELIEST:]
        for token in top[np.argsort(-scores[top])]:
            token = int(token)
            if chooser.keeps(name, self.piece(token)) and self._allows(token, float(scores[token])):
                return token
        rest = chooser.rest(name)
        if rest:
            tokens = self._llama.tokenize(rest.encode("utf-8"), add_bos=False, special=False)
            if tokens and chooser.keeps(name, self.piece(tokens[0])) and self._allows(tokens[0], 0.0):
                return int(tokens[0])
        return None   # the grammar's best, as without labels

    def piece(self, token: int) -> str:
        """The text of one token (partial UTF-8 read as replacement characters: a piece of a
        character is never a quote mark or a bracket, which is all the path follows)."""
        text = self._pieces.get(token)
        if text is None:
            buffer = ctypes.create_string_buffer(64)
            size = self._low.llama_token_to_piece(self._vocab, token, buffer, 64, 0, True)
            text = self._pieces[token] = buffer.raw[:max(size, 0)].decode("utf-8", "replace")
        return text

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
