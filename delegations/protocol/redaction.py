"""Secret values out of what a run stores and sends.

A :class:`Redactor` holds the values of the installation's secrets (the endpoints' API
keys, the signing key, database passwords...) and replaces each wherever it appears: in a
text, in JSON-shaped data (keys and strings, at any depth), and in streamed text, where a
secret may arrive split over two deltas (:meth:`Redactor.stream`). A model that repeats a
key, or a tool whose output holds one, is then stored and shown with ``[redacted]``.

Values shorter than :data:`MIN_SECRET_LENGTH` are not secrets worth the name and would
match ordinary words, so they are left alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

REDACTED = "[redacted]"
MIN_SECRET_LENGTH = 8


class Redactor:
    def __init__(self, secrets: Iterable[str | None]) -> None:
        # longest first: a secret that holds another is replaced whole
        self.secrets = tuple(sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH},
                                    key=len, reverse=True))
        # how each secret reads inside JSON text (quotes, backslashes, controls escaped)
        self._json_forms = tuple({json.dumps(s, ensure_ascii=False)[1:-1] for s in self.secrets})

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def in_json(self, text: str) -> bool:
        """Whether JSON ``text`` (as ``json.dumps(..., ensure_ascii=False)`` writes it) may
        hold a secret: a substring test, cheap enough for every event stored."""
        return any(form in text for form in self._json_forms)

    def text(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def value(self, value: Any) -> Any:
        """``value`` with every string in it (dict keys too) redacted; parts without a
        secret are the same objects."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.value(item) for item in value)
        return value

    def stream(self, text: str) -> tuple[str, str]:
        """Streamed ``text`` (what is held back from before, then the new delta) split into
        what may go out now, redacted, and the tail held back because a secret may begin
        there; the tail goes out with the next delta, or alone when the stream ends."""
        text = self.text(text)
        held = 0
        for secret in self.secrets:
            # where a tail shorter than the secret, longer than what is held already, starts
            end = len(text) - held
            position = text.find(secret[0], max(0, len(text) - len(secret) + 1), end)
            while position != -1:
                if secret.startswith(text[position:]):
                    held = len(text) - position
                    break
                position = text.find(secret[0], position + 1, end)
        return text[:len(text) - held], text[len(text) - held:]
