"""Push notifications: when a task's state changes (working, input or auth required, ended),
the task is POSTed to each push config set on it by the SDK's ``BasePushNotificationSender``
(the camelCase JSON of a StreamResponse holding the task, without its history; the config's
token as ``X-A2A-Notification-Token``; its authentication as the ``Authorization`` header).

The event log tells of each root run's state change once it is committed
(``eventlog.on_root_state_changed``), in whichever process wrote it: a worker, a request
that cancelled a parked run, the sweeper. Delivery is off that path, in one daemon thread
per process that takes changed tasks from a queue in order; changes that arrive while it is
busy are sent once, as the task then stands. A receiver that cannot be reached or answers
5xx is tried TRIES times in all, RETRY_PAUSE_S apart, then the failure is logged and
dropped: a notification never holds up or breaks a run. A task's SUBMITTED states are not
announced (the caller has the task from its send), and notifications queued when the
process exits are lost: GetTask still reads the task.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from typing import Any

import httpx
from django.conf import settings
from django.db import connection

from delegations.models import TaskPushConfig
from delegations.protocol.lifecycle import a2a_state
from delegations.runs.eventlog import on_root_state_changed

logger = logging.getLogger(__name__)

TRIES = 3
RETRY_PAUSE_S = 1.0
TIMEOUT_S = 10.0
# changes gathered into one batch (one query for their configs): a busy server changes a
# hundred tasks a second, and a query per change was 2 queries a run (load_probe.py)
GATHER_S = 0.1

_changed: queue.SimpleQueue[str] = queue.SimpleQueue()
_start_lock = threading.Lock()
_deliverer: threading.Thread | None = None


class RetryingTransport(httpx.AsyncHTTPTransport):
    """Sends a request again, RETRY_PAUSE_S later, while the receiver cannot be reached or
    answers 5xx; the last try's answer (or error) is the sender's to log."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        for attempt in range(1, TRIES):
            try:
                response = await super().handle_async_request(request)
                if response.status_code < 500:
                    return response
                await response.aclose()
                problem = f"HTTP {response.status_code}"
            except httpx.TransportError as exc:
                problem = type(exc).__name__
            logger.info("Push notification to %s failed (%s), try %d of %d; trying again",
                        request.url.host, problem, attempt, TRIES)
            await asyncio.sleep(RETRY_PAUSE_S)
        return await super().handle_async_request(request)


def task_state_changed(changes: list[tuple[str, str]]) -> None:
    """Queue the tasks whose state changed (the event log's listener: it must not block)."""
    for run_id, state in changes:
        if a2a_state(state) != "TASK_STATE_SUBMITTED":
            _changed.put(run_id)
    _start_deliverer()


def _start_deliverer() -> None:
    global _deliverer
    with _start_lock:
        if _deliverer is None or not _deliverer.is_alive():
            _deliverer = threading.Thread(target=_deliver_forever, name="handoff-a2a-push", daemon=True)
            _deliverer.start()


def _next_tasks() -> list[str]:
    """The next changed task, and every other changed by GATHER_S later, each once and in
    order."""
    waiting = [_changed.get()]
    time.sleep(GATHER_S)
    while not _changed.empty():
        waiting.append(_changed.get_nowait())
    return list(dict.fromkeys(waiting))


def _deliver_forever() -> None:
    # the SDK's sender and the task mapping (0.16 s to import, measured) load here, when a
    # task first changes in this process, not in every process as it starts
    from a2a.server.tasks.base_push_notification_sender import BasePushNotificationSender

    from .push_configs import TaskPushConfigStore, address_problem
    from .tasks import task_read

    async def still_public(url: str) -> bool:
        return await address_problem(url) is None

    loop = asyncio.new_event_loop()
    client = httpx.AsyncClient(transport=RetryingTransport(), timeout=TIMEOUT_S)
    sender = BasePushNotificationSender(client, TaskPushConfigStore(), push_url_validator=still_public)
    while True:
        changed = _next_tasks()
        try:
            # one query for the whole batch: most tasks have no config, and a busy server
            # changes a hundred tasks a second
            configured = TaskPushConfig.configured(changed)
        except Exception:
            logger.exception("Push notification configs could not be read")
            configured = set()
        for task_id in (task for task in changed if task in configured):
            try:
                task: Any = task_read(task_id, base_url=settings.HANDOFF_BASE_URL, history_length=0)
                loop.run_until_complete(sender.send_notification(task_id, task))
            except Exception:
                logger.exception("Push notifications for task %s failed", task_id)
        connection.close()   # the next change may be hours away: hold no connection till then


def listen() -> None:
    """Deliver push notifications for every task whose state changes from now on (called
    once at start-up)."""
    on_root_state_changed(task_state_changed)
