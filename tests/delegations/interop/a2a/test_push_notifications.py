"""A2A push notification configs, driven by the official SDK's client against a live server
that may send to a receiver on loopback (HANDOFF_A2A_PUSH_ALLOW_PRIVATE, as a site whose
callers' receivers live on its own network would set it)."""

from __future__ import annotations

import json
import queue
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from a2a.types.a2a_pb2 import (
    AuthenticationInfo,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import A2AError

from tests.delegations import scripts
from tests.delegations.interop.a2a.conftest import BINDINGS, a2a_client, message, request, scripted
from tests.services import http_on_loopback

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def live_server_settings() -> dict[str, str]:
    return {"HANDOFF_A2A_PUSH_ALLOW_PRIVATE": "1"}


class Notification:
    def __init__(self, headers: dict[str, str], body: dict[str, Any]) -> None:
        self.headers, self.body = headers, body

    @property
    def state(self) -> str:
        return str(self.body["task"]["status"]["state"])


@pytest.fixture
def receiver() -> Iterator[tuple[str, queue.Queue[Notification]]]:
    """An HTTP server on loopback that keeps every notification POSTed to it."""
    received: queue.Queue[Notification] = queue.Queue()

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
            received.put(Notification({name.lower(): value for name, value in self.headers.items()}, body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    with http_on_loopback(Receiver) as url:
        yield f"{url}/hook", received


def notifications_until_ended(received: queue.Queue[Notification]) -> list[Notification]:
    found: list[Notification] = []
    while not found or found[-1].state not in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED"):
        found.append(received.get(timeout=20))
    return found


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_config_is_created_listed_read_and_deleted_by_its_owner(
        live_url: str, composer_api: dict[str, str], binding: str) -> None:
    sent = message(scripts.approval_packet(), adapter=scripted(scripts.needs_approval()))
    async with a2a_client(live_url, composer_api, binding, streaming=False) as client:
        [answer] = [event async for event in client.send_message(request(sent, return_immediately=True))]
        task_id = answer.task.id
        created = await client.create_task_push_notification_config(TaskPushNotificationConfig(
            task_id=task_id, id="ops", url="http://127.0.0.1:9/hook", token="shared-secret",
            authentication=AuthenticationInfo(scheme="Bearer", credentials="receiver-key")))
        await client.create_task_push_notification_config(TaskPushNotificationConfig(
            task_id=task_id, url="http://127.0.0.1:9/other"))
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id))
        read = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id="ops"))
        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="ops"))
        after = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id))
        with pytest.raises(A2AError, match="no push notification config 'ops'"):
            await client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task_id, id="ops"))
    assert (created.id, created.task_id, created.token) == ("ops", task_id, "shared-secret")
    assert [config.id for config in listed.configs] == ["ops", task_id]   # the id defaults to the task's
    assert read == created and read.authentication.credentials == "receiver-key"
    assert [config.id for config in after.configs] == [task_id]


async def test_each_state_change_is_posted_to_the_receiver_with_its_token_and_credentials(
        live_url: str, composer_api: dict[str, str], receiver: tuple[str, queue.Queue[Notification]]) -> None:
    url, received = receiver
    sent = request(message(scripts.packet(), adapter=scripted(scripts.leaf())), return_immediately=True)
    sent.configuration.task_push_notification_config.CopyFrom(TaskPushNotificationConfig(
        url=url, token="shared-secret", authentication=AuthenticationInfo(scheme="Bearer", credentials="receiver-key")))
    async with a2a_client(live_url, composer_api, streaming=False) as client:
        [answer] = [event async for event in client.send_message(sent)]
    notifications = notifications_until_ended(received)
    last = notifications[-1]
    assert last.state == "TASK_STATE_COMPLETED" and last.body["task"]["id"] == answer.task.id
    assert last.body["task"]["artifacts"][0]["parts"][0]["data"]["output_payload"] == {"answer": 42}
    assert all(n.headers["x-a2a-notification-token"] == "shared-secret" for n in notifications)
    assert all(n.headers["authorization"] == "Bearer receiver-key" for n in notifications)
    assert "TASK_STATE_SUBMITTED" not in [n.state for n in notifications]


async def test_a_task_waiting_for_the_inbox_is_announced_auth_required_with_the_items_page(
        live_url: str, composer_api: dict[str, str], receiver: tuple[str, queue.Queue[Notification]]) -> None:
    url, received = receiver
    sent = request(message(scripts.approval_packet(), adapter=scripted(scripts.needs_approval())),
                   return_immediately=True)
    sent.configuration.task_push_notification_config.CopyFrom(TaskPushNotificationConfig(url=url))
    async with a2a_client(live_url, composer_api, streaming=False) as client:
        [_] = [event async for event in client.send_message(sent)]
    notification = received.get(timeout=20)
    while notification.state != "TASK_STATE_AUTH_REQUIRED":
        notification = received.get(timeout=20)
    assert "/inbox/" in notification.body["task"]["status"]["message"]["parts"][0]["text"]


async def test_a_receiver_that_cannot_be_reached_does_not_hold_up_or_break_the_task(
        live_url: str, composer_api: dict[str, str]) -> None:
    sent = request(message(scripts.packet(), adapter=scripted(scripts.leaf())))
    sent.configuration.task_push_notification_config.CopyFrom(
        TaskPushNotificationConfig(url="http://127.0.0.1:9/hook"))   # nothing listens on the discard port
    async with a2a_client(live_url, composer_api, streaming=False) as client:
        [answer] = [event async for event in client.send_message(sent)]
    assert answer.task.status.state == TaskState.TASK_STATE_COMPLETED
