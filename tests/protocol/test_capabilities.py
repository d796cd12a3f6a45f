"""Capabilities shrink down the chain; tokens are signed, scoped and expire.

The capabilities are those of the hand-off protocol and of delegation contracts.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from delegations.protocol.capabilities import (
    APPROVAL_REQUIRED_CAPABILITIES,
    CAPABILITY_DESCRIPTIONS,
    CAPABILITY_TOOLS,
    KNOWN_CAPABILITIES,
    TOOL_CAPABILITY,
    TokenClaims,
    approval_required_in,
    capabilities_beyond,
    issue_child_token,
    issue_token,
    narrow_capabilities,
    requires_approval,
    tools_for,
    unknown_capabilities,
    verify_token,
)
from delegations.protocol.errors import ErrorCode, ProtocolError

KEY = b"test-secret-key"
NOW = 1_700_000_000.0


@pytest.fixture
def token() -> str:
    return issue_token(KEY, run_id="run-1", capabilities=["fs_read", "fs_write"],
                       expires_at=NOW + 60)


def refusal(call: Callable[[], object]) -> ProtocolError:
    """Run ``call`` and return the ProtocolError it raised."""
    with pytest.raises(ProtocolError) as caught:
        call()
    assert caught.value.code == ErrorCode.CONSTRAINT_VIOLATION
    return caught.value


# -- catalogue and approval -----------------------------------------------------------------


def test_the_hand_off_protocols_approval_capabilities_need_explicit_approval() -> None:
    assert frozenset({"network_outbound", "file_delete", "financial_tx"}) \
        == APPROVAL_REQUIRED_CAPABILITIES
    assert requires_approval("network_outbound")
    assert not requires_approval("fs_read")


def test_the_approval_set_can_be_configured() -> None:
    assert requires_approval("fs_write", approval_required={"fs_write"})
    assert not requires_approval("file_delete", approval_required=set())


def test_every_protocol_capability_is_known_with_a_one_line_description() -> None:
    for name in ("fs_read", "fs_write", "file_delete", "network_outbound", "subprocess_exec",
                 "financial_tx", "ast_parsing", "search"):
        assert name in KNOWN_CAPABILITIES
        description = CAPABILITY_DESCRIPTIONS[name]
        assert description and "\n" not in description


def test_capabilities_grant_the_runners_tools() -> None:
    assert CAPABILITY_TOOLS["fs_read"] == ("read_file", "list_files")
    assert CAPABILITY_TOOLS["fs_write"] == ("apply_edit",)
    assert TOOL_CAPABILITY["delete_file"] == "file_delete"
    assert TOOL_CAPABILITY["http_get"] == "network_outbound"
    assert tools_for(["fs_read", "network_outbound", "made_up"]) \
        == ["read_file", "list_files", "http_get"]


def test_it_lists_unknown_and_approval_required_capabilities_in_order_once() -> None:
    declared = ["fs_read", "teleport", "financial_tx", "network_outbound", "teleport"]
    assert unknown_capabilities(declared) == ["teleport"]
    assert approval_required_in(declared) == ["financial_tx", "network_outbound"]


# -- narrowing ------------------------------------------------------------------------------


def test_a_child_keeps_only_the_capabilities_its_parent_has() -> None:
    assert narrow_capabilities(["fs_write", "fs_read", "network_outbound", "fs_read"],
                               ["fs_read", "fs_write"]) == ["fs_write", "fs_read"]


def test_it_names_the_capabilities_beyond_the_parents_scope() -> None:
    assert capabilities_beyond(["fs_read", "network_outbound", "file_delete"],
                               ["fs_read"]) == ["network_outbound", "file_delete"]
    assert capabilities_beyond(["fs_read"], ["fs_read", "fs_write"]) == []


capability_lists = st.lists(st.sampled_from([*sorted(KNOWN_CAPABILITIES), "x", "y"]), max_size=8)


@given(requested=capability_lists, available=capability_lists)
def test_narrowed_capabilities_are_always_within_both_sides(
        requested: list[str], available: list[str]) -> None:
    narrowed = narrow_capabilities(requested, available)
    assert set(narrowed) <= set(available)
    assert set(narrowed) <= set(requested)
    assert set(narrowed) | set(capabilities_beyond(requested, available)) == set(requested)


# -- tokens ---------------------------------------------------------------------------------


def test_a_token_verifies_and_carries_its_claims(token: str) -> None:
    claims = verify_token(KEY, token, capability="fs_write", now=NOW)
    assert claims == TokenClaims(run_id="run-1", capabilities=("fs_read", "fs_write"),
                                 expires_at=NOW + 60, parent_run_id=None)
    assert claims.allows("fs_read") and not claims.allows("file_delete")


def test_a_token_is_compact_base64url_claims_and_signature(token: str) -> None:
    payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert claims["run"] == "run-1" and claims["caps"] == ["fs_read", "fs_write"]
    assert len(base64.urlsafe_b64decode(signature + "=")) == 32  # HMAC-SHA256
    assert "=" not in token


def test_it_refuses_a_capability_outside_the_tokens_scope(token: str) -> None:
    error = refusal(lambda: verify_token(KEY, token, capability="network_outbound", now=NOW))
    assert "network_outbound" in error.message and "fs_read, fs_write" in error.message
    assert "request_capability" in error.message


def test_it_refuses_an_expired_token(token: str) -> None:
    error = refusal(lambda: verify_token(KEY, token, now=NOW + 61))
    assert "expired" in error.message and "run-1" in error.message


def test_it_refuses_a_token_signed_with_another_key(token: str) -> None:
    error = refusal(lambda: verify_token(b"another-key", token, now=NOW))
    assert "signature" in error.message


def test_it_refuses_claims_rewritten_to_widen_the_scope(token: str) -> None:
    signature = token.split(".")[1]
    forged = base64.urlsafe_b64encode(json.dumps(
        {"v": 1, "run": "run-1", "caps": ["financial_tx"], "exp": NOW + 60}
    ).encode()).rstrip(b"=").decode()
    refusal(lambda: verify_token(KEY, f"{forged}.{signature}", now=NOW))


@pytest.mark.parametrize("malformed", ["", "no-dot", "a.b.c", ".sig", "payload.", "é.x"])
def test_it_refuses_a_malformed_token_with_a_clear_message(malformed: str) -> None:
    error = refusal(lambda: verify_token(KEY, malformed, now=NOW))
    assert "token" in error.message


def test_it_refuses_a_validly_signed_token_whose_claims_are_not_a_token() -> None:
    payload = base64.urlsafe_b64encode(b'{"hello": "world"}').rstrip(b"=").decode()
    signature = base64.urlsafe_b64encode(
        hmac.new(KEY, payload.encode(), hashlib.sha256).digest()).rstrip(b"=").decode()
    error = refusal(lambda: verify_token(KEY, f"{payload}.{signature}", now=NOW))
    assert "malformed" in error.message


def test_a_token_may_never_expire_but_cannot_have_a_nan_expiry() -> None:
    forever = issue_token(KEY, run_id="r", capabilities=["fs_read"], expires_at=float("inf"))
    assert verify_token(KEY, forever, now=NOW * 1000).expires_at == float("inf")
    refusal(lambda: issue_token(KEY, run_id="r", capabilities=[], expires_at=float("nan")))


def test_it_refuses_an_empty_key() -> None:
    refusal(lambda: issue_token(b"", run_id="r", capabilities=[], expires_at=NOW))


@given(
    run_id=st.text(min_size=1, max_size=40),
    capabilities=st.lists(st.text(max_size=20), max_size=6),
    lifetime=st.floats(min_value=0.001, max_value=1e7, allow_nan=False),
    parent=st.one_of(st.none(), st.text(min_size=1, max_size=20)),
)
def test_tokens_round_trip_their_claims(run_id: str, capabilities: list[str], lifetime: float,
                                        parent: str | None) -> None:
    token = issue_token(KEY, run_id=run_id, capabilities=capabilities, expires_at=NOW + lifetime,
                        parent_run_id=parent)
    claims = verify_token(KEY, token, now=NOW)
    assert claims.run_id == run_id
    assert claims.capabilities == tuple(sorted(set(capabilities)))
    assert claims.expires_at == NOW + lifetime
    assert claims.parent_run_id == parent


@given(data=st.data())
def test_changing_any_character_of_a_token_makes_it_fail(data: st.DataObject) -> None:
    token = issue_token(KEY, run_id="run-1", capabilities=["fs_read"], expires_at=NOW + 60)
    index = data.draw(st.integers(0, len(token) - 1))
    replacement = data.draw(st.characters(codec="utf-8").filter(lambda ch: ch != token[index]))
    tampered = token[:index] + replacement + token[index + 1:]
    refusal(lambda: verify_token(KEY, tampered, now=NOW))


@given(data=st.data())
def test_dropping_or_adding_a_character_makes_a_token_fail(data: st.DataObject) -> None:
    token = issue_token(KEY, run_id="run-1", capabilities=["fs_read"], expires_at=NOW + 60)
    index = data.draw(st.integers(0, len(token)))
    if data.draw(st.booleans()) and index < len(token):
        tampered = token[:index] + token[index + 1:]
    else:
        tampered = token[:index] + data.draw(st.sampled_from("Aa0_-.=")) + token[index:]
    refusal(lambda: verify_token(KEY, tampered, now=NOW))


# -- child tokens ---------------------------------------------------------------------------


def test_a_child_token_is_narrowed_to_the_parents_scope_and_lifetime(token: str) -> None:
    child = issue_child_token(KEY, token, run_id="run-2",
                              capabilities=["fs_read", "network_outbound"],
                              expires_at=NOW + 3600, now=NOW)
    claims = verify_token(KEY, child, now=NOW)
    assert claims.capabilities == ("fs_read",)
    assert claims.expires_at == NOW + 60  # never outlives its parent
    assert claims.parent_run_id == "run-1"


def test_a_strict_child_token_request_beyond_the_parent_is_refused(token: str) -> None:
    error = refusal(lambda: issue_child_token(
        KEY, token, run_id="run-2", capabilities=["fs_read", "file_delete"],
        expires_at=NOW + 10, now=NOW, strict=True))
    assert "file_delete" in error.message and "run-1" in error.message


def test_a_child_token_cannot_be_issued_from_an_expired_or_forged_parent(token: str) -> None:
    refusal(lambda: issue_child_token(KEY, token, run_id="c", capabilities=["fs_read"],
                                      expires_at=NOW + 10, now=NOW + 120))
    refusal(lambda: issue_child_token(KEY, token[:-2] + "xx", run_id="c",
                                      capabilities=["fs_read"], expires_at=NOW + 10, now=NOW))


@given(requested=capability_lists, parent_caps=capability_lists,
       lifetime=st.floats(min_value=1, max_value=1e6))
def test_a_child_token_never_exceeds_its_parent(requested: list[str], parent_caps: list[str],
                                                lifetime: float) -> None:
    parent = issue_token(KEY, run_id="p", capabilities=parent_caps, expires_at=NOW + 100)
    child = verify_token(KEY, issue_child_token(KEY, parent, run_id="c", capabilities=requested,
                                                expires_at=NOW + lifetime, now=NOW), now=NOW)
    assert set(child.capabilities) <= set(parent_caps)
    assert child.expires_at <= NOW + 100
