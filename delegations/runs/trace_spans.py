"""A finished run tree as OpenTelemetry spans, in the GenAI semantic conventions, made from
its stored events.

Nothing here times anything: every span starts and ends at the timestamps of the events
that tell of it (a model call ends at its ``model_call`` event and began ``duration_ms``
before), and its ids follow from the run ids and event numbers (``trace_context``), so a
tree resumed by another worker after a crash reads as one trace, and exporting it again
sends the same spans. What a span says:

- each run: ``invoke_agent {agent}`` (INTERNAL), under its parent run's span (the root's
  under the caller's, when the request that started it carried a ``traceparent``), with
  Handoff's own figures under ``handoff.`` (run id, state, budget limits and use,
  capabilities, criteria met) and its error code as the status (with the error's message
  only when content is captured: it may quote the model's answer);
- each model call: ``chat {model}`` (CLIENT) with the provider, models, tokens and finish
  reason;
- each tool call: ``execute_tool {tool}`` with its name and call id, failed with the
  error's code;
- each wait in the inbox: ``await_approval {kind}``, who decided what and how long it took.

Prompts, outputs, tool arguments and results, approval titles and comments go in only
when ``capture`` is on, each cut to ``max_chars``; every text passes the installation's
redactor first, whatever the switch (the events were stored redacted already).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from django.db.models import Q
from django.db.models.fields.json import KeyTextTransform
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
)

from delegations.models import Run, RunEvent
from delegations.protocol.events import EventType
from delegations.protocol.lifecycle import RunState
from delegations.protocol.redaction import Redactor
from delegations.protocol.trace_context import (
    event_span_id,
    parse_traceparent,
    root_trace_id,
    run_span_id,
)

# the provider each adapter talks to, as the GenAI conventions name providers (a custom
# value where none of theirs fits: the local model runs in llama.cpp, in-process)
PROVIDERS = {"openai": "openai", "anthropic": "anthropic", "local": "llama_cpp", "scripted": "handoff.scripted"}
FAILED_STATES = {RunState.FAILED, RunState.TIMEOUT, RunState.REJECTED, RunState.CANCELLED}
BUDGET_AXES = (("max_model_calls", "model_calls"), ("max_tokens", "total_tokens"),
               ("max_cost_usd", "cost_usd"), ("max_runtime_s", "runtime_s"))
TRUNCATED = "…[truncated: {shown} of {total} characters]"

# before each span is started, the ids it must get: the exporter's id generator hands
# them to the SDK's tracer (trace id only for a span with no parent)
PlanIds = Callable[[str, str | None], None]


class StoredEvent(NamedTuple):
    """An event of the log, as much of it as a trace needs."""

    run_id: str
    seq: int
    type: str
    data: dict[str, Any]
    ts: datetime


@dataclass
class TreeRecord:
    """A run tree as stored: its runs (parents before children) and each run's events."""

    runs: list[Run]
    events: dict[str, list[StoredEvent]] = field(default_factory=dict)

    @property
    def root(self) -> Run:
        return self.runs[0]


# columns a trace never reads: a scripted run's config alone can be hundreds of kB, and
# loading these cost more than writing the spans (the model a run asked for is read from
# its config in SQL, as requested_model)
UNREAD_COLUMNS = ("packet", "adapter_config", "previous_failure")


def load_trees(root_ids: list[str]) -> list[TreeRecord]:
    """The trees rooted at ``root_ids`` (those that are root runs), with two queries for
    all of them: a burst of finished runs is written in a few reads."""
    wanted = set(root_ids)
    runs: list[Run] = sorted(
        Run.objects.filter(Q(pk__in=wanted) | Q(root_id__in=wanted)).defer(*UNREAD_COLUMNS)
        .annotate(requested_model=KeyTextTransform("model", "adapter_config")),
        key=lambda run: (run.depth, run.created_at, run.pk))
    trees = {run.pk: TreeRecord([run]) for run in runs if run.pk in wanted and run.parent_id is None}
    for run in runs:
        if run.pk not in trees and run.root_id in trees:
            trees[run.root_id].runs.append(run)
    rows = (RunEvent.objects.filter(run_id__in=[run.pk for tree in trees.values() for run in tree.runs])
            .order_by("run_id", "seq").values_list("run_id", "seq", "type", "data", "ts"))
    tree_of = {run.pk: tree for tree in trees.values() for run in tree.runs}
    for row in rows:
        tree_of[row[0]].events.setdefault(row[0], []).append(StoredEvent(*row))
    return [trees[root_id] for root_id in dict.fromkeys(root_ids) if root_id in trees]


def nanoseconds(stamp: datetime) -> int:
    return int(stamp.timestamp()) * 1_000_000_000 + stamp.microsecond * 1000


class SpanWriter:
    """Writes one tree's spans through ``tracer``; ``plan`` fixes each span's ids first."""

    def __init__(self, tracer: Tracer, plan: PlanIds, *, capture: bool, max_chars: int,
                 secrets: Redactor) -> None:
        self.tracer = tracer
        self.plan = plan
        self.capture = capture
        self.max_chars = max_chars
        self.secrets = secrets

    def write(self, tree: TreeRecord) -> int:
        """Start and end every span of ``tree`` (the processor takes each as it ends);
        returns how many were recorded (none when the sampler left the trace out)."""
        spans: dict[str, tuple[Span, int]] = {}
        recorded = 0
        for run in tree.runs:
            parent = spans.get(run.parent_id or "")
            if run.parent_id is not None and parent is None:
                continue   # an orphan row (its parent was deleted): no place in the trace
            span, end, inside = self._run(run, tree.events.get(run.pk, []), parent[0] if parent else None)
            spans[run.pk] = (span, end)
            recorded += inside
        for span, end in reversed(spans.values()):   # children end before their parents
            recorded += span.is_recording()
            span.end(end_time=end)
        return recorded

    # -- one run -------------------------------------------------------------------------

    def _run(self, run: Run, events: list[StoredEvent], parent: Span | None) -> tuple[Span, int, int]:
        """The run's span, started (it ends after its children), its end time, and how many
        spans inside it were recorded (model calls, tool calls, approval waits)."""
        start = nanoseconds(events[0].ts if events else run.created_at)
        end = nanoseconds(events[-1].ts if events else (run.finished_at or run.created_at))
        provider = PROVIDERS.get(run.adapter_name, run.adapter_name or "handoff")
        model = str(getattr(run, "requested_model", None) or _first_model(events) or "")
        agent = _agent_name(run)
        attributes: dict[str, Any] = {
            gen_ai.GEN_AI_OPERATION_NAME: "invoke_agent", gen_ai.GEN_AI_AGENT_NAME: agent,
            gen_ai.GEN_AI_PROVIDER_NAME: provider, gen_ai.GEN_AI_CONVERSATION_ID: run.session_key,
            "handoff.run.id": run.pk, "handoff.run.root_id": run.root_run_id,
            "handoff.run.depth": run.depth, "handoff.run.state": run.state,
            "handoff.run.attempt": run.attempt, "handoff.run.resumed": run.recoveries,
            "handoff.run.label": run.label, "handoff.subagent_type": run.subagent_type,
            "handoff.adapter": run.adapter_name, "handoff.capabilities": list(run.capabilities or []),
        }
        if model:
            attributes[gen_ai.GEN_AI_REQUEST_MODEL] = model
        if run.skill:
            name, _, version = run.skill.partition("@")
            attributes["handoff.skill"] = run.skill
            if version:
                attributes[gen_ai.GEN_AI_AGENT_VERSION] = version
        if run.parent_id:
            attributes["handoff.run.parent_id"] = run.parent_id
        attributes.update(_budget_attributes(run))
        attributes.update(_criteria_attributes(run))
        status = (run.result or {}).get("status")
        if status:
            attributes["handoff.result.status"] = str(status)
        if run.findings:
            attributes["handoff.lint.findings"] = len(run.findings)
        if self.capture:
            attributes.update(self._run_content(run))
        context = self._parent_context(run, parent)
        self.plan(run_span_id(run.pk), root_trace_id(run.root_run_id) if parent is None else None)
        span = self.tracer.start_span(" ".join(_unique(["invoke_agent", agent, run.label])), context=context,
                                      kind=SpanKind.INTERNAL, attributes=self._clean(attributes),
                                      start_time=start)
        error = _run_error(run)
        if error is not None:
            code, message = error
            span.set_attribute(ERROR_TYPE, code)
            # the message may quote what the model answered: content, like the rest
            said = f"{code}: {message}" if message and self.capture else code
            span.set_status(Status(StatusCode.ERROR, self._text(said)))
        elif run.state == RunState.COMPLETE:
            span.set_status(Status(StatusCode.OK))
        for name, stamp, event_attributes in self._run_events(events):
            span.add_event(name, self._clean(event_attributes), timestamp=stamp)
        inside = trace.set_span_in_context(span)
        recorded = 0
        for event, text, tool_calls in _model_calls(events):
            recorded += self._chat(run, event, text, tool_calls, provider, model, inside)
        for call_id, (started, finished) in _tool_calls(events).items():
            recorded += self._tool(run, call_id, started, finished, end, inside)
        for key, (asked, decided) in _approvals(events).items():
            recorded += self._approval(run, key, asked, decided, end, inside)
        return span, end, recorded

    def _parent_context(self, run: Run, parent: Span | None) -> Context | None:
        if parent is not None:
            return trace.set_span_in_context(parent)
        caller = parse_traceparent(run.traceparent)
        if caller is None:
            return None
        remote = SpanContext(int(caller.trace_id, 16), int(caller.span_id, 16), is_remote=True,
                             trace_flags=TraceFlags(TraceFlags.SAMPLED if caller.sampled else TraceFlags.DEFAULT))
        return trace.set_span_in_context(NonRecordingSpan(remote))

    def _run_content(self, run: Run) -> dict[str, Any]:
        asked = run.goal
        content: dict[str, Any] = {}
        if asked:
            content[gen_ai.GEN_AI_INPUT_MESSAGES] = self._json(
                [{"role": "user", "parts": [{"type": "text", "content": str(asked)}]}])
        if run.result:
            parts = [{"type": "text", "content": str(run.result.get("summary") or "")}]
            if run.result.get("output_payload") is not None:
                parts.append({"type": "text", "content": json.dumps(run.result["output_payload"])})
            content[gen_ai.GEN_AI_OUTPUT_MESSAGES] = self._json(
                [{"role": "assistant", "parts": parts, "finish_reason": "stop"}])
        return content

    def _run_events(self, events: list[StoredEvent]) -> Iterator[tuple[str, int, dict[str, Any]]]:
        """The run's state changes, the messages it was sent and its warnings, as span events."""
        for event in events:
            data = event.data or {}
            if event.type == EventType.STATE:
                yield "handoff.state", nanoseconds(event.ts), {"handoff.run.state": str(data.get("state"))}
            elif event.type == EventType.MESSAGE:
                said = {"handoff.message.from": str(data.get("from") or "")}
                if self.capture:
                    said["handoff.message.text"] = self._cut(str(data.get("text") or ""))
                yield "handoff.message", nanoseconds(event.ts), said
            elif event.type == EventType.LOG and data.get("level") in ("warning", "error"):
                warned = {"handoff.log.level": str(data["level"])}
                if self.capture:   # a validation warning may quote the model's answer
                    warned["handoff.log.message"] = self._cut(str(data.get("message") or ""))
                yield "handoff.log", nanoseconds(event.ts), warned

    # -- the spans inside a run ------------------------------------------------------------

    def _chat(self, run: Run, event: StoredEvent, text: str, tool_calls: list[dict[str, Any]],
              provider: str, model: str, context: Context) -> int:
        data = event.data or {}
        end = nanoseconds(event.ts)
        start = end - int(float(data.get("duration_ms") or 0) * 1_000_000)
        answered = str(data.get("model") or model)
        requested = model or answered
        attributes: dict[str, Any] = {
            gen_ai.GEN_AI_OPERATION_NAME: "chat", gen_ai.GEN_AI_PROVIDER_NAME: provider,
            gen_ai.GEN_AI_REQUEST_MODEL: requested, gen_ai.GEN_AI_RESPONSE_MODEL: answered,
            gen_ai.GEN_AI_CONVERSATION_ID: run.session_key,
            gen_ai.GEN_AI_USAGE_INPUT_TOKENS: int(data.get("input_tokens") or 0),
            gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: int(data.get("output_tokens") or 0),
            "handoff.run.id": run.pk, "handoff.iteration": int(data.get("iteration") or 0),
            "handoff.cost_usd": float(data.get("cost_usd") or 0.0),
            "handoff.tool_calls": int(data.get("tool_calls") or 0),
        }
        finish = str(data.get("finish_reason") or "")
        if finish:
            attributes[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS] = [finish]
        if self.capture:
            parts: list[dict[str, Any]] = [{"type": "text", "content": text}] if text else []
            parts += [{"type": "tool_call", "id": str(call.get("id") or ""), "name": str(call.get("name") or ""),
                       "arguments": call.get("arguments")} for call in tool_calls]
            attributes[gen_ai.GEN_AI_OUTPUT_MESSAGES] = self._json(
                [{"role": "assistant", "parts": parts, "finish_reason": finish or "stop"}])
        self.plan(event_span_id(run.pk, event.seq), None)
        span = self.tracer.start_span(f"chat {requested}".strip(), context=context, kind=SpanKind.CLIENT,
                                      attributes=self._clean(attributes), start_time=start)
        return _ended(span, end)

    def _tool(self, run: Run, call_id: str, started: StoredEvent, finished: StoredEvent | None,
              run_end: int, context: Context) -> int:
        asked = started.data or {}
        name = str(asked.get("name") or "tool")
        attributes: dict[str, Any] = {
            gen_ai.GEN_AI_OPERATION_NAME: "execute_tool", gen_ai.GEN_AI_TOOL_NAME: name,
            gen_ai.GEN_AI_TOOL_CALL_ID: call_id, gen_ai.GEN_AI_TOOL_TYPE: "function",
            "handoff.run.id": run.pk}
        answer = (finished.data or {}) if finished is not None else {}
        if self.capture:
            attributes[gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS] = self._json(asked.get("arguments"))
            if finished is not None:
                attributes[gen_ai.GEN_AI_TOOL_CALL_RESULT] = self._json(
                    answer.get("result") if answer.get("ok") else answer.get("error"))
        self.plan(event_span_id(run.pk, started.seq), None)
        span = self.tracer.start_span(f"execute_tool {name}", context=context, kind=SpanKind.INTERNAL,
                                      attributes=self._clean(attributes), start_time=nanoseconds(started.ts))
        if finished is None:
            span.set_attribute(ERROR_TYPE, "NO_RESULT")
            span.set_status(Status(StatusCode.ERROR, "The run ended before this tool call had a result."))
        elif not answer.get("ok"):
            reported = answer.get("error")
            error: dict[str, Any] = reported if isinstance(reported, dict) else {}
            code = str(error.get("code") or "ERR_TOOL_FAILURE")
            span.set_attribute(ERROR_TYPE, code)
            message = f"{code}: {error.get('message')}" if self.capture and error.get("message") else code
            span.set_status(Status(StatusCode.ERROR, self._text(message)))
        return _ended(span, nanoseconds(finished.ts) if finished is not None else run_end)

    def _approval(self, run: Run, key: str, asked: StoredEvent, decided: StoredEvent | None,
                  run_end: int, context: Context) -> int:
        request = asked.data or {}
        answer = (decided.data or {}) if decided is not None else {}
        kind = str(request.get("kind") or "approval")
        end = nanoseconds(decided.ts) if decided is not None else run_end
        attributes: dict[str, Any] = {
            "handoff.run.id": run.pk, "handoff.approval.key": key, "handoff.approval.kind": kind,
            "handoff.approval.risk": str(request.get("risk") or ""),
            "handoff.approval.decision": str(answer.get("decision") or "undecided"),
            "handoff.approval.wait_s": round((end - nanoseconds(asked.ts)) / 1e9, 3)}
        if answer.get("decided_by"):
            attributes["handoff.approval.decided_by"] = str(answer["decided_by"])
        if self.capture:
            attributes["handoff.approval.title"] = self._cut(str(request.get("title") or ""))
            if answer.get("comment"):
                attributes["handoff.approval.comment"] = self._cut(str(answer["comment"]))
        self.plan(event_span_id(run.pk, asked.seq), None)
        span = self.tracer.start_span(f"await_approval {kind}", context=context, kind=SpanKind.INTERNAL,
                                      attributes=self._clean(attributes), start_time=nanoseconds(asked.ts))
        if answer.get("decision") == "reject":
            span.set_attribute(ERROR_TYPE, "REJECTED_BY_PERSON")
        return _ended(span, end)

    # -- text --------------------------------------------------------------------------------

    def _cut(self, text: str) -> str:
        """``text`` redacted and cut to ``max_chars``, saying so when it was cut."""
        text = self.secrets.text(text) if self.secrets else text
        if len(text) <= self.max_chars:
            return text
        marker = TRUNCATED.format(shown=self.max_chars, total=len(text))
        return text[:max(0, self.max_chars - len(marker))] + marker

    def _json(self, value: Any) -> str:
        return self._cut(json.dumps(value, ensure_ascii=False, default=str))

    def _text(self, text: str) -> str:
        return self.secrets.text(text) if self.secrets else text

    def _clean(self, attributes: dict[str, Any]) -> dict[str, Any]:
        """Attributes as OpenTelemetry takes them (no None), every text redacted."""
        clean: dict[str, Any] = {}
        for key, value in attributes.items():
            if value is None or value == "":
                continue
            if isinstance(value, str):
                value = self._text(value)
            elif isinstance(value, list):
                value = [self._text(item) if isinstance(item, str) else item for item in value]
            clean[key] = value
        return clean


def _ended(span: Span, end: int) -> int:
    """End ``span`` at ``end``; 1 when it was recorded (the sampler kept it), else 0."""
    recorded = int(span.is_recording())
    span.end(end_time=end)
    return recorded


# -- reading the events ------------------------------------------------------------------------

def _unique(words: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(word for word in words if word))


def _agent_name(run: Run) -> str:
    """What the run is, as a person would name the agent: its skill, else its role."""
    if run.skill:
        return run.skill.partition("@")[0]
    return run.subagent_type or run.label or "subagent"


def _first_model(events: list[StoredEvent]) -> str:
    return next((str((e.data or {}).get("model") or "") for e in events if e.type == EventType.MODEL_CALL), "")


def _model_calls(events: list[StoredEvent]) -> list[tuple[StoredEvent, str, list[dict[str, Any]]]]:
    """Each model call with the text it streamed and the tool calls it asked for; one per
    iteration (a call made again after a resume replaces the one before)."""
    calls: dict[int, tuple[StoredEvent, str, list[dict[str, Any]]]] = {}
    text: list[str] = []
    current: list[dict[str, Any]] | None = None
    for event in events:
        data = event.data or {}
        if event.type == EventType.TEXT:
            text.append(str(data.get("delta") or ""))
        elif event.type == EventType.MODEL_CALL:
            current = []
            calls[int(data.get("iteration") or len(calls) + 1)] = (event, "".join(text), current)
            text = []
        elif event.type == EventType.TOOL_CALL and current is not None:
            current.append(data)
    return list(calls.values())


def _tool_calls(events: list[StoredEvent]) -> dict[str, tuple[StoredEvent, StoredEvent | None]]:
    """Each tool call by id: when it was first asked for, and its last result (a call
    reported again after a resume is one call)."""
    calls: dict[str, tuple[StoredEvent, StoredEvent | None]] = {}
    for event in events:
        call_id = str((event.data or {}).get("id") or "")
        if not call_id:
            continue
        if event.type == EventType.TOOL_CALL and call_id not in calls:
            calls[call_id] = (event, None)
        elif event.type == EventType.TOOL_RESULT and call_id in calls:
            calls[call_id] = (calls[call_id][0], event)
    return calls


def _approvals(events: list[StoredEvent]) -> dict[str, tuple[StoredEvent, StoredEvent | None]]:
    """Each question put to a person, by key: when it was asked, and the decision."""
    waits: dict[str, tuple[StoredEvent, StoredEvent | None]] = {}
    for event in events:
        if event.type != EventType.APPROVAL:
            continue
        key = str((event.data or {}).get("key") or "")
        if "decision" not in (event.data or {}):
            waits.setdefault(key, (event, None))
        elif key in waits:
            waits[key] = (waits[key][0], event)
    return waits


def _budget_attributes(run: Run) -> dict[str, Any]:
    """Each limit the run had and what its subtree used of it (usage is charged upwards)."""
    budget, usage = run.budget or {}, run.usage or {}
    figures: dict[str, Any] = {}
    for limit, used in BUDGET_AXES:
        if budget.get(limit) is not None:
            figures[f"handoff.budget.{limit}"] = budget[limit]
        if usage.get(used) is not None:
            figures[f"handoff.usage.{used}"] = usage[used]
    return figures


def _criteria_attributes(run: Run) -> dict[str, Any]:
    items = (run.criteria_report or {}).get("items") or []
    if not items:
        return {}
    return {"handoff.criteria.total": len(items),
            "handoff.criteria.met": sum(1 for item in items if item.get("met"))}


def _run_error(run: Run) -> tuple[str, str] | None:
    """The code and message a run that did not succeed ended with, or None."""
    error = run.error or {}
    report = (run.result or {}).get("error_report") or {}
    if run.state in FAILED_STATES:
        code = str(error.get("code") or report.get("code") or run.state)
        return code, str(error.get("message") or report.get("message") or "")
    if (run.result or {}).get("status") == "FAILURE":
        return str(report.get("code") or "FAILURE"), str(report.get("message") or "")
    return None
