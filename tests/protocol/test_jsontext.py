"""jsontext.encoder gives exactly json.dumps's text for the same options."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from delegations.protocol.jsontext import encoder

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)

OPTIONS = [
    {},
    {"sort_keys": True, "compact": True},
    {"sort_keys": True, "compact": True, "allow_nan": False},
    {"ensure_ascii": False},
    {"ensure_ascii": False, "default": str},
]


def _dumps(value: object, options: dict[str, object]) -> str:
    kwargs = dict(options)
    compact = kwargs.pop("compact", False)
    return json.dumps(value, separators=(",", ":") if compact else (", ", ": "), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("options", OPTIONS)
@given(value=JSON_VALUES)
def test_same_text_as_json_dumps(options: dict[str, object], value: object) -> None:
    assert encoder(**options)(value) == _dumps(value, options)  # type: ignore[arg-type]


def test_default_and_refusals_match_json_dumps() -> None:
    lenient = encoder(ensure_ascii=False, default=str)
    assert lenient({"at": frozenset([3])}) == '{"at": "frozenset({3})"}'
    with pytest.raises(TypeError, match="not JSON serializable"):
        encoder()({"x": object()})
    with pytest.raises(ValueError):
        encoder(allow_nan=False)([math.nan])
    assert encoder(ensure_ascii=False)("é") == '"é"'
    assert encoder()("é") == '"\\u00e9"'
