"""JSON text for the hot path: encoders built once per set of options.

``json.dumps(value, sort_keys=True, ...)`` with any option set builds a ``JSONEncoder`` and
then a C encoder on every call, which costs more than encoding the small values the runner
writes many times per hand-off (capability claims, tool results, schema cache keys).
:func:`encoder` builds json's C encoder once and returns a function giving exactly the
text ``json.dumps`` gives with the same options.

The one difference: no circular-reference bookkeeping (it would be state shared between
calls). A cyclic value ends in ``RecursionError`` instead of ``ValueError``; protocol
values come from JSON and cannot hold cycles.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

try:
    from json.encoder import (  # type: ignore[attr-defined]
        c_encode_basestring,
        c_encode_basestring_ascii,
        c_make_encoder,
    )
except ImportError:  # a Python without json's C accelerator
    c_make_encoder = None


def _not_serializable(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def encoder(*, sort_keys: bool = False, compact: bool = False, ensure_ascii: bool = True,
            allow_nan: bool = True, default: Callable[[Any], Any] | None = None) -> Callable[[object], str]:
    """``json.dumps`` with these options, as a function of the value alone.

    ``compact`` is ``separators=(",", ":")``; the rest mean what they mean to ``json.dumps``.
    """
    separators = (",", ":") if compact else (", ", ": ")
    if c_make_encoder is None:
        return partial(json.dumps, sort_keys=sort_keys, separators=separators,  # type: ignore[return-value]
                       ensure_ascii=ensure_ascii, allow_nan=allow_nan, default=default)
    encode = c_make_encoder(
        None,                                                   # no cycle markers
        default or _not_serializable,
        c_encode_basestring_ascii if ensure_ascii else c_encode_basestring,
        None,                                                   # no indent
        separators[1], separators[0], sort_keys, False, allow_nan)

    def dumps(value: object) -> str:
        return "".join(encode(value, 0))

    return dumps
