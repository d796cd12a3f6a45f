"""Handoff's own A2A ``RequestHandler``: tasks are runs, started with ``run_create`` and run
by the queue on the workers, never by the SDK's in-process executor. Every database call
goes through ``sync_to_async``; streams read the event log, which every web process and
worker shares, so a stream from any process sees the same events, and one that reconnects
asks for what follows the last seq it saw. Push notification configs live in the SDK's
config store over Handoff's rows (``push_configs.py``); whichever process records a task's
state change sends them (``push_delivery.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import TaskNotFoundError
from asgiref.sync import sync_to_async
from django.conf import settings

from delegations.live.notices import FALLBACK_S, Notices, run_notices

from . import workflows
from .card import agent_card
from .push_configs import TaskPushConfigStore, check_config
from .tasks import task_of, task_read, task_submitted, updates_after

audit = logging.getLogger("handoff.a2a")

TERMINAL = {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED,
            TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_REJECTED}
INTERRUPTED = {TaskState.TASK_STATE_AUTH_REQUIRED, TaskState.TASK_STATE_INPUT_REQUIRED}


def caller(context: ServerCallContext) -> tuple[Any, str]:
    """The Django user the ASGI gate authenticated, and the site's URL as the caller reached it."""
    return context.state["django_user"], context.state["base_url"]


async def task_sent(params: SendMessageRequest, context: ServerCallContext) -> str:
    """The task a send starts or continues, with the push notification config it names; a
    new task's run tree continues the trace of the request's ``traceparent``."""
    user, _ = caller(context)
    push = None
    if params.configuration.HasField("task_push_notification_config"):
        push = params.configuration.task_push_notification_config
        await check_config(push)   # before anything is written
    traceparent = str(context.state.get("headers", {}).get("traceparent", ""))
    return await sync_to_async(workflows.task_send)(params.message, user, push, traceparent)


class HandoffRequestHandler(RequestHandler):
    def __init__(self) -> None:
        self.push_configs = TaskPushConfigStore()

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task:
        """The task, once it ends or waits for someone, or as it stands after
        ``HANDOFF_A2A_SEND_WAIT_S``. The spec says a send without ``returnImmediately`` MUST
        wait for that; the setting caps the wait, so a slow local model does not hold an
        HTTP request (and a proxy's timeout) for minutes: a task still working is followed
        with GetTask or SubscribeToTask. ``returnImmediately`` answers at once."""
        user, base_url = caller(context)
        run_id = await task_sent(params, context)
        audit.info("a2a SendMessage by %s task=%s", user.get_username(), run_id)
        if not params.configuration.return_immediately:
            async for _ in self._follow(run_id, 0, base_url, max_wait_s=settings.HANDOFF_A2A_SEND_WAIT_S):
                pass
        return await self._task(run_id, base_url, params.configuration.history_length or None)

    async def on_message_send_stream(self, params: SendMessageRequest,
                                     context: ServerCallContext) -> AsyncGenerator[Event]:
        user, base_url = caller(context)
        run_id = await task_sent(params, context)
        audit.info("a2a SendStreamingMessage by %s task=%s", user.get_username(), run_id)
        # a message on a task: from where it stands; a new task: from its submission
        first = None if params.message.task_id else await sync_to_async(task_submitted)(run_id, base_url=base_url)
        async for event in self._snapshot_then_events(run_id, base_url, first):
            yield event

    async def on_subscribe_to_task(self, params: SubscribeToTaskRequest,
                                   context: ServerCallContext) -> AsyncGenerator[Event]:
        user, base_url = caller(context)
        await sync_to_async(workflows.visible_task)(user, params.id, live=True)
        async for event in self._snapshot_then_events(params.id, base_url):
            yield event

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        user, base_url = caller(context)
        await sync_to_async(workflows.visible_task)(user, params.id)
        history = params.history_length if params.HasField("history_length") else None
        return await self._task(params.id, base_url, history)

    async def on_list_tasks(self, params: ListTasksRequest,
                            context: ServerCallContext) -> ListTasksResponse:
        user, base_url = caller(context)
        return await sync_to_async(workflows.tasks_list)(params, user, base_url)

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        user, base_url = caller(context)
        seq = await sync_to_async(workflows.task_cancel)(user, params.id)
        audit.info("a2a CancelTask by %s task=%s", user.get_username(), params.id)
        async for _ in self._follow(params.id, seq, base_url, max_wait_s=5.0):
            pass
        return await self._task(params.id, base_url, None)

    async def on_get_extended_agent_card(self, params: GetExtendedAgentCardRequest,
                                         context: ServerCallContext) -> AgentCard:
        user, base_url = caller(context)
        return await sync_to_async(agent_card)(base_url, user=user)

    # -- push notification configs: the caller's own, on their own tasks -------------------

    async def on_create_task_push_notification_config(
            self, params: TaskPushNotificationConfig, context: ServerCallContext) -> TaskPushNotificationConfig:
        stored = await self.push_configs.set_info(params.task_id, params, context)
        audit.info("a2a CreateTaskPushNotificationConfig by %s task=%s config=%s",
                   caller(context)[0].get_username(), stored.task_id, stored.id)
        return stored

    async def on_get_task_push_notification_config(
            self, params: GetTaskPushNotificationConfigRequest,
            context: ServerCallContext) -> TaskPushNotificationConfig:
        for config in await self.push_configs.get_info(params.task_id, context):
            if config.id == (params.id or params.task_id):
                return config
        raise TaskNotFoundError(f"Task {params.task_id} has no push notification config "
                                f"{params.id!r}; ListTaskPushNotificationConfigs lists those it has.")

    async def on_list_task_push_notification_configs(
            self, params: ListTaskPushNotificationConfigsRequest,
            context: ServerCallContext) -> ListTaskPushNotificationConfigsResponse:
        # one page: a task holds at most push_configs.MAX_CONFIGS_PER_TASK
        return ListTaskPushNotificationConfigsResponse(
            configs=await self.push_configs.get_info(params.task_id, context))

    async def on_delete_task_push_notification_config(
            self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext) -> None:
        await self.push_configs.delete_info(params.task_id, context, params.id or params.task_id)
        audit.info("a2a DeleteTaskPushNotificationConfig by %s task=%s config=%s",
                   caller(context)[0].get_username(), params.task_id, params.id)

    # -- reading the log ---------------------------------------------------------------------

    async def _task(self, run_id: str, base_url: str, history_length: int | None) -> Task:
        return await sync_to_async(task_read)(run_id, base_url=base_url, history_length=history_length)

    async def _snapshot_then_events(self, run_id: str, base_url: str,
                                    snapshot: Task | None = None) -> AsyncGenerator[Event]:
        """The task as it stands (its history is every event so far), or the ``snapshot``
        given, then each event after it, until the task ends or waits for someone (the
        spec's SubscribeToTask)."""
        snapshot = snapshot if snapshot is not None else await self._task(run_id, base_url, None)
        yield snapshot
        if snapshot.status.state in TERMINAL:
            return
        async for event in self._follow(run_id, int(snapshot.metadata["lastSeq"]), base_url):
            yield event

    async def _follow(self, run_id: str, seq: int, base_url: str,
                      max_wait_s: float | None = None) -> AsyncGenerator[Event]:
        """Status updates for the events after ``seq``; when the task ends, its result
        artifact (sent before the event that ended the run, so that a client which stops
        at the first terminal status has it) and its final status; when it waits for a
        person, that status. Stops there (or after ``max_wait_s``). The log is read again
        as soon as the run's live feed tells of new events (any process's: the channel
        layer carries them), instead of on a timer."""
        deadline = None if max_wait_s is None else asyncio.get_running_loop().time() + max_wait_s
        async with run_notices(run_id) as notices:
            async for event in self._read(run_id, seq, base_url, notices, deadline):
                yield event

    async def _read(self, run_id: str, seq: int, base_url: str, notices: Notices,
                    deadline: float | None) -> AsyncGenerator[Event]:
        """``_follow``'s reading of the log, until the task ends or waits, or ``deadline``."""
        loop = asyncio.get_running_loop()
        entered_wait = False
        while deadline is None or loop.time() < deadline:
            # the run is read before its events, so the events hold at least what it says
            run, updates = await sync_to_async(updates_after)(run_id, seq, base_url=base_url)
            task = await sync_to_async(task_of)(run, base_url=base_url, history_length=0)
            artifacts_sent = False
            for update in updates:
                seq = int(update.metadata["seq"])
                if update.metadata["type"] == "state":
                    entered_wait = update.status.state in INTERRUPTED
                    if update.status.state in TERMINAL and not artifacts_sent:
                        if task.status.state not in TERMINAL:    # it ended after it was read
                            task = await self._task(run_id, base_url, 0)
                        for artifact in task.artifacts:
                            yield _artifact_update(task, artifact)
                        artifacts_sent = True
                yield update
            # a wait that began before this stream did is not where it stops: a subscriber
            # to a task parked for the inbox waits for what the decision brings
            if task.status.state in TERMINAL or (entered_wait and task.status.state in INTERRUPTED):
                for artifact in task.artifacts if not artifacts_sent else ():
                    yield _artifact_update(task, artifact)
                yield TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id,
                                            status=task.status, metadata=task.metadata)
                return
            await notices.wait(FALLBACK_S if deadline is None else min(FALLBACK_S, deadline - loop.time()))


def _artifact_update(task: Task, artifact: Any) -> TaskArtifactUpdateEvent:
    return TaskArtifactUpdateEvent(task_id=task.id, context_id=task.context_id, artifact=artifact,
                                   last_chunk=True)
