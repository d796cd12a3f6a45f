"""Run ids, OpenClaw session keys, and the announce/result events every run ends with."""

from __future__ import annotations

import re

from delegations.protocol.events import announce_data, result_data
from delegations.protocol.lifecycle import RunState
from delegations.protocol.sessions import new_run_id, session_key


def test_run_ids_are_random_uuid_hex() -> None:
    first, second = new_run_id(), new_run_id()
    assert re.fullmatch(r"[0-9a-f]{32}", first) and first != second


def test_every_run_is_named_as_an_openclaw_subagent_session() -> None:
    assert session_key("researcher-7", "abc") == "agent:researcher-7:subagent:abc"
    assert session_key(None, "abc") == session_key("", "abc") == "agent:main:subagent:abc"


def announce(**overrides: object) -> dict[str, object]:
    values: dict[str, object] = {"run_id": "r1", "label": "scout", "session_key": "agent:main:subagent:r1",
                                 "parent_run_id": "p1", "state": RunState.COMPLETE, "error": None,
                                 "usage": {"runtime_s": 1.23456789}, "result": {"summary": "found it"}}
    values.update(overrides)
    return announce_data(**values)  # type: ignore[arg-type]


def test_an_announce_says_how_the_run_ended_and_what_it_found() -> None:
    data = announce()
    assert data["status"] == "success" and data["state"] == "COMPLETE"
    assert data["summary"] == "found it" and data["runtime_s"] == 1.234568
    assert data["parent_run_id"] == "p1" and data["session_key"] == "agent:main:subagent:r1"


def test_an_announce_without_a_result_summarizes_the_error_or_the_state() -> None:
    failed = announce(state=RunState.FAILED, result=None, error={"code": "ERR_TIMEOUT", "message": "too slow"})
    assert failed["status"] == "error" and failed["summary"] == "too slow"
    timed_out = announce(state=RunState.TIMEOUT, result=None)
    assert timed_out["status"] == "timeout" and timed_out["summary"] == "TIMEOUT"


def test_the_result_event_carries_error_and_findings_only_when_there_are_some() -> None:
    plain = result_data(state=RunState.COMPLETE, result={"status": "SUCCESS"}, criteria_report=None,
                        usage={})
    assert plain == {"state": "COMPLETE", "result": {"status": "SUCCESS"}, "criteria_report": None,
                     "usage": {}}
    rejected = result_data(state=RunState.REJECTED, result=None, criteria_report=None, usage={},
                           error={"code": "ERR_INVALID_PACKET"}, findings=[{"code": "VAGUE_CRITERIA"}])
    assert rejected["error"] == {"code": "ERR_INVALID_PACKET"}
    assert rejected["findings"] == [{"code": "VAGUE_CRITERIA"}]
