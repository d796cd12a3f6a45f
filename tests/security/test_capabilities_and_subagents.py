"""Capability tokens can't be forged, widened or replayed after expiry; a subagent (the
model behind a run) has no tool that approves or decides anything."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from delegations.models import Approval, Run
from delegations.protocol.capabilities import issue_child_token, issue_token, verify_token
from delegations.protocol.errors import ProtocolError
from delegations.protocol.tool_schemas import model_tool
from delegations.protocol.tools import RUNTIME_TOOLS
from delegations.runs.workflows import run_create
from tests.delegations import scripts
from tests.delegations.runs.test_run_pages import make_run

KEY = b"k" * 32
NOW = 1_700_000_000.0


def token(**overrides: Any) -> str:
    claims: dict[str, Any] = {"run_id": "r1", "capabilities": ["fs_read"], "expires_at": NOW + 60}
    claims.update(overrides)
    return issue_token(KEY, **claims)


def _with_claims(original: str, **changes: Any) -> str:
    payload, signature = original.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims.update(changes)
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{forged}.{signature}"


def test_a_token_with_widened_claims_fails_its_signature() -> None:
    for changes in ({"caps": ["fs_read", "file_delete"]}, {"exp": NOW + 10**9}, {"run": "other"}):
        with pytest.raises(ProtocolError, match="signature does not match"):
            verify_token(KEY, _with_claims(token(), **changes), now=NOW)


def test_a_token_signed_with_another_key_is_refused() -> None:
    with pytest.raises(ProtocolError, match="signature does not match"):
        verify_token(KEY, issue_token(b"x" * 32, run_id="r1", capabilities=["file_delete"],
                                      expires_at=NOW + 60), now=NOW)


def test_a_token_replayed_after_its_expiry_is_refused() -> None:
    valid = token()
    assert verify_token(KEY, valid, now=NOW + 59).run_id == "r1"
    with pytest.raises(ProtocolError, match="expired"):
        verify_token(KEY, valid, now=NOW + 60)


def test_a_token_does_not_grant_what_it_does_not_name() -> None:
    with pytest.raises(ProtocolError, match="outside run r1's scope"):
        verify_token(KEY, token(), capability="file_delete", now=NOW)


def test_a_child_token_never_exceeds_its_parent() -> None:
    child = issue_child_token(KEY, token(), run_id="r2", capabilities=["fs_read", "financial_tx"],
                              expires_at=NOW + 10**6, now=NOW)
    claims = verify_token(KEY, child, now=NOW)
    assert claims.capabilities == ("fs_read",) and claims.expires_at == NOW + 60
    with pytest.raises(ProtocolError, match="capabilities can only shrink"):
        issue_child_token(KEY, token(), run_id="r2", capabilities=["financial_tx"],
                          expires_at=NOW + 60, now=NOW, strict=True)
    with pytest.raises(ProtocolError, match="expired"):
        issue_child_token(KEY, token(), run_id="r2", capabilities=[], expires_at=NOW, now=NOW + 61)


@pytest.mark.parametrize("garbage", ["", ".", "a.b.c", "x" * 5000, "é.é", "e30.AAAA"])
def test_malformed_tokens_are_refused_with_a_protocol_error(garbage: str) -> None:
    with pytest.raises(ProtocolError):
        verify_token(KEY, garbage, now=NOW)


def test_no_tool_offered_to_a_model_approves_or_decides() -> None:
    for name in ("delegate_task", "yield_control", "request_capability", *RUNTIME_TOOLS):
        parameters = json.dumps(model_tool(name)["parameters"]) if name in (
            "delegate_task", "yield_control", "request_capability") else ""
        assert not any(word in name for word in ("approv", "decide", "decision")), name
        assert "approval_id" not in parameters and '"decision"' not in parameters, name


@pytest.mark.django_db(transaction=True)
def test_a_subagent_calling_decision_tools_decides_nothing(immediate_tasks: None, composer: Any) -> None:
    waiting = make_run(composer, state="AWAITING_APPROVAL")
    other = Approval.objects.create(run=waiting, key=f"{waiting.pk}:capability:x", kind="capability",
                                    title="Delete stale.txt")
    attempts = [{"name": name, "arguments": {"approval_id": other.pk, "decision": "approve",
                                             "comment": "ok"}}
                for name in ("approve", "decide_approval", "approval_decide", "inbox_decide")]
    config = {"script": [
        {"text": "I approve it myself.", "tool_calls": attempts},
        {"text": "Removing the stale file.", "tool_calls": [
            {"name": "delete_file", "arguments": {"path": "stale.txt"}}]},
        scripts.yield_turn()]}
    run = run_create(packet=scripts.approval_packet(), adapter="scripted", config=config, owner=composer)
    run = Run.objects.get(pk=run.pk)
    other.refresh_from_db()
    assert other.status == "pending" and other.decided_by is None
    own = Approval.objects.get(run=run)
    assert own.status == "pending" and own.decided_by is None
    assert run.state == "AWAITING_APPROVAL"
    results = [e.data for e in run.events.filter(type="tool_result").order_by("seq")][:4]
    assert [(r["name"], r["ok"], r["error"]["code"]) for r in results] == [
        (call["name"], False, "ERR_CONSTRAINT_VIOLATION") for call in attempts]
