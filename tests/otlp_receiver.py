"""A real OTLP/HTTP trace receiver on loopback, for the tests and the benchmark: it decodes
each ``ExportTraceServiceRequest`` the exporter POSTs to ``/v1/traces`` (protobuf, with
the ``opentelemetry-proto`` package) and keeps its spans, the resource and scope they
came with, and the request headers."""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.services import http_on_loopback


def value_of(any_value: Any) -> Any:
    """An OTLP ``AnyValue`` as Python."""
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return tuple(value_of(item) for item in any_value.array_value.values)
    return getattr(any_value, kind) if kind else None


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    start_ns: int
    end_ns: int
    status_code: int
    status_message: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str
    schema_url: str


@dataclass
class Receiver:
    url: str = ""
    spans: list[ReceivedSpan] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, body: bytes, headers: dict[str, str]) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with self.lock:
            self.headers.append(headers)
            for resource_spans in request.resource_spans:
                resource = {a.key: value_of(a.value) for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append(ReceivedSpan(
                            span.name, span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(),
                            span.kind, span.start_time_unix_nano, span.end_time_unix_nano,
                            span.status.code, span.status.message,
                            {a.key: value_of(a.value) for a in span.attributes}, resource,
                            scope_spans.scope.name, scope_spans.schema_url))

    def wait_for(self, condition: Callable[[list[ReceivedSpan]], bool], timeout: float = 20.0) -> list[ReceivedSpan]:
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                spans = list(self.spans)
            if condition(spans):
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"the receiver did not get the spans in time ({len(spans)} so far)")
            time.sleep(0.05)


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A receiver on a free 127.0.0.1 port; its ``url`` is the base OTEL_EXPORTER_OTLP_ENDPOINT."""
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            encoding = self.headers.get("Content-Encoding", "")
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                self.send_response(404)
                self.end_headers()
                return
            receiver.take(body, {name.lower(): value for name, value in self.headers.items()})
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    with http_on_loopback(Handler) as base_url:
        receiver.url = base_url
        yield receiver
