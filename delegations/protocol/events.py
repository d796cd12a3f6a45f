"""What a run reports, and the sink interface the host (Django, the CLI, a benchmark) implements.

Event shape on the wire (DESIGN §3.4): ``{run_id, seq, type, ts, data}``. The runner emits
``(run_id, type, data)``; the sink assigns ``seq`` (gapless per run) and ``ts``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol


class EventType(StrEnum):
    STATE = "state"              # {"state": "WORKING", "previous": "ACCEPTED", ...}
    TEXT = "text"                # {"delta": "..."}  streamed model text
    MODEL_CALL = "model_call"    # {"iteration", "model", "input_tokens", "output_tokens", "cost_usd", "duration_ms"}
    TOOL_CALL = "tool_call"      # {"id", "name", "arguments"}
    TOOL_RESULT = "tool_result"  # {"id", "name", "ok", "result" | "error"}
    CHILD = "child"              # {"child_run_id", "label", "packet", "depth", "session_key", "budget", "capabilities"}
    APPROVAL = "approval"        # {"key", "kind", "title", "payload", "decision"?}
    MESSAGE = "message"          # {"text", "from"}
    RESULT = "result"            # {"state", "result", "criteria_report", "usage"}
    ANNOUNCE = "announce"        # seed 004: {"status", "summary", "error", "runtime_s", "usage"}
    LOG = "log"                  # {"level", "message", ...}
    ERROR = "error"              # {"code", "message"}


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
