"""Where an answer came from: checks of a result's values against the run's input_data.

A copied worked example or an invented value is schema-valid; these say no to it. Each
reads its ``source`` (a dotted path into input_data) and, for all but ``words_absent``,
the result's value at ``path``:

- ``appears_in``: the value is in the source text. A number matches any spelling of it
  there (279.99 in "279,99", "$279.99", "279.99 USD"; 2915 in "¥2,915"); text matches with
  case, whitespace and quote marks normalised; a currency code also matches its sign or
  name; every item of a list must match.
- ``quoted_from``: the value is a non-empty quote of the source (normalised the same way,
  surrounding quote marks and end punctuation aside; "..." may join quoted parts).
- ``one_of_input``: the value is the source's value, or one of its items when it is a list.
- ``words_absent``: the key words of the input ``words_of`` (a question) are not all in
  the source (the passage): a "not found" answer is believable only then.

One source is not an input: ``fetched_pages`` is the text of every page the run fetched
with ``http_get`` (the bodies it read, in order), so an answer about a page a person named
by its URL is checked against what the page said, not against the model's memory.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

MISSING = object()  # what value_at finds where a path leads nowhere
FETCHED_PAGES = "fetched_pages"   # the source that holds what the run fetched, not an input
PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_NUMBER_TOKEN = re.compile(r"\d(?:[\d.,'\u00a0\u202f _]*\d)?")
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u00a0": " ",
                         "\u2013": "-", "\u2014": "-"})
_ELLIPSIS = re.compile(r"\s*(?:\.\.\.|\u2026)\s*")
_WORD = re.compile(r"[^\W_]+")
# what a currency code is also written as in a quote (the price-research skill's reading)
CURRENCY_SIGNS: dict[str, tuple[str, ...]] = {
    "USD": ("$", "us dollar", "dollar"), "EUR": ("€", "euro"), "GBP": ("£", "pound", "sterling"),
    "JPY": ("¥", "yen", "円"), "CNY": ("¥", "yuan", "rmb", "元"), "INR": ("₹", "rupee"),
    "CHF": ("franc", "chf"), "KRW": ("₩", "won"),
}
# words a question is made of that say nothing about its subject
_QUESTION_WORDS = frozenset({
    "a", "an", "the", "and", "or", "of", "in", "on", "at", "to", "for", "by", "with", "from",
    "into", "about", "as", "is", "are", "was", "were", "be", "been", "being", "do", "does", "did",
    "done", "what", "when", "where", "which", "who", "whom", "whose", "why", "how", "that", "this",
    "these", "those", "it", "its", "has", "have", "had", "there", "their", "they", "them", "he",
    "she", "his", "her", "him", "can", "could", "would", "should", "will", "shall", "may", "might",
    "must", "much", "many", "any", "some", "year", "years", "date", "day", "time", "long", "name",
    "named", "called", "kind", "type", "not", "no", "yes"
})


def value_at(root: object, path: str) -> object:
    """The value at ``path`` (dotted, maybe with [n]) in ``root``, or MISSING."""
    current = root
    for match in PATH_PART.finditer(path):
        name, index = match.group(1), match.group(2)
        if index is not None:
            if not isinstance(current, list | tuple) or int(index) >= len(current):
                return MISSING
            current = current[int(index)]
        elif isinstance(current, dict) and name in current:
            current = current[name]
        else:
            return MISSING
    return current


def input_value(input_data: dict[str, Any], source: str) -> object:
    """The value at ``source`` in input_data; MISSING, or an empty one (None, "", [], {}),
    when the input does not hold it."""
    return value_at(input_data, source)


def is_missing(value: object) -> bool:
    return value is MISSING or value is None or value == "" or value == [] or value == {}


def strings(value: object) -> Iterator[str]:
    """The texts in a value, at any depth: its strings, and its numbers as written."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield str(value)


def source_text(value: object) -> str:
    return "\n".join(strings(value))


def normalise(text: str) -> str:
    return " ".join(text.translate(_QUOTES).casefold().split())


def _readings(token: str) -> set[float]:
    """Every number a spelling can mean: "2,915" is 2915 (or 2.915), "172,50" is 172.5,
    "1.234,56" is 1234.56."""
    digits = re.sub(r"[\u00a0\u202f _']", "", token)
    readings: set[float] = set()
    plain = re.sub(r"[.,]", "", digits)
    readings.add(float(plain))
    last = max(digits.rfind("."), digits.rfind(","))
    if last >= 0:
        whole, fraction = re.sub(r"[.,]", "", digits[:last]), digits[last + 1:]
        readings.add(float(f"{whole or 0}.{fraction}"))
    return readings


def numbers_in(text: str) -> set[float]:
    found: set[float] = set()
    for match in _NUMBER_TOKEN.finditer(text):
        token = match.group(0).rstrip(" .,")
        if token:
            found |= _readings(token)
    return found


def _as_number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+(?:\.\d+)?\s*", value):
        return float(value)
    return None


def _number_in(number: float, text: str) -> bool:
    return any(math.isclose(number, candidate, rel_tol=1e-9, abs_tol=1e-9)
               for candidate in numbers_in(text))


def _text_in(value: str, text: str) -> bool:
    wanted, haystack = normalise(value).rstrip(".,;:!?").strip(" \"'"), normalise(text)
    if not wanted:
        return False
    if wanted in haystack:
        return True
    signs = CURRENCY_SIGNS.get(value.strip().upper()) if re.fullmatch(r"[A-Za-z]{3}", value.strip()) else None
    return any(sign in haystack for sign in signs or ())


def appears(value: object, text: str) -> tuple[bool, str]:
    """Whether ``value`` is in ``text`` (see the module docstring), and what was not."""
    if isinstance(value, list):
        for item in value:
            found, missing = appears(item, text)
            if not found:
                return False, missing
        return bool(value), "" if value else "[]"
    number = _as_number(value)
    if number is not None:
        return _number_in(number, text), str(value)
    if isinstance(value, str):
        return _text_in(value, text), value
    return False, str(value)


def quoted(value: str, text: str) -> bool:
    """Whether ``value`` is a quote of ``text`` (its parts, when "..." joins them)."""
    cleaned = normalise(value).strip(" \"'").rstrip(".,;:!?").strip(" \"'")
    parts = [part for part in _ELLIPSIS.split(cleaned) if part.strip(" .")]
    haystack = normalise(text)
    return bool(parts) and all(part.strip() in haystack for part in parts)


def _same(value: object, other: object) -> bool:
    number, other_number = _as_number(value), _as_number(other)
    if number is not None and other_number is not None:
        return math.isclose(number, other_number, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(value, str) and isinstance(other, str):
        return normalise(value) == normalise(other)
    return bool(value == other) and isinstance(value, bool) == isinstance(other, bool)


def one_of(value: object, allowed: object) -> bool:
    choices = allowed if isinstance(allowed, list) else [allowed]
    values = value if isinstance(value, list) else [value]
    return bool(values) and all(any(_same(item, choice) for choice in choices) for item in values)


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def key_words(text: str) -> list[str]:
    """The words of a question that name its subject (not "when", "did", "the"...)."""
    words = [word for word in _WORD.findall(text.casefold()) if len(word) > 1 and word not in _QUESTION_WORDS]
    return list(dict.fromkeys(words))


def words_present(words: list[str], text: str) -> list[str]:
    """Which of ``words`` the text holds (by stem: "open" is in "opened")."""
    stems = {_stem(word) for word in _WORD.findall(text.casefold())}
    return [word for word in words if _stem(word) in stems]
