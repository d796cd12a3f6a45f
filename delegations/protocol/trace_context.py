"""W3C trace context for run trees: which trace a run belongs to, and the ``traceparent``
its outgoing calls carry.

A run tree is one trace. Its trace id is the one a caller's ``traceparent`` named when the
request that started the root carried one (the caller's trace goes on into Handoff), else
the root run's own id (a run id is 32 lowercase hex digits, as a trace id is, so a person
finds a tree in any trace viewer by its run id). Each run's span id is derived from its run
id, so every worker, a resumed run and a later re-export agree on it without storing it:
a child's span hangs under its parent's whatever process ran either.

While a run calls its model, an MCP tool or a remote A2A agent, :data:`outgoing` holds the
run's context, and the clients add it to the request (:func:`outgoing_headers`), so a
provider or peer that traces continues the same trace under the run's span. Plain
standard library: the protocol core never imports OpenTelemetry.
"""

from __future__ import annotations

import hashlib
import re
from contextvars import ContextVar
from dataclasses import dataclass

VERSION = "00"
SAMPLED = 0x01
# version-format, lowercase hex only (W3C Trace Context, level 1): version 00 is exactly
# these four fields; a later version may add fields after a dash, which are ignored
_TRACEPARENT = re.compile(
    r"(?P<version>[0-9a-f]{2})-(?P<trace_id>[0-9a-f]{32})-(?P<span_id>[0-9a-f]{16})-(?P<flags>[0-9a-f]{2})"
    r"(?P<rest>-.*)?")
_RUN_ID_AS_TRACE_ID = re.compile(r"[0-9a-f]{32}")
MAX_HEADER_LENGTH = 512   # longer than any valid traceparent of any version worth reading


@dataclass(frozen=True, slots=True)
class TraceContext:
    """A span's place in a trace: ``trace_id`` (32 hex), ``span_id`` (16 hex), sampled."""

    trace_id: str
    span_id: str
    sampled: bool = True

    @property
    def traceparent(self) -> str:
        return f"{VERSION}-{self.trace_id}-{self.span_id}-{SAMPLED if self.sampled else 0:02x}"

    def of_run(self, run_id: str) -> TraceContext:
        """The context of run ``run_id``'s span in this trace."""
        return TraceContext(self.trace_id, run_span_id(run_id), self.sampled)


def parse_traceparent(header: str | None) -> TraceContext | None:
    """The context a ``traceparent`` header names, or None when it is absent or malformed
    (the spec says to ignore such a header and start afresh, never to refuse the request)."""
    if not header or len(header) > MAX_HEADER_LENGTH:
        return None
    match = _TRACEPARENT.fullmatch(header.strip())
    if match is None:
        return None
    version, trace_id, span_id = match["version"], match["trace_id"], match["span_id"]
    if version == "ff" or (version == VERSION and match["rest"]):
        return None   # ff is forbidden; version 00 has nothing after the flags
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return TraceContext(trace_id, span_id, bool(int(match["flags"], 16) & SAMPLED))


def _hex_digest(*parts: str, length: int) -> str:
    digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:length]
    return digest if digest.strip("0") else "1".rjust(length, "0")


def run_span_id(run_id: str) -> str:
    """The span id of run ``run_id``'s ``invoke_agent`` span (the same on every worker)."""
    return _hex_digest("run", run_id, length=16)


def event_span_id(run_id: str, seq: int) -> str:
    """The span id of a span made from the event ``seq`` of run ``run_id`` (a model call,
    a tool call, an approval wait): stored events never change, so neither does it."""
    return _hex_digest("event", run_id, str(seq), length=16)


def root_trace_id(root_run_id: str) -> str:
    """The trace id of a tree no caller's trace continues into: its root run's id when that
    reads as a trace id (always, for ids Handoff makes), else one derived from it."""
    if _RUN_ID_AS_TRACE_ID.fullmatch(root_run_id) and root_run_id.strip("0"):
        return root_run_id
    return _hex_digest("trace", root_run_id, length=32)


def run_context(*, run_id: str, root_run_id: str, traceparent: str) -> TraceContext:
    """Run ``run_id``'s own span context, from the ``traceparent`` stored with it (its
    parent's span: a caller's for a root, the parent run's for a child; may be empty)."""
    parent = parse_traceparent(traceparent)
    if parent is None:
        return TraceContext(root_trace_id(root_run_id), run_span_id(run_id))
    return parent.of_run(run_id)


# the context of the run whose call is being made now (a model call, an MCP tool, a remote
# agent); each run's asyncio task sets its own, so concurrent children never mix them
outgoing: ContextVar[TraceContext | None] = ContextVar("handoff_outgoing_trace", default=None)


def outgoing_headers() -> dict[str, str]:
    """``{"traceparent": ...}`` for a call made now on behalf of a traced run, else {}."""
    context = outgoing.get()
    return {"traceparent": context.traceparent} if context is not None else {}
