"""Run trees as OpenTelemetry traces: one trace per tree, written from the event log, in the
GenAI conventions (an in-memory exporter behind the real SDK and batch processor)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from delegations.inbox.decisions import approval_decide
from delegations.models import Approval, Run, RunEvent
from delegations.protocol.trace_context import run_span_id
from delegations.runs import traces
from delegations.runs.maintenance import sweep_runs
from delegations.runs.trace_export import TraceExporter
from delegations.runs.trace_spans import nanoseconds
from delegations.runs.workflows import run_create
from tests.conftest import bearer
from tests.delegations import scripts
from tests.delegations.runs.test_execution import expire_lease, run_whose_worker_dies

pytestmark = [pytest.mark.django_db(transaction=True)]

USAGE = {"input_tokens": 120, "output_tokens": 30}
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.fixture
def collector(settings: Any, monkeypatch: Any) -> Iterator[InMemorySpanExporter]:
    """Tracing on, with this process's exporter sending to memory instead of over OTLP."""
    settings.HANDOFF_TRACES_ENABLED = True
    memory = InMemorySpanExporter()
    exporter = TraceExporter(span_exporter=memory)
    monkeypatch.setattr(traces, "_exporter", exporter)
    traces.listen()
    yield memory
    exporter.shutdown()


def finished_spans(memory: InMemorySpanExporter) -> list[ReadableSpan]:
    assert traces.flush_at_exit(10), "the trees were not exported in time"
    return list(memory.get_finished_spans())


def named(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name.startswith(prefix)]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def hex_id(number: int, width: int) -> str:
    return format(number, f"0{width}x")


def with_usage(config: dict[str, Any]) -> dict[str, Any]:
    for turn in config["script"]:
        turn["usage"] = USAGE
    for child in config.get("children", {}).values():
        with_usage(child)
    return config


def test_a_tree_is_one_trace_of_agent_chat_and_tool_spans_timed_by_its_events(
        collector: InMemorySpanExporter, immediate_tasks: None, composer: Any) -> None:
    root = run_create(packet=scripts.packet(), adapter="scripted",
                      config=with_usage(scripts.with_child(label="kid")), owner=composer)
    child = Run.objects.get(parent=root)
    assert (root.state, child.state) == ("COMPLETE", "COMPLETE")

    spans = finished_spans(collector)
    assert {hex_id(span.context.trace_id, 32) for span in spans} == {root.pk}   # the trace id is the root's run id
    agents = {attrs(span)["handoff.run.id"]: span for span in named(spans, "invoke_agent")}
    assert set(agents) == {root.pk, child.pk}
    top, kid = agents[root.pk], agents[child.pk]
    assert top.name == "invoke_agent researcher" and kid.name == "invoke_agent researcher kid"
    assert top.parent is None and kid.parent is not None
    assert kid.parent.span_id == top.context.span_id == int(run_span_id(root.pk), 16)
    assert attrs(top)["gen_ai.operation.name"] == "invoke_agent"
    assert attrs(top)["gen_ai.provider.name"] == "handoff.scripted"
    assert attrs(top)["handoff.run.state"] == "COMPLETE" and top.status.status_code is StatusCode.OK
    assert attrs(top)["handoff.budget.max_model_calls"] == 20
    assert attrs(top)["handoff.usage.model_calls"] == 3   # the tree's calls, charged to the root
    assert attrs(top)["handoff.criteria.met"] == attrs(top)["handoff.criteria.total"] == 1

    chats = named(spans, "chat")
    assert len(chats) == 3 and all(attrs(span)["gen_ai.usage.input_tokens"] == 120 for span in chats)
    assert {span.parent.span_id for span in chats if span.parent} == {top.context.span_id, kid.context.span_id}
    first = min(chats, key=lambda span: span.start_time or 0)
    assert attrs(first)["gen_ai.operation.name"] == "chat"
    assert attrs(first)["gen_ai.usage.output_tokens"] == 30
    assert attrs(first)["gen_ai.response.finish_reasons"] == ("tool_calls",)

    [delegate] = named(spans, "execute_tool")   # yield_control is the answer, not a tool run
    assert attrs(delegate)["gen_ai.tool.name"] == "delegate_task" and attrs(delegate)["gen_ai.tool.call.id"]
    assert delegate.parent is not None and delegate.parent.span_id == top.context.span_id

    # every time is an event's: the root opens at its first event and closes at its last
    events = list(RunEvent.objects.filter(run=root).order_by("seq"))
    assert top.start_time == nanoseconds(events[0].ts) and top.end_time == nanoseconds(events[-1].ts)
    call = next(e for e in events if e.type == "model_call")
    assert any(span.end_time == nanoseconds(call.ts) for span in chats)


def test_a_run_that_waited_for_approval_shows_the_wait_who_decided_and_how_long(
        collector: InMemorySpanExporter, immediate_tasks: None, composer: Any, approver: Any) -> None:
    run = run_create(packet=scripts.approval_packet(), adapter="scripted",
                     config=scripts.needs_approval(), owner=composer)
    assert run.state == "AWAITING_APPROVAL"
    time.sleep(0.3)
    assert traces.flush_at_exit(5) and collector.get_finished_spans() == ()   # parked: not sent yet
    approval_decide(approval=Approval.objects.get(run=run), user=approver, decision="approve")

    spans = finished_spans(collector)
    [wait] = named(spans, "await_approval")
    assert wait.name == "await_approval capability"
    assert attrs(wait)["handoff.approval.decision"] == "approve"
    assert attrs(wait)["handoff.approval.decided_by"] == approver.get_username()
    assert attrs(wait)["handoff.approval.wait_s"] >= 0.3
    [agent] = named(spans, "invoke_agent")
    assert wait.parent is not None and wait.parent.span_id == agent.context.span_id
    assert [span.name for span in named(spans, "execute_tool")].count("execute_tool delete_file") == 1


def test_a_run_resumed_after_its_worker_died_is_one_trace_with_nothing_doubled(
        collector: InMemorySpanExporter, immediate_tasks: None, composer: Any) -> None:
    run = run_whose_worker_dies(composer)
    assert Run.objects.get(pk=run.pk).state == "WORKING"
    expire_lease(run)
    assert sweep_runs()["resumed"] == [run.pk]
    run.refresh_from_db()
    assert run.state == "COMPLETE" and run.recoveries == 1

    spans = finished_spans(collector)
    assert len({span.context.trace_id for span in spans}) == 1
    assert len({span.context.span_id for span in spans}) == len(spans)
    [agent] = named(spans, "invoke_agent")
    assert attrs(agent)["handoff.run.resumed"] == 1
    assert len(named(spans, "chat")) == 2
    assert [s.name for s in named(spans, "execute_tool")] == ["execute_tool apply_edit"]

    # sent again, it is the same trace with the same spans (a viewer shows it once)
    exporter = traces.exporter()
    assert exporter.export_now(run.pk) == len(spans)
    again = finished_spans(collector)[len(spans):]
    assert sorted((s.context.span_id, s.name) for s in again) == sorted((s.context.span_id, s.name) for s in spans)


def test_a_failed_run_carries_handoffs_error_code_as_its_status(
        collector: InMemorySpanExporter, immediate_tasks: None, composer: Any) -> None:
    config = {"script": [{"text": "Reading.", "tool_calls": [
        {"name": "read_file", "arguments": {"path": "missing.txt"}}]}]}
    run = run_create(packet=scripts.packet(capabilities=["fs_read"]), adapter="scripted",
                     config=config, owner=composer)
    assert run.state == "FAILED"

    spans = finished_spans(collector)
    [agent] = named(spans, "invoke_agent")
    assert agent.status.status_code is StatusCode.ERROR
    assert attrs(agent)["error.type"] == run.error["code"]
    assert agent.status.description == run.error["code"]   # its message is content: left out
    [read] = named(spans, "execute_tool read_file")
    assert read.status.status_code is StatusCode.ERROR and attrs(read)["error.type"].startswith("ERR_")


def test_prompts_outputs_and_tool_arguments_stay_out_unless_capture_is_on(
        collector: InMemorySpanExporter, immediate_tasks: None, composer: Any, settings: Any) -> None:
    secretive = scripts.packet(goal="Compare the caching options of project Nightjar")
    run = run_create(packet=secretive, adapter="scripted", config=scripts.leaf(), owner=composer)
    spans = finished_spans(collector)
    sent = json.dumps([attrs(span) for span in spans])
    assert "Nightjar" not in sent and "gen_ai.input.messages" not in sent
    assert "gen_ai.output.messages" not in sent

    settings.HANDOFF_TRACE_CAPTURE_CONTENT = True
    settings.HANDOFF_TRACE_CONTENT_MAX_CHARS = 200
    huge = "x" * 5000
    run = run_create(packet=secretive, adapter="scripted", config=scripts.leaf({"answer": 42, "notes": huge}),
                     owner=composer)
    spans = [span for span in finished_spans(collector) if attrs(span).get("handoff.run.id") == run.pk]
    [agent] = named(spans, "invoke_agent")
    assert "Nightjar" in attrs(agent)["gen_ai.input.messages"]
    output = attrs(agent)["gen_ai.output.messages"]
    assert len(output) == 200 and output.endswith("characters]") and "truncated" in output


def test_a_run_started_with_a_traceparent_continues_the_callers_trace(
        collector: InMemorySpanExporter, immediate_tasks: None, composer: Any) -> None:
    caller = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
    started = Client().post("/api/runs", content_type="application/json", headers={
        **bearer(composer), "traceparent": caller}, data={
        "packet": scripts.packet(), "adapter": {"name": "scripted", "config": scripts.with_child()}})

    assert started.status_code == 201, started.content
    root = Run.objects.get(pk=started.json()["id"])
    child = Run.objects.get(parent=root)
    assert root.traceparent == caller
    assert child.traceparent == f"00-{CALLER_TRACE}-{run_span_id(root.pk)}-01"   # handed down
    spans = finished_spans(collector)
    assert {hex_id(span.context.trace_id, 32) for span in spans} == {CALLER_TRACE}
    [top] = [span for span in named(spans, "invoke_agent") if attrs(span)["handoff.run.id"] == root.pk]
    assert top.parent is not None and top.parent.is_remote and hex_id(top.parent.span_id, 16) == CALLER_SPAN


@pytest.mark.parametrize("header", ["not-a-traceparent", f"00-{'0' * 32}-{CALLER_SPAN}-01",
                                    f"00-{CALLER_TRACE.upper()}-{CALLER_SPAN}-01", "x" * 5000])
def test_a_malformed_traceparent_is_ignored_and_the_run_starts_a_trace_of_its_own(
        header: str, immediate_tasks: None, composer: Any) -> None:
    started = Client().post("/api/runs", content_type="application/json", headers={
        **bearer(composer), "traceparent": header}, data={
        "packet": scripts.packet(), "adapter": {"name": "scripted", "config": scripts.leaf()}})

    assert started.status_code == 201, started.content
    root = Run.objects.get(pk=started.json()["id"])
    assert root.traceparent == "" and root.trace.trace_id == root.pk


def test_the_run_page_shows_the_trace_id_and_links_to_the_viewer(
        collector: InMemorySpanExporter, immediate_tasks: None, composer: Any, composer_client: Client,
        settings: Any) -> None:
    settings.HANDOFF_TRACE_URL_TEMPLATE = "http://127.0.0.1:6006/projects/default/traces/{trace_id}"
    run = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(), owner=composer)

    page = composer_client.get(f"/runs/{run.pk}/").content.decode()
    assert f'href="http://127.0.0.1:6006/projects/default/traces/{run.pk}"' in page
    assert "Send again" in page
    assert len(named(finished_spans(collector), "invoke_agent")) == 1   # sent when it ended
    sent = composer_client.post(f"/runs/{run.pk}/trace/", follow=True)
    assert f"The trace {run.pk} is on its way" in sent.content.decode()
    assert len(named(finished_spans(collector), "invoke_agent")) == 2   # and again


def test_with_tracing_off_the_run_page_shows_no_trace(immediate_tasks: None, composer: Any,
                                                      composer_client: Client) -> None:
    run = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(), owner=composer)
    assert "data-trace-id" not in composer_client.get(f"/runs/{run.pk}/").content.decode()


def test_export_traces_sends_a_finished_tree_again_and_refuses_one_still_going(
        collector: InMemorySpanExporter, immediate_tasks: None, composer: Any, capsys: Any) -> None:
    done = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.with_child(), owner=composer)
    parked = run_create(packet=scripts.approval_packet(), adapter="scripted",
                        config=scripts.needs_approval(), owner=composer)
    sent_before = len(finished_spans(collector))

    call_command("export_traces", "--run", Run.objects.get(parent=done).pk)   # any run of the tree

    assert f"run {done.pk}: {sent_before} spans sent, trace {done.pk}" in capsys.readouterr().out
    assert len(collector.get_finished_spans()) == 2 * sent_before
    with pytest.raises(CommandError, match="has not ended"):
        call_command("export_traces", "--run", parked.pk)


def test_export_traces_says_how_to_switch_tracing_on(composer: Any) -> None:
    with pytest.raises(CommandError, match="OTEL_EXPORTER_OTLP_ENDPOINT"):
        call_command("export_traces", "--run", "anything")


def test_a_root_whose_end_is_told_twice_is_sent_once(collector: InMemorySpanExporter, immediate_tasks: None,
                                                     composer: Any) -> None:
    run = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(), owner=composer)
    traces.tree_ended([(run.pk, "FAILED")])   # as when a worker thought dead writes its end after the sweeper's

    assert len(named(finished_spans(collector), "invoke_agent")) == 1
