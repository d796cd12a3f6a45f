"""Sending run trees to the OTLP collector: the OpenTelemetry SDK's tracer provider, its
batch span processor and OTLP/HTTP exporter, fed by one thread that writes each finished
tree's spans from the event log (``trace_spans.py``).

Imported only when tracing is on (``traces.py``): the SDK and the exporter load with it.

Nothing here is on a run's path. The event log's listener only puts the root's id on a
bounded queue; this module's thread reads the tree from the database and writes its spans
to the batch span processor, whose own thread sends them. A collector that is down or slow
costs runs nothing: the processor's queue is bounded too, a span that finds it full is
dropped and counted rather than waiting, and so is a tree that finds the tree queue full;
spans the collector did not take are counted when their batch fails. Once a minute at
most, a warning says how many were lost and why (the exporter's own error lines, one per
failed batch, are folded into it).
"""

from __future__ import annotations

import logging
import os
import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from django.conf import settings
from django.db import connection
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.semconv.schemas import Schemas

from delegations.runs.redaction import redactor
from delegations.runs.trace_spans import SpanWriter, load_trees

logger = logging.getLogger("handoff.traces")

# the GenAI conventions Handoff's spans follow (README, Traces)
SCHEMA_URL = Schemas.V1_44_0.value
TREE_QUEUE_SIZE = 1000     # finished trees waiting to be written: far more than a lane finishes at once
# trees that end within GATHER_SECONDS of each other are read together, with one query for
# their runs and one for their events: 0.28 ms a W1 tree instead of 1.45 ms one by one
# (60 trees, SQLite, this machine); the batch processor holds spans for 5 s anyway
TREES_PER_READ = 50
GATHER_SECONDS = 1.0
REPORT_SECONDS = 60.0      # the most often a loss is logged
# the OTLP exporter's loggers write a line per failed batch: folded into the report instead
EXPORTER_LOGGERS = ("opentelemetry.exporter.otlp.proto.http.trace_exporter",
                    "opentelemetry.exporter.otlp.common.http")


def _handoff_version() -> str:
    try:
        return version("handoff")
    except PackageNotFoundError:
        return "0"


class PlannedIds(IdGenerator):
    """Gives the SDK's tracer the ids the event log decides (``trace_context``): the span
    writer plans them before it starts each span; unplanned ids are random, as the SDK's."""

    def __init__(self) -> None:
        self._planned = threading.local()

    def plan(self, span_id: str, trace_id: str | None) -> None:
        self._planned.span_id, self._planned.trace_id = span_id, trace_id

    def generate_span_id(self) -> int:
        planned, self._planned.span_id = getattr(self._planned, "span_id", None), None
        return int(planned, 16) if planned else random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        planned, self._planned.trace_id = getattr(self._planned, "trace_id", None), None
        return int(planned, 16) if planned else random.getrandbits(128) or 1


class Losses:
    """Spans that did not reach the collector, counted since the last report."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queued = 0            # spans handed to the processor, not yet through an export
        self.dropped = 0           # spans refused because the processor's queue was full
        self.failed = 0            # spans in batches the collector did not take
        self.trees_dropped = 0     # trees refused because the tree queue was full
        self.problem = ""          # the exporter's last complaint
        self.total = 0             # every span or tree ever lost
        self.reported_at = time.monotonic() - REPORT_SECONDS   # the first loss is told at once

    def report_due(self) -> str:
        """The warning to log now (and reset), or "" when there is none or it is too soon."""
        with self.lock:
            lost = self.dropped + self.failed
            if not (lost or self.trees_dropped):
                return ""
            if time.monotonic() - self.reported_at < REPORT_SECONDS:
                return ""
            parts = []
            if self.failed:
                parts.append(f"{self.failed} the collector did not take")
            if self.dropped:
                parts.append(f"{self.dropped} dropped with the span queue full")
            if self.trees_dropped:
                parts.append(f"{self.trees_dropped} whole trees dropped with the tree queue full")
            why = f" (last error: {self.problem})" if self.problem else ""
            self.dropped = self.failed = self.trees_dropped = 0
            self.problem = ""
            self.reported_at = time.monotonic()
        return (f"Traces not delivered since the last report: {', '.join(parts)}{why}. Runs are "
                f"not affected; check OTEL_EXPORTER_OTLP_ENDPOINT and the collector.")


class _ExporterComplaints(logging.Filter):
    """Keeps the OTLP exporter's last error line for the report instead of logging each."""

    def __init__(self, losses: Losses) -> None:
        super().__init__()
        self.losses = losses

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            with self.losses.lock:
                self.losses.problem = record.getMessage()[:300]
            return False
        return True


class CountingExporter(SpanExporter):
    """The OTLP exporter, counting the spans of the batches it could not deliver."""

    def __init__(self, inner: SpanExporter, losses: Losses, on_loss: Callable[[], None]) -> None:
        self.inner = inner
        self.losses = losses
        self.on_loss = on_loss

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception as exc:
            result = SpanExportResult.FAILURE
            self.losses.problem = f"{type(exc).__name__}: {exc}"[:300]
        with self.losses.lock:
            self.losses.queued -= len(spans)
            if result is not SpanExportResult.SUCCESS:
                self.losses.failed += len(spans)
                self.losses.total += len(spans)
        if result is not SpanExportResult.SUCCESS:
            self.on_loss()
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class BoundedHandOff(SpanProcessor):
    """Hands ended spans to the batch processor while its queue has room, else drops and
    counts them: the SDK's processor would drop the oldest span silently."""

    def __init__(self, inner: BatchSpanProcessor, losses: Losses, capacity: int) -> None:
        self.inner = inner
        self.losses = losses
        self.capacity = capacity

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.inner.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        with self.losses.lock:
            if self.losses.queued >= self.capacity:
                self.losses.dropped += 1
                self.losses.total += 1
                return
            self.losses.queued += 1
        self.inner.on_end(span)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _resource() -> Resource:
    """The service as OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES say (the SDK reads them),
    named ``handoff`` when they do not name it."""
    attributes: dict[str, Any] = {SERVICE_VERSION: _handoff_version()}
    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    if not named:
        attributes[SERVICE_NAME] = "handoff"
    return Resource.create(attributes)


def _setting(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else default   # checked at start-up (handoff_site/otel_env.py)


class TraceExporter:
    """This process's exporter: a tree queue, the thread that writes trees as spans, and the
    SDK's provider, batch processor and OTLP/HTTP exporter behind it."""

    def __init__(self, span_exporter: SpanExporter | None = None) -> None:
        self.pid = os.getpid()
        self.losses = Losses()
        self.ids = PlannedIds()
        capacity = _setting("OTEL_BSP_MAX_QUEUE_SIZE", 2048)
        exporter = CountingExporter(span_exporter or OTLPSpanExporter(), self.losses, self._report)
        batches = BatchSpanProcessor(exporter, max_queue_size=capacity,
                                     max_export_batch_size=_setting("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512))
        self.processor = BoundedHandOff(batches, self.losses, capacity)
        # shut down by flush_at_exit, within a bound: the SDK's own exit hook would wait up
        # to 30 s for a collector that is down
        self.provider = TracerProvider(resource=_resource(), id_generator=self.ids, shutdown_on_exit=False,
                                       span_limits=SpanLimits(
                                           max_span_attribute_length=settings.HANDOFF_TRACE_CONTENT_MAX_CHARS))
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("handoff", _handoff_version(), schema_url=SCHEMA_URL)
        self._complaints = _ExporterComplaints(self.losses)
        for name in EXPORTER_LOGGERS:
            logging.getLogger(name).addFilter(self._complaints)
        self._trees: queue.Queue[str] = queue.Queue(TREE_QUEUE_SIZE)
        self._idle = threading.Condition()
        self._busy = 0               # trees queued or being written
        self._thread = threading.Thread(target=self._write_forever, name="handoff-traces", daemon=True)
        self._thread.start()

    # -- what other threads call ------------------------------------------------------------

    def submit(self, root_id: str) -> None:
        """Queue a finished tree for export; never blocks (a full queue drops it, counted)."""
        with self._idle:
            self._busy += 1
        try:
            self._trees.put_nowait(root_id)
        except queue.Full:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()
            with self.losses.lock:
                self.losses.trees_dropped += 1
                self.losses.total += 1
            self._report()

    def flush(self, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until the queued trees are written and every span
        went through an export; False when that took longer (``losses`` says whether the
        collector took them)."""
        deadline = time.monotonic() + timeout_s
        with self._idle:
            if not self._idle.wait_for(lambda: self._busy == 0, timeout=timeout_s):
                return False
        remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
        return bool(self.processor.force_flush(remaining_ms)) and self.losses.queued == 0

    def export_now(self, *root_ids: str) -> int:
        """Write these trees' spans in the calling thread: how many were recorded."""
        writer = SpanWriter(self.tracer, self.ids.plan, capture=settings.HANDOFF_TRACE_CAPTURE_CONTENT,
                            max_chars=settings.HANDOFF_TRACE_CONTENT_MAX_CHARS, secrets=redactor())
        return sum(writer.write(tree) for tree in load_trees(list(root_ids)))

    def shutdown(self) -> None:
        self.provider.shutdown()
        for name in EXPORTER_LOGGERS:
            logging.getLogger(name).removeFilter(self._complaints)

    # -- the writer thread --------------------------------------------------------------------

    def _write_forever(self) -> None:
        while True:
            try:
                root_ids = [self._trees.get(timeout=REPORT_SECONDS)]
            except queue.Empty:
                self._report()
                continue
            gather_until = time.monotonic() + GATHER_SECONDS
            while len(root_ids) < TREES_PER_READ:
                try:
                    root_ids.append(self._trees.get(timeout=max(0.0, gather_until - time.monotonic())))
                except queue.Empty:
                    break
            try:
                self.export_now(*root_ids)
            except Exception:
                logger.exception("The traces of runs %s could not be written; the runs are not affected",
                                 ", ".join(root_ids))
            finally:
                if self._trees.empty():
                    connection.close()   # the next tree may be hours away: hold no connection
                with self._idle:
                    self._busy -= len(root_ids)
                    self._idle.notify_all()
            self._report()

    def _report(self) -> None:
        warning = self.losses.report_due()
        if warning:
            logger.warning(warning)
