"""JSON text the protocol writes for itself: the canonical form and the compact form.

:func:`canonical` is what capability tokens are signed over and schema caches are keyed
by: sorted keys, no whitespace, non-ASCII escaped, NaN and Infinity refused unless asked
for. It is exactly the text ``json.dumps(value, sort_keys=True, separators=(",", ":"),
allow_nan=...)`` gives, and stays on the standard library because neither fast library
writes those bytes: orjson never escapes non-ASCII, and orjson and pydantic-core both spell
``1e-05`` as ``0.00001``; orjson also writes NaN as ``null`` and refuses integers past 64
bits and keys that are not strings. Tokens must keep their bytes, and a cache key must
refuse exactly what JSON cannot hold. The price: 2.7 µs for a small schema or token claims,
where json's private C encoder (used before, built once) took 1.35 µs; the runner makes
about six such calls per hand-off.

:func:`compact` is for text that is only read back, never compared byte for byte (a cache
key that keeps key order): pydantic-core's ``to_json``, 0.5 µs for a small output schema
where ``json.dumps`` takes 3 µs. Its text is ``json.dumps(value, separators=(",", ":"),
ensure_ascii=False)``'s except for the spelling of some floats (``0.00001``); it parses
back to the same value.
"""

from __future__ import annotations

import json

from pydantic_core import PydanticSerializationError, to_json

# configured once: json.dumps with options builds a new JSONEncoder on every call
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False).encode
_CANONICAL_WITH_NAN = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def canonical(value: object, *, allow_nan: bool = False) -> str:
    """Sorted-key, compact, ASCII-only JSON text of ``value``: the bytes to sign or hash.

    Raises TypeError for a value JSON cannot hold, and ValueError for NaN or Infinity
    (unless ``allow_nan``, which writes them as ``NaN`` and ``Infinity``) or a cycle.
    """
    return (_CANONICAL_WITH_NAN if allow_nan else _CANONICAL)(value)


def compact(value: object) -> str:
    """Compact JSON text of a JSON value (dicts with string keys, lists, strings, numbers,
    booleans, None), keys in their own order, non-ASCII as it is, NaN and Infinity written
    as ``NaN`` and ``Infinity``.

    What pydantic-core will not write (a lone surrogate, an object JSON cannot hold) is
    left to ``json.dumps``, which writes it or raises TypeError as it always has.
    """
    try:
        return to_json(value).decode()
    except PydanticSerializationError:
        return _COMPACT(value)
