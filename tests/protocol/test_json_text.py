"""json_text: the canonical form is json.dumps's exact text (tokens and schema keys keep
their bytes); the compact form parses back to the value it was given."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from delegations.protocol import json_text
from delegations.protocol.capabilities import issue_token, verify_token
from delegations.protocol.schemas import canonical_json

# non-ASCII text, floats of every size (1e-05, 1e+16), integers past 64 bits
FINITE_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)
ANY_FLOAT_JSON = st.recursive(
    st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10)
NO_FLOAT_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)
ASSORTED = [{"name": "Zoë", "→": ["😀", "\u2028", "\x00"]}, [1e-05, 1e16, 0.1, -0.0, 5e-324],
            {"b": 2**70, "a": [True, None]}, "\ud800", "", {}, []]


def _old_canonical(value: object, *, allow_nan: bool = False) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=allow_nan)


@given(value=FINITE_JSON)
def test_the_canonical_form_is_json_dumps_sorted_and_compact(value: object) -> None:
    assert json_text.canonical(value) == _old_canonical(value)


@given(value=ANY_FLOAT_JSON)
def test_the_canonical_form_with_nan_allowed_writes_what_json_dumps_writes(value: object) -> None:
    assert json_text.canonical(value, allow_nan=True) == _old_canonical(value, allow_nan=True)


@pytest.mark.parametrize("value", ASSORTED)
def test_the_canonical_form_escapes_non_ascii_as_json_dumps_does(value: object) -> None:
    text = json_text.canonical(value)

    assert text == _old_canonical(value)
    assert text.isascii()


def test_the_canonical_form_refuses_what_json_cannot_hold() -> None:
    for not_json in ([math.nan], {"exp": math.inf}):
        with pytest.raises(ValueError):
            json_text.canonical(not_json)
    with pytest.raises(TypeError, match="not JSON serializable"):
        json_text.canonical({"at": object()})
    cycle: list[object] = []
    cycle.append(cycle)
    with pytest.raises(ValueError):
        json_text.canonical(cycle)
    assert json_text.canonical({"exp": math.inf}, allow_nan=True) == '{"exp":Infinity}'


@given(value=FINITE_JSON)
def test_the_compact_form_reads_back_as_the_same_value_in_the_same_order(value: object) -> None:
    back = json.loads(json_text.compact(value))

    assert back == value
    assert json.dumps(back) == json.dumps(value)   # key order kept


@given(value=NO_FLOAT_JSON)
def test_the_compact_form_without_floats_is_json_dumps_text(value: object) -> None:
    assert json_text.compact(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def test_the_compact_form_handles_what_json_dumps_handles() -> None:
    assert json_text.compact({"b": 1, "a": "é"}) == '{"b":1,"a":"é"}'
    assert json_text.compact([math.inf, 2**70]) == "[Infinity,1180591620717411303424]"
    assert math.isnan(json.loads(json_text.compact([math.nan]))[0])
    assert json_text.compact(["\ud800"]) == json.dumps(["\ud800"], separators=(",", ":"),
                                                       ensure_ascii=False)
    with pytest.raises(TypeError, match="not JSON serializable"):
        json_text.compact({"at": object()})


@pytest.mark.parametrize(("run_id", "expires_at", "parent"), [
    ("0123456789abcdef0123456789abcdef", 1754450000.123456, None),
    ("exécution-→-😀", math.inf, "parent-ü"),
    ("run", 1e-05, "p"),
])
def test_capability_tokens_keep_their_bytes(run_id: str, expires_at: float,
                                            parent: str | None) -> None:
    key = b"test-token-key-0123"
    claims: dict[str, object] = {"v": 1, "run": run_id, "caps": ["fs_read", "fs_write"],
                                 "exp": expires_at}
    if parent is not None:
        claims["parent"] = parent
    payload = base64.urlsafe_b64encode(
        _old_canonical(claims, allow_nan=True).encode("ascii")).rstrip(b"=")
    signature = base64.urlsafe_b64encode(hmac.digest(key, payload, hashlib.sha256)).rstrip(b"=")

    token = issue_token(key, run_id=run_id, capabilities=["fs_write", "fs_read"],
                        expires_at=expires_at, parent_run_id=parent)

    assert token == f"{payload.decode()}.{signature.decode()}"
    assert verify_token(key, token, now=0).run_id == run_id


def test_schema_cache_keys_keep_their_bytes() -> None:
    schema = {"type": "object", "properties": {"prix": {"type": "number", "description": "€ HT"}},
              "required": ["prix"]}

    assert canonical_json(schema) == _old_canonical(schema)
    assert canonical_json({"maximum": math.nan}) is None
