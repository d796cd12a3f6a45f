"""Labels scored, not just sampled: which value each label field takes, chosen on the
model's own probabilities, calibrated, and written into the answer as it is decoded.

A *label* is an output field with a few allowed values (an enum, a boolean, the values of
a ``one_of_input`` source). Before the answer is decoded, each value's probability is read
on the label's few-shot prompt (:mod:`.label_scoring`), and on the same prompt with the
input's values replaced by "N/A": the model's prior for that field, whatever the input
says. The calibrated probability divides each value's probability by its prior raised to
``weight`` (0: no calibration, 1: the diagonal correction of "Calibrate Before Use", Zhao
et al., ICML 2021) and renormalises (:func:`choose`); the value chosen is the likeliest.

While the answer is written, :class:`JsonPath` follows where the JSON is, and once a
label's key is written every token of its value keeps to the chosen one
(:class:`LabelChooser`): a token may hold the colon, the quote mark, part of the value or
all of it and the comma after, and is kept when its text is consistent with the value.

This module imports only the standard library: the model host's program loads it beside
itself (it is run by path, not as part of the package).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

FLOOR = 1e-4            # the least prior a value is divided by (a prior of 0 would make it certain)
_COLON = re.compile(r"^\s*(?::\s*)?")


def literal(value: Any) -> str:
    """How a value is written in the answer's JSON."""
    return json.dumps(value, ensure_ascii=False)


def verbal(value: Any) -> str:
    """How a value is written in a label prompt: text as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class JsonPath:
    """Follows JSON as it is written, character by character, and says whose value comes
    next: after ``{"arguments": {"output_payload": {"sentiment"`` it reports the key path
    ``("arguments", "output_payload", "sentiment")`` until that value is complete; and
    whether an object has repeated a key (``repeated_key``: a small model looping)."""

    def __init__(self) -> None:
        self._stack: list[list[Any]] = []   # per open container: [kind, key, phase, keys had]
        self._in_string = False
        self._escaped = False
        self._is_key = False
        self._key: list[str] = []
        self._scalar = False
        self.since_key = ""                 # text written since the last key closed
        self.key_path: tuple[str, ...] | None = None   # the key whose value is being written
        self.repeated_key = False

    def feed(self, text: str) -> None:
        for char in text:
            self._feed(char)

    def _feed(self, char: str) -> None:
        if self.key_path is not None:
            self.since_key += char
        if self._in_string:
            if self._escaped:
                self._escaped = False
            elif char == "\\":
                self._escaped = True
            elif char == '"':
                self._in_string = False
                if self._is_key:
                    self._key_closed("".join(self._key))
                else:
                    self._value_done()
                return
            if self._is_key:
                self._key.append(char)
            return
        if self._scalar:
            if char in ",}] \n\t\r":
                self._scalar = False
                self._value_done()
            else:
                return
        top = self._stack[-1] if self._stack else None
        if char == '"':
            self._in_string = True
            self._is_key = top is not None and top[0] == "{" and top[2] == "key"
            self._key = []
        elif char in "{[":
            self._stack.append(["{" if char == "{" else "[", None, "key" if char == "{" else "value", set()])
        elif char in "}]":
            if self._stack:
                self._stack.pop()
            self._value_done()
        elif char == ":" and top is not None:
            top[2] = "value"
        elif char == "," and top is not None:
            top[2] = "key" if top[0] == "{" else "value"
        elif not char.isspace() and top is not None and top[2] == "value":
            self._scalar = True

    def _key_closed(self, key: str) -> None:
        top = self._stack[-1]
        self.repeated_key = self.repeated_key or key in top[3]
        top[3].add(key)
        top[1] = key
        top[2] = "colon"
        self.key_path = tuple(str(frame[1]) for frame in self._stack)
        self.since_key = ""

    def _value_done(self) -> None:
        """A value ended (a string, a scalar, or a container closed at the value's level)."""
        if self.key_path is not None and len(self._stack) < len(self.key_path) + 1:
            self.key_path = None
            self.since_key = ""
        if self._stack and self._stack[-1][2] == "value":
            self._stack[-1][2] = "after"


def committed(written: str, values: Sequence[Any]) -> list[Any]:
    """The values the text written after a label's key is consistent with: all of them while
    only the colon (and spaces) are written, then those whose literal the rest begins or
    is begun by (a token may carry the value's end and a comma with it)."""
    start = _COLON.match(written)
    rest = written[start.end():] if start is not None else written
    if ":" not in written:
        return list(values) if not written.strip() else []
    kept = []
    for value in values:
        text = literal(value)
        if text.startswith(rest) or rest.startswith(text):
            kept.append(value)
    return kept


def choose(values: Sequence[Any], raw: dict[str, float], prior: dict[str, float] | None,
           weight: float) -> LabelScore:
    """The value with the highest calibrated probability (``raw`` divided by ``prior`` to
    the power ``weight``, renormalised; ``raw`` itself without a prior), with its scores.
    ``raw`` and ``prior`` are keyed by :func:`literal`."""
    has_prior = bool(prior) and weight != 0 and set(prior or {}) == set(raw)
    shares = dict(raw)
    if has_prior:
        assert prior is not None
        scaled = {key: share / max(prior[key], FLOOR) ** weight for key, share in raw.items()}
        total = sum(scaled.values())
        shares = {key: share / total for key, share in scaled.items()}
    chosen = max(values, key=lambda value: shares[literal(value)])
    return LabelScore(chosen, shares[literal(chosen)], dict(raw), shares, dict(prior) if has_prior and prior else None)


@dataclass(slots=True)
class LabelScore:
    """What was decided for one label field."""

    value: Any
    probability: float                 # calibrated (raw when there was no prior)
    raw: dict[str, float]              # by literal
    calibrated: dict[str, float]       # by literal
    prior: dict[str, float] | None     # the content-free probabilities, by literal

    def as_dict(self, values: Sequence[Any]) -> dict[str, Any]:
        """The chosen value and its calibrated probability; each value's calibrated, raw
        and content-free probability (``scores``, likeliest first); the alternatives."""
        chosen = literal(self.value)
        ranked = sorted(values, key=lambda value: -self.calibrated[literal(value)])
        scores = [{"value": value, "probability": round(self.calibrated[literal(value)], 4),
                   "raw_probability": round(self.raw[literal(value)], 4),
                   **({"prior": round(self.prior.get(literal(value), 0.0), 4)} if self.prior else {})}
                  for value in ranked]
        return {"value": self.value, "probability": round(self.probability, 4),
                "raw_probability": round(self.raw[chosen], 4), "calibrated": self.prior is not None,
                "alternatives": [{"value": entry["value"], "probability": entry["probability"]}
                                 for entry in scores if literal(entry["value"]) != chosen],
                "scores": scores}


@dataclass(slots=True)
class LabelChooser:
    """Keeps each label's value, as it is written, to the value chosen for it (``chosen``:
    field -> its :class:`LabelScore`). ``prefix``: where the output's fields sit in the
    answer (a ``yield_control`` call's ``arguments.output_payload``)."""

    chosen: dict[str, LabelScore]
    prefix: tuple[str, ...] = ("arguments", "output_payload")
    path: JsonPath = field(default_factory=JsonPath)

    def current(self) -> str | None:
        """The label whose value is being written now, if it has a chosen value."""
        key_path = self.path.key_path
        if key_path is None or len(key_path) != len(self.prefix) + 1 or key_path[:-1] != self.prefix:
            return None
        return key_path[-1] if key_path[-1] in self.chosen else None

    def keeps(self, name: str, piece: str) -> bool:
        """Whether a token keeps to the value chosen for ``name``."""
        value = self.chosen[name].value
        return value in committed(self.path.since_key + piece, [value])

    def rest(self, name: str) -> str:
        """What is left to write of the value chosen for ``name``."""
        written = self.path.since_key
        text = literal(self.chosen[name].value)
        if ":" not in written:
            return ": " + text
        start = _COLON.match(written)
        done = written[start.end():] if start is not None else ""
        return text[len(done):] if text.startswith(done) else ""
