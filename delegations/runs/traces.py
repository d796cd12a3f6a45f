"""Run trees as OpenTelemetry traces: when they are sent, and what a page says of them.

Tracing is on when the standard ``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`` names a collector
(``settings.HANDOFF_TRACES_ENABLED``). Then, once a root run reaches a terminal state, the
event log tells :func:`tree_ended` (in whichever process wrote it: a worker, the request
that cancelled a parked tree, the sweeper), and the tree goes to this process's exporter
(``trace_export.py``), which writes it as one trace from its stored events. A tree is sent
once it is over: a run parked for days in the inbox appears in the collector when it ends,
with its wait as a span; ``manage.py export_traces --run ID`` sends a finished tree again.

This module imports nothing of OpenTelemetry: the SDK and the exporter load with
``trace_export`` when tracing is on (:func:`listen`, at start-up), so a process without a
collector named never imports them.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import TYPE_CHECKING

from django.conf import settings

from delegations.models import Run
from delegations.protocol.lifecycle import is_terminal
from delegations.runs.eventlog import on_root_state_changed

if TYPE_CHECKING:
    from delegations.runs.trace_export import TraceExporter

# how long a process whose tree ended waits for its trace before it exits (the CLI, an RQ
# work horse): a collector that is down costs that much once, never a run's time
EXIT_FLUSH_SECONDS = 3.0

SENT_REMEMBERED = 10_000   # roots this process sent lately (insertion-ordered, oldest dropped)

_exporter: TraceExporter | None = None
_sent: dict[str, None] = {}
_lock = threading.Lock()


def enabled() -> bool:
    return bool(settings.HANDOFF_TRACES_ENABLED)


def exporter() -> TraceExporter:
    """This process's exporter, started on first use (again in a forked process: threads
    do not survive a fork)."""
    global _exporter
    with _lock:
        if _exporter is None or _exporter.pid != os.getpid():
            from delegations.runs.trace_export import TraceExporter

            _exporter = TraceExporter()
            atexit.register(flush_at_exit)
        return _exporter


def tree_ended(changes: list[tuple[str, str]]) -> None:
    """The event log's listener: queue each root run that reached a terminal state (it
    must not block, and it does not: the exporter's thread does the work)."""
    if not enabled():
        return
    for run_id, state in changes:
        if is_terminal(state) and _first_end(run_id):
            exporter().submit(run_id)


def _first_end(run_id: str) -> bool:
    """Whether this process hears of the root's end for the first time: an end told twice
    (the sweeper's ERR_WORKER_LOST, then the worker it thought dead) is sent once;
    export_traces and the page's button send a tree again on purpose."""
    with _lock:
        if run_id in _sent:
            return False
        _sent[run_id] = None
        if len(_sent) > SENT_REMEMBERED:
            _sent.pop(next(iter(_sent)))
        return True


def listen() -> None:
    """Export every run tree that ends from now on (called once at start-up, when on).

    The SDK is imported here, with the process, not when the first tree ends: that import
    (about 50 ms) would otherwise fall on the database thread that stored the tree's end.
    Its threads start with the first tree."""
    import delegations.runs.trace_export  # noqa: F401

    on_root_state_changed(tree_ended)


def flush_at_exit(timeout_s: float = EXIT_FLUSH_SECONDS) -> bool:
    """Send what is queued before this process ends (at most ``timeout_s``); True when all
    of it went. Does nothing in a process that never exported."""
    if _exporter is None:
        return True
    return _exporter.flush(timeout_s)


def trace_id_of(run: Run) -> str:
    """The trace id of the run's tree, as a trace viewer shows it ("" when tracing is off
    and no caller's trace reached the tree)."""
    if not enabled() and not run.traceparent:
        return ""
    return run.trace.trace_id


def trace_url(trace_id: str) -> str:
    """The viewer's page of ``trace_id`` (HANDOFF_TRACE_URL_TEMPLATE), or ""."""
    template = settings.HANDOFF_TRACE_URL_TEMPLATE
    return template.format(trace_id=trace_id) if template and trace_id else ""
