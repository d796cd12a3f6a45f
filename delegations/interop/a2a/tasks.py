"""Runs as A2A tasks: a task is a root run, its history the run's event log, its artifact the
run's ResponsePackage. Everything here reads or writes the database, so the request handler
calls it off the event loop (``sync_to_async``).

A task's id is the run's id. Its ``contextId`` is the one the caller sent, else the task's
own id; it rides in the packet's ``metadata.a2a`` with the ``referenceTaskIds``, so a
retry (a new task in the same context) says which task it follows.
"""

from __future__ import annotations

from typing import Any

from a2a.helpers.proto_helpers import new_data_part, new_text_part
from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    Role,
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from django.urls import reverse
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Struct
from google.protobuf.timestamp_pb2 import Timestamp

from delegations.models import Approval, Run, RunEvent
from delegations.protocol.lifecycle import RunState, a2a_state

# the events of a run that a task's history and stream carry (model text deltas would be
# one message per token; the model call that follows them says the same once)
HISTORY_EVENTS = ("state", "tool_call", "tool_result", "child", "approval", "message", "result",
                  "error", "announce")


def struct(value: dict[str, Any]) -> Struct:
    return ParseDict(value, Struct())


def task_state(run: Run, pending: Approval | None) -> int:
    """The 1.0 enum value of the run's state (AUTH_REQUIRED or INPUT_REQUIRED while it waits;
    WORKING once its item is decided, before the worker has picked it up again)."""
    if run.state == RunState.AWAITING_APPROVAL and pending is None:
        return int(TaskState.TASK_STATE_WORKING)
    name = a2a_state(run.state, approval_kind=pending.kind if pending is not None else None)
    return int(TaskState.Value(name))


def pending_item(run: Run) -> Approval | None:
    """The inbox item the task waits on, if any (the oldest undecided one of its tree)."""
    return Approval.objects.pending_in_tree(run.root_run_id).order_by("requested_at", "pk").first()


def context_of(run: Run) -> dict[str, Any]:
    return dict((run.packet.get("metadata") or {}).get("a2a") or {})


def item_url(base_url: str, approval: Approval) -> str:
    return f"{base_url}{reverse('delegations:inbox_item', args=[approval.pk])}"


def status_message(run: Run, pending: Approval | None, base_url: str) -> Message | None:
    """What the caller reads beside the state: the inbox item to decide, or why the run ended."""
    if pending is not None:
        if pending.kind == "clarification":
            questions = "; ".join(pending.payload.get("questions") or []) or pending.title
            text = (f"The run asks: {questions} Answer with a message on this task (an approver "
                    f"may), or in Handoff's inbox: {item_url(base_url, pending)}")
        else:
            text = (f"Waiting for a person to decide '{pending.title}' in Handoff's inbox: "
                    f"{item_url(base_url, pending)}. Nothing over A2A approves it.")
        return agent_message(run, f"status-{run.last_seq}", [new_text_part(text)],
                             {"approvalId": pending.pk, "approvalKind": pending.kind,
                              "approvalUrl": item_url(base_url, pending)})
    if run.state in (RunState.FAILED, RunState.TIMEOUT, RunState.CANCELLED, RunState.REJECTED):
        error = run.error or {}
        text = f"{error.get('code', run.state)}: {error.get('message', 'the run ended ' + run.state)}"
        return agent_message(run, f"status-{run.last_seq}", [new_text_part(text), new_data_part(error)],
                             {"error": error})
    return None


def agent_message(run: Run, message_id: str, parts: list[Any], metadata: dict[str, Any]) -> Message:
    context = context_of(run).get("context_id") or run.pk
    return Message(message_id=f"{run.pk}-{message_id}", context_id=context, task_id=run.pk,
                   role=Role.ROLE_AGENT, parts=parts, metadata=struct(metadata))


def event_message(run: Run, event: RunEvent) -> Message:
    """One event of the log as an agent message: a data part with it, its seq in metadata."""
    return agent_message(run, f"event-{event.seq}", [new_data_part(
        {"type": event.type, "seq": event.seq, "data": event.data})],
        {"seq": event.seq, "type": event.type})


def result_artifact(run: Run) -> Artifact | None:
    """The ResponsePackage as a data part, its criteria report in the artifact's metadata."""
    if run.state not in (RunState.COMPLETE, RunState.RETURNED) or not run.result:
        return None
    return Artifact(artifact_id=f"{run.pk}-result", name="result",
                    description="The run's ResponsePackage (output_payload is the answer).",
                    parts=[new_data_part(run.result, media_type="application/json")],
                    metadata=struct({"criteriaReport": run.criteria_report or {}}))


def timestamp(run: Run) -> Timestamp:
    moment = Timestamp()
    moment.FromDatetime(run.finished_at or run.started_at or run.created_at)
    return moment


def task_of(run: Run, *, base_url: str, history_length: int | None = None,
            include_artifacts: bool = True) -> Task:
    """The run as a task: status, the result artifact, and the history (every event of the
    log that HISTORY_EVENTS names; the last ``history_length`` when given)."""
    pending = pending_item(run) if run.state == RunState.AWAITING_APPROVAL else None
    status = TaskStatus(state=task_state(run, pending), timestamp=timestamp(run))  # type: ignore[arg-type]
    message = status_message(run, pending, base_url)
    if message is not None:
        status.message.CopyFrom(message)
    task = Task(id=run.pk, context_id=context_of(run).get("context_id") or run.pk, status=status,
                metadata=struct({"lastSeq": run.last_seq, "handoffState": run.state}))
    if history_length != 0:
        events = RunEvent.objects.filter(run=run, type__in=HISTORY_EVENTS,
                                         seq__lte=run.last_seq).order_by("seq")
        rows = list(events)[-history_length:] if history_length else list(events)
        task.history.extend(event_message(run, event) for event in rows)
    artifact = result_artifact(run) if include_artifacts else None
    if artifact is not None:
        task.artifacts.append(artifact)
    return task


def task_read(task_id: str, *, base_url: str, history_length: int | None = None) -> Task:
    """Task ``task_id`` as it stands now (read and mapped in one synchronous call)."""
    return task_of(Run.objects.get(pk=task_id), base_url=base_url, history_length=history_length)


def task_submitted(task_id: str, *, base_url: str) -> Task:
    """New task ``task_id`` as it was submitted, before its run did anything (log seq 0):
    what the stream of the send that made it sends first, so that every change after shows
    however fast the run starts (a new run may start as its row commits, in the process
    that made it). A task refused as it was made (its packet's lint errors) as it stands."""
    run = Run.objects.get(pk=task_id)
    if run.state == RunState.REJECTED:
        return task_of(run, base_url=base_url)
    moment = Timestamp()
    moment.FromDatetime(run.created_at)
    return Task(id=run.pk, context_id=context_of(run).get("context_id") or run.pk,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED, timestamp=moment),
                metadata=struct({"lastSeq": 0, "handoffState": RunState.PENDING.value}))


def updates_after(run_id: str, seq: int, *, base_url: str) -> tuple[Run, list[TaskStatusUpdateEvent]]:
    """The run as it is now, and a status update for each of its logged events after ``seq``:
    the state they leave the task in, the event as the message. A stream sends these in
    order, so one that reconnects asks for what follows the last seq it saw."""
    run = Run.objects.get(pk=run_id)
    events = list(RunEvent.objects.filter(run=run, seq__gt=seq, type__in=HISTORY_EVENTS).order_by("seq"))
    updates: list[TaskStatusUpdateEvent] = []
    context = context_of(run).get("context_id") or run.pk
    state = None
    for event in events:
        if event.type == "state":
            state = event.data.get("state")
        if state is None:
            state = _state_before(run, event.seq)
        kind = _asking_kind(run, event.seq) if state == RunState.AWAITING_APPROVAL else None
        status = TaskStatus(state=int(TaskState.Value(a2a_state(state, approval_kind=kind))))  # type: ignore[arg-type]
        status.message.CopyFrom(event_message(run, event))
        updates.append(TaskStatusUpdateEvent(task_id=run.pk, context_id=context, status=status,
                                             metadata=struct({"seq": event.seq, "type": event.type})))
    return run, updates


def _state_before(run: Run, seq: int) -> str:
    last = RunEvent.objects.filter(run=run, type="state", seq__lt=seq).order_by("-seq").first()
    return str(last.data.get("state")) if last is not None else RunState.PENDING.value


def _asking_kind(run: Run, seq: int) -> str | None:
    """The kind of the last question the run asked before ``seq`` (clarification or not)."""
    asked = (RunEvent.objects.filter(run=run, type="approval", seq__lte=seq + 1)
             .order_by("-seq").first())
    if asked is None:
        pending = pending_item(run)
        return pending.kind if pending is not None else None
    return str(asked.data.get("kind") or "") or None
