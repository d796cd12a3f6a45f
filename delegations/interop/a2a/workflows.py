"""What an A2A request does to Handoff: the same workflows as ``/api/runs`` and the inbox
(``run_create``, ``run_cancel``, ``run_send_message``, ``approval_decide``), with their
refusals said as the spec's errors. Synchronous: the handler calls these off the event loop.

Only root runs are tasks; a task is visible to whoever may read its run (its owner, staff,
an approver it asks), and only its owner (or staff) may cancel it or start one. Nothing here
approves anything: an item that asks a person to authorize a step stays for the inbox, and a
clarification answered by message goes through the inbox's own decision, self-approval
rules included.
"""

from __future__ import annotations

import math
import uuid
from datetime import datetime
from typing import Any

from a2a.helpers.proto_helpers import get_data_parts, get_text_parts
from a2a.server.tasks.push_notification_config_store import normalize_push_notification_config
from a2a.types.a2a_pb2 import (
    ListTasksRequest,
    ListTasksResponse,
    Message,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import (
    InvalidParamsError,
    InvalidRequestError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from django.db import transaction
from django.db.models import Q
from google.protobuf.json_format import MessageToDict

from delegations.accounts.roles import can_compose, visible_runs
from delegations.inbox.decisions import approval_decide
from delegations.models import Run
from delegations.protocol.errors import ProtocolError
from delegations.protocol.lifecycle import A2A_STATE, RunState
from delegations.refusals import Refusal
from delegations.runs.workflows import run_cancel, run_create, run_send_message

from .push_configs import config_save
from .tasks import item_url, pending_item, task_of

USAGE = ("Send a text part (the goal), or one data part: a hand-off packet, or a skill's input "
         "with the skill's id (name@version) as 'skill' in the message metadata.")
PAGE_SIZE, MAX_PAGE_SIZE = 50, 100


def whole_numbers(value: Any) -> Any:
    """``value`` with whole floats as ints: a data part holds every number as a double, and
    a schema's ``integer`` (or a count in a budget) means the int the caller wrote."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [whole_numbers(item) for item in value]
    return value


def packet_from_message(message: Message) -> tuple[dict[str, Any], dict[str, Any]]:
    """The packet a new task's message asks for, and the adapter it names (may be empty)."""
    metadata = MessageToDict(message.metadata)
    data = [whole_numbers(part) for part in get_data_parts(message.parts)]
    text = "\n".join(get_text_parts(message.parts)).strip()
    if len(data) > 1:
        raise InvalidParamsError(f"The message has {len(data)} data parts; send one. {USAGE}")
    body = data[0] if data else None
    if body is not None and not isinstance(body, dict):
        raise InvalidParamsError(f"The data part must be a JSON object, not {type(body).__name__}. {USAGE}")
    skill = metadata.get("skill")
    if skill is not None and (not isinstance(skill, str) or not skill.strip()):
        raise InvalidParamsError(f"The metadata's 'skill' must be a skill id such as caching@1.0.0. {USAGE}")
    if skill:
        packet: dict[str, Any] = {"skill": skill.strip(), "input_data": body or {},
                                  "goal": text or f"Run the skill {skill.strip()} on the given input.",
                                  "allowed_inputs": sorted(body or {}),
                                  "success_criteria": ["JSON is schema-valid"]}
    elif body is None and not text:
        raise InvalidParamsError(f"The message has no usable part. {USAGE}")
    elif body is None:
        packet = {"goal": text}   # lint says what a bare goal lacks; the task keeps its findings
    else:
        packet = dict(body)
        if text and not packet.get("goal"):
            packet["goal"] = text
    adapter = metadata.get("adapter") or {}
    if not isinstance(adapter, dict):
        raise InvalidParamsError("The metadata's 'adapter' must be an object: {'name', 'config'}.")
    return packet, adapter


def _with_context(packet: dict[str, Any], message: Message) -> dict[str, Any]:
    """The packet carrying the task's context id and the tasks it follows (a retry's)."""
    meta = dict(packet.get("metadata") or {}) if isinstance(packet.get("metadata"), dict) else {}
    meta["a2a"] = {"context_id": message.context_id or uuid.uuid4().hex,
                   "reference_task_ids": list(message.reference_task_ids)}
    return {**packet, "metadata": meta}


def _refused(exc: Refusal) -> Exception:
    """A workflow's refusal as the spec's error: a request that cannot be fixed by changing
    its parameters (a state conflict, a role, a limit) is an invalid request."""
    if exc.status == 422:
        return InvalidParamsError(exc.message, data=exc.details or None)
    return InvalidRequestError(exc.message, data=exc.details or None)


def task_start(message: Message, user: Any, traceparent: str = "") -> str:
    """A new task: the message's packet through ``run_create`` (lint, schemas, budgets), queued
    for the workers. Nothing is written when the packet cannot be used. ``traceparent``: the
    request's W3C header, whose trace the task's run tree continues."""
    if not can_compose(user):
        raise InvalidRequestError(f"Starting tasks needs the composer role, which "
                                  f"{user.get_username()} does not have.")
    packet, adapter = packet_from_message(message)
    try:
        run = run_create(packet=_with_context(packet, message), owner=user, traceparent=traceparent,
                         adapter=str(adapter["name"]) if adapter.get("name") else None,
                         config=adapter.get("config") if isinstance(adapter.get("config"), dict) else None)
    except ProtocolError as exc:
        raise InvalidParamsError(exc.message, data=exc.as_dict()) from None
    except Refusal as exc:
        raise _refused(exc) from None
    return str(run.pk)


def task_continue(message: Message, user: Any) -> str:
    """A message on a task: the answer to its clarification, else a message to its
    subagent. An item asking to authorize a step is decided in the inbox only."""
    run = visible_task(user, message.task_id)
    if run.is_terminal:
        raise UnsupportedOperationError(
            f"Task {run.pk} already ended ({run.state}). To try again, send a new message with "
            f"contextId {task_of(run, base_url='', history_length=0).context_id} and "
            f"referenceTaskIds [{run.pk}].")
    text = "\n".join(get_text_parts(message.parts)).strip()
    pending = pending_item(run)
    try:
        if pending is not None and pending.kind == "clarification":
            approval_decide(approval=pending, user=user, decision="answer", answer=text)
        elif pending is not None:
            raise InvalidRequestError(
                f"Task {run.pk} waits for a person to decide '{pending.title}' in Handoff's inbox "
                f"({item_url('', pending)}); a message cannot decide it.")
        elif Run.objects.visible_to(user).filter(pk=run.pk).exists():
            run_send_message(run=run, text=text, sender=user)
        else:
            raise InvalidRequestError(f"Only the owner of task {run.pk} may send it messages.")
    except Refusal as exc:
        raise _refused(exc) from None
    return str(run.pk)


def task_send(message: Message, user: Any, push: TaskPushNotificationConfig | None,
              traceparent: str = "") -> str:
    """A new task or a message on one, and the push notification config the send names
    (checked already), stored in the same transaction: the task's first change finds it."""
    with transaction.atomic():
        task_id = (task_continue(message, user) if message.task_id
                   else task_start(message, user, traceparent))
        if push is not None:
            config_save(user, normalize_push_notification_config(task_id, push))
    return task_id


def visible_task(user: Any, task_id: str, *, live: bool = False) -> Run:
    """The root run ``task_id`` if ``user`` may read it (TaskNotFoundError otherwise, so
    another person's task is not revealed); ``live``: one that has not ended."""
    run = visible_runs(user).filter(pk=task_id, parent__isnull=True).first()
    if run is None:
        raise TaskNotFoundError(f"No task {task_id} that you can see.")
    if live and run.is_terminal:
        raise UnsupportedOperationError(
            f"Task {task_id} already ended ({run.state}); GetTask reads its result.")
    return run


def task_cancel(user: Any, task_id: str) -> int:
    """Cancel the task's run tree; the seq of its log before. Only its owner (or staff)."""
    run = visible_task(user, task_id)
    if not Run.objects.visible_to(user).filter(pk=run.pk).exists():
        raise InvalidRequestError(f"Only the owner of task {task_id} may cancel it.")
    if run.is_terminal:
        raise TaskNotCancelableError(f"Task {task_id} already ended ({run.state}); there is "
                                     f"nothing to cancel.")
    try:
        run_cancel(run=run, reason=f"Cancelled over A2A by {user.get_username()}.")
    except Refusal as exc:
        raise TaskNotCancelableError(exc.message) from None
    return run.last_seq


def _states_for(task_state: int) -> list[str]:
    name = TaskState.Name(task_state)  # type: ignore[arg-type]
    return [state.value for state, spelled in A2A_STATE.items() if spelled == name]


def tasks_list(params: ListTasksRequest, user: Any, base_url: str) -> ListTasksResponse:
    """The caller's tasks, newest first, filtered as the request asks; ``pageToken`` is the
    offset of the next page."""
    runs = visible_runs(user).filter(parent__isnull=True)
    if params.context_id:
        runs = runs.filter(Q(packet__metadata__a2a__context_id=params.context_id) | Q(pk=params.context_id))
    if params.status and params.status not in TaskState.values():
        raise InvalidParamsError(f"Unknown status {params.status}; use one of "
                                 f"{', '.join(TaskState.keys()[1:])}.")
    if params.status:
        runs = runs.filter(state__in=_states_for(params.status) or [RunState.AWAITING_APPROVAL.value])
    if params.HasField("status_timestamp_after"):
        after: datetime = params.status_timestamp_after.ToDatetime(tzinfo=datetime.now().astimezone().tzinfo)
        runs = runs.filter(Q(created_at__gte=after) | Q(started_at__gte=after) | Q(finished_at__gte=after))
    size = params.page_size if params.HasField("page_size") else PAGE_SIZE
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise InvalidParamsError(f"pageSize must be between 1 and {MAX_PAGE_SIZE}, not {size}.")
    if params.HasField("history_length") and params.history_length < 0:
        raise InvalidParamsError(f"historyLength must be 0 or more, not {params.history_length}.")
    try:
        start = int(params.page_token or 0)
    except ValueError:
        raise InvalidParamsError(f"pageToken {params.page_token!r} is not one this server gave; "
                                 f"leave it out for the first page.") from None
    total = runs.count()
    history = params.history_length if params.HasField("history_length") else 0
    tasks = [task_of(run, base_url=base_url, history_length=history,
                     include_artifacts=params.include_artifacts)
             for run in runs.order_by("-created_at", "pk")[start:start + size]]
    if params.status:
        tasks = [task for task in tasks if task.status.state == params.status]
    following = start + size
    return ListTasksResponse(tasks=tasks, page_size=len(tasks), total_size=total,
                             next_page_token=str(following) if following < total else "")
