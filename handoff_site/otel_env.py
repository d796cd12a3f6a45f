"""The OpenTelemetry settings Handoff reads, checked at start-up.

Tracing is on when a collector is named, with the standard variables
(``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``), unless
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``. The SDK reads the same
variables itself when the exporter starts; what it would only warn about (or silently
ignore) here stops start-up with a message naming the variable, so a typo is found before
the first trace is lost. Only the standard library: nothing of OpenTelemetry is imported
while settings load, on or off.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

SAMPLERS = ("always_on", "always_off", "traceidratio", "parentbased_always_on",
            "parentbased_always_off", "parentbased_traceidratio")
RATIO_SAMPLERS = ("traceidratio", "parentbased_traceidratio")
# OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: the boolean most instrumentations read,
# and the newer modes of opentelemetry-util-genai (spans are what Handoff sends)
CONTENT_ON = ("true", "span_only", "span_and_event")
CONTENT_OFF = ("false", "no_content", "event_only")
# the longest a captured prompt, output, tool argument or result may be in a span, when
# OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT does not say (the SDK's own default is no limit)
DEFAULT_CONTENT_MAX_CHARS = 16384
MIN_CONTENT_MAX_CHARS = 64
BSP_VARIABLES = ("OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
                 "OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT")
# a header name as the OTLP exporter spec allows it (printable ASCII but separators)
_HEADER_NAME = re.compile(r"[!#-'*+\-.0-9A-Z^-z|~]+")


def _value(environ: Mapping[str, str], *names: str) -> tuple[str, str]:
    """The first of ``names`` that is set (and not empty), with its value."""
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return name, value
    return names[0], ""


def endpoint(environ: Mapping[str, str]) -> tuple[str, str]:
    return _value(environ, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def traces_enabled(environ: Mapping[str, str]) -> bool:
    """Whether run trees are exported: a collector is named and tracing is not switched off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(endpoint(environ)[1])


def _check_url(name: str, value: str, example: str) -> None:
    try:
        parts = urlsplit(value)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018  # a port that is not a number raises here
    except ValueError:
        ok = False
    if not ok:
        raise ImproperlyConfigured(f"{name}={value!r} is not an http(s) URL; set it to the "
                                   f"collector's OTLP/HTTP address, e.g. {example}.")


def _check_headers(name: str, value: str) -> None:
    """``name1=value1,name2=value2``; the values are never repeated (they hold API keys)."""
    for position, item in enumerate(value.split(","), start=1):
        if not item.strip():
            continue
        key, equals, _ = item.partition("=")
        if not equals or not _HEADER_NAME.fullmatch(key.strip()):
            raise ImproperlyConfigured(
                f"{name}: item {position} is not name=value (a header name, '=', its URL-encoded "
                f"value); write the headers as name1=value1,name2=value2.")


def _check_sampler(environ: Mapping[str, str]) -> None:
    sampler = environ.get("OTEL_TRACES_SAMPLER", "").strip()
    if sampler and sampler.lower() not in SAMPLERS:
        raise ImproperlyConfigured(f"OTEL_TRACES_SAMPLER={sampler!r} is not a sampler Handoff "
                                   f"knows; use one of: {', '.join(SAMPLERS)}.")
    argument = environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    if sampler.lower() in RATIO_SAMPLERS and argument:
        try:
            ratio = float(argument)
        except ValueError:
            ratio = -1.0
        if not 0.0 <= ratio <= 1.0:
            raise ImproperlyConfigured(f"OTEL_TRACES_SAMPLER_ARG={argument!r} must be a ratio "
                                       f"between 0 and 1 for {sampler}.")


def _check_exporter(environ: Mapping[str, str]) -> None:
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter and exporter != "otlp":
        raise ImproperlyConfigured(f"OTEL_TRACES_EXPORTER={exporter!r}: Handoff sends traces with "
                                   f"OTLP only; set it to otlp (or none to switch traces off).")
    name, protocol = _value(environ, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
    if protocol and protocol != "http/protobuf":
        raise ImproperlyConfigured(f"{name}={protocol!r}: Handoff sends OTLP over HTTP (http/protobuf); "
                                   f"point the endpoint at the collector's HTTP port (4318 by default).")


def _positive_int(environ: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < minimum:
        raise ImproperlyConfigured(f"{name}={raw!r} must be a whole number of at least {minimum}.")
    return int(raw)


def _check_batching(environ: Mapping[str, str]) -> None:
    for name in BSP_VARIABLES:
        _positive_int(environ, name, 1)
    queue = _positive_int(environ, "OTEL_BSP_MAX_QUEUE_SIZE", 2048)
    batch = _positive_int(environ, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)
    if batch > queue:
        raise ImproperlyConfigured(f"OTEL_BSP_MAX_EXPORT_BATCH_SIZE={batch} must not be larger than "
                                   f"OTEL_BSP_MAX_QUEUE_SIZE={queue}.")
    name, timeout = _value(environ, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
    if timeout:
        try:
            seconds = float(timeout)
        except ValueError:
            seconds = 0.0
        if seconds <= 0:
            raise ImproperlyConfigured(f"{name}={timeout!r} must be a positive number.")


def capture_content(environ: Mapping[str, str]) -> bool:
    raw = environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").strip().lower()
    if not raw or raw in CONTENT_OFF:
        return False
    if raw in CONTENT_ON:
        return True
    raise ImproperlyConfigured(
        f"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT={raw!r}: use true to send prompts, "
        f"outputs and tool arguments with the traces, false (the default) to leave them out.")


def content_max_chars(environ: Mapping[str, str]) -> int:
    name, raw = _value(environ, "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")
    return _positive_int({name: raw}, name, DEFAULT_CONTENT_MAX_CHARS, MIN_CONTENT_MAX_CHARS)


def trace_url_template(environ: Mapping[str, str]) -> str:
    """HANDOFF_TRACE_URL_TEMPLATE: the trace viewer's page of a trace, ``{trace_id}`` in it."""
    template = environ.get("HANDOFF_TRACE_URL_TEMPLATE", "").strip()
    if not template:
        return ""
    try:
        fields = {field for _, field, _, _ in string.Formatter().parse(template) if field is not None}
    except ValueError:
        fields = set()
    if fields != {"trace_id"}:
        raise ImproperlyConfigured(
            f"HANDOFF_TRACE_URL_TEMPLATE={template!r} must hold {{trace_id}} and no other field, "
            f"e.g. http://127.0.0.1:16686/trace/{{trace_id}} for Jaeger.")
    _check_url("HANDOFF_TRACE_URL_TEMPLATE", template.replace("{trace_id}", "0"), "http://127.0.0.1:16686/trace/{trace_id}")
    return template


def check(environ: Mapping[str, str]) -> None:
    """Raise ImproperlyConfigured naming the first OpenTelemetry variable Handoff cannot use
    (only when tracing is on: an unused variable stops nothing)."""
    if not traces_enabled(environ):
        return
    name, url = endpoint(environ)
    _check_url(name, url, "http://127.0.0.1:4318")
    for headers in ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"):
        _check_headers(headers, environ.get(headers, ""))
    _check_sampler(environ)
    _check_exporter(environ)
    _check_batching(environ)


def header_values(environ: Mapping[str, str]) -> list[str]:
    """The values of the exporter's headers (an observability vendor's API key is one):
    secrets of the installation, kept out of everything a run stores."""
    values = []
    for name in ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"):
        for item in environ.get(name, "").split(","):
            _, equals, value = item.partition("=")
            if equals and value.strip():
                values += [value.strip(), unquote(value.strip())]
    return values
