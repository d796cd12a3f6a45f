"""Label scores from an OpenAI-compatible server's ``logprobs``, where it gives them.

A server asked for ``logprobs`` with ``top_logprobs`` sends, per generated token, its text,
its log-probability and the likeliest alternatives at that step. When the answer's JSON is
among those tokens (a server that writes the tool call as text, or an answer given as a
JSON result), the step where a label field's value is decided is the first token after the
field's key that commits to some of its values and not others; each value's probability is
the share of that step's probability (the token's and its alternatives') that leads to it.

These are the model's own probabilities, not calibrated: a hosted model is not asked the
content-free question (it would cost a second request), and the scores say so
(``calibrated: false``). Where the server gives none, nothing is scored, and a
``confident`` criterion says it cannot be checked with this model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .label_choice import JsonPath, choose, committed, literal

# (token text, its logprob, [(alternative text, logprob), ...]) per generated token
TokenLogprobs = tuple[str, float, list[tuple[str, float]]]


def labels_from_logprobs(tokens: Sequence[TokenLogprobs], labels: dict[str, list[Any]],
                         parent: str = "output_payload") -> dict[str, dict[str, Any]]:
    """The scores of every label in ``labels`` (field -> allowed values) whose value was
    decided within ``tokens``, keyed by field, as the local model's scores read
    (``LabelScore.as_dict``)."""
    path = JsonPath()
    found: dict[str, dict[str, Any]] = {}
    for text, logprob, alternatives in tokens:
        key_path = path.key_path
        name = key_path[-1] if key_path and len(key_path) >= 2 and key_path[-2] == parent else None
        values = labels.get(name) if name is not None else None
        if name is not None and values and name not in found:
            group = committed(path.since_key + text, values)
            if 0 < len(group) < len(values):
                raw = _shares(path.since_key, [(text, logprob), *alternatives], values)
                found[name] = choose(values, raw, None, 0.0).as_dict(values)
        path.feed(text)
    return found


def _shares(written: str, options: list[tuple[str, float]], values: list[Any]) -> dict[str, float]:
    mass = {literal(value): 0.0 for value in values}
    seen = set()
    for text, logprob in options:
        if text in seen:
            continue
        seen.add(text)
        group = committed(written + text, values)
        if 0 < len(group) < len(values):
            for value in group:
                mass[literal(value)] += math.exp(logprob) / len(group)
    total = sum(mass.values()) or 1.0
    return {key: share / total for key, share in mass.items()}
