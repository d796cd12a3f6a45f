"""What a run reports, and the sink interface the host (Django, the CLI, a benchmark) implements.

Event shape on the wire: ``{run_id, seq, type, ts, data}``. The runner emits
``(run_id, type, data)``; the sink assigns ``seq`` (gapless per run) and ``ts``.

A run's last two events are its ``announce`` (what a finished OpenClaw sub-agent tells its
parent) and its ``result``; :func:`announce_data` and :func:`result_data` build their data,
for the runner and for a host that ends a run no runner is executing.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from .lifecycle import RunState


class EventType(StrEnum):
    STATE = "state"              # {"state": "WORKING", "previous": "ACCEPTED", ...}
    TEXT = "text"                # {"delta": "..."}  streamed model text
    MODEL_CALL = "model_call"    # {"iteration", "model", "input_tokens", "output_tokens", "cost_usd", "duration_ms", "tool_calls", "finish_reason"}
    TOOL_CALL = "tool_call"      # {"id", "name", "arguments"}
    TOOL_RESULT = "tool_result"  # {"id", "name", "ok", "result" | "error"}
    CHILD = "child"              # {"child_run_id", "label", "packet", "depth", "session_key", "budget", "capabilities"}
    APPROVAL = "approval"        # {"key", "kind", "title", "payload", "decision"?}
    MESSAGE = "message"          # {"text", "from"}
    RESULT = "result"            # {"state", "result", "criteria_report", "usage"}
    ANNOUNCE = "announce"        # OpenClaw sub-agents: {"status", "summary", "error", "runtime_s", "usage", ...}
    LOG = "log"                  # {"level", "message", ...}
    ERROR = "error"              # {"code", "message"}


def announce_data(*, run_id: str, label: str, session_key: str, parent_run_id: str | None,
                  state: str, error: dict[str, Any] | None, usage: dict[str, Any],
                  result: dict[str, Any] | None) -> dict[str, Any]:
    """The ``announce`` of a run that ended in ``state``: what its parent (and its parent's
    model, as the ``delegate_task`` result) reads.

    ``status`` is ``success`` (COMPLETE), ``timeout`` (TIMEOUT) or ``error``; ``summary`` is
    the result's summary (else its log summary), else the error's message, else the state;
    ``runtime_s`` is the usage's, rounded to the microsecond.
    """
    state = str(state)
    summary = None
    if result is not None:
        summary = result.get("summary") or result.get("log_summary")
    if summary is None:
        summary = error["message"] if error else state
    status = ("success" if state == RunState.COMPLETE else
              "timeout" if state == RunState.TIMEOUT else "error")
    return {"run_id": run_id, "label": label, "session_key": session_key,
            "parent_run_id": parent_run_id, "status": status, "state": state, "summary": summary,
            "error": error, "runtime_s": round(usage.get("runtime_s", 0.0), 6), "usage": usage,
            "result": result}


def result_data(*, state: str, result: dict[str, Any] | None, criteria_report: dict[str, Any] | None,
                usage: dict[str, Any], error: dict[str, Any] | None = None,
                findings: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ``result`` event, always a run's last: ``{state, result, criteria_report, usage}``,
    plus ``error`` when there is one and ``findings`` (lint's) when there are any."""
    data: dict[str, Any] = {"state": str(state), "result": result, "criteria_report": criteria_report,
                            "usage": usage}
    if error is not None:
        data["error"] = error
    if findings:
        data["findings"] = findings
    return data


class EventSink(Protocol):
    """Receives every event of every run the runner executes (children included)."""

    async def emit(self, run_id: str, type: str, data: dict[str, Any]) -> None: ...


@dataclass(slots=True)
class RecordedEvent:
    run_id: str
    seq: int
    type: str
    ts: float
    data: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "seq": self.seq, "type": self.type, "ts": self.ts,
                "data": self.data}


@dataclass
class MemorySink:
    """An in-process sink: keeps every event, numbered per run. Used by the CLI, tests and benchmarks."""

    events: list[RecordedEvent] = field(default_factory=list)
    _next_seq: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    async def emit(self, run_id: str, type: str, data: dict[str, Any]) -> None:
        self._next_seq[run_id] += 1
        self.events.append(RecordedEvent(run_id, self._next_seq[run_id], type, time.time(), data))

    def of_run(self, run_id: str) -> list[RecordedEvent]:
        return [event for event in self.events if event.run_id == run_id]

    def of_type(self, type: str) -> list[RecordedEvent]:
        return [event for event in self.events if event.type == type]
