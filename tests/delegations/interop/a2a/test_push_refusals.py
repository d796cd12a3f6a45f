"""A2A push notification configs Handoff refuses, against a live server with the default
settings (notifications to public addresses only): each refusal is the spec's error with a
message saying what to fix, on both transports, and never a 500."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from a2a.types.a2a_pb2 import ListTaskPushNotificationConfigsRequest, TaskPushNotificationConfig
from a2a.utils.errors import A2AError

from tests.delegations import scripts
from tests.delegations.interop.a2a.conftest import a2a_client, message, request, scripted

pytestmark = [pytest.mark.slow]

PUBLIC_URL = "https://8.8.8.8/hook"   # accepted, never reached: the tasks here have ended


def rpc(url: str, headers: dict[str, str], method: str, params: dict[str, Any]) -> dict[str, Any]:
    answer = httpx.post(f"{url}/a2a/jsonrpc", headers={"A2A-Version": "1.0", **headers},
                        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


@pytest.fixture
def task_id(live_url: str, composer_api: dict[str, str]) -> str:
    sent = {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"data": scripts.packet()}],
                        "metadata": {"adapter": scripted(scripts.leaf())}}}
    return str(rpc(live_url, composer_api, "SendMessage", sent)["result"]["task"]["id"])


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/hook", "http://localhost/hook", "http://10.0.0.5/hook",
                                 "http://169.254.169.254/latest/meta-data", "http://[::1]/hook"])
async def test_a_private_or_loopback_receiver_is_refused(live_url: str, composer_api: dict[str, str],
                                                         task_id: str, url: str) -> None:
    async with a2a_client(live_url, composer_api, streaming=False) as client:
        with pytest.raises(A2AError, match="private, loopback, link-local or reserved"):
            await client.create_task_push_notification_config(TaskPushNotificationConfig(task_id=task_id, url=url))
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id))
    assert list(listed.configs) == []


@pytest.mark.parametrize(("config", "says"), [
    ({}, "needs a url"),
    ({"url": "   "}, "needs a url"),
    ({"url": "ftp://8.8.8.8/hook"}, "is not an http:// or https:// URL"),
    ({"url": "https://"}, "is not an http:// or https:// URL"),
    ({"url": "http://[8.8.8.8/hook"}, "is not an http:// or https:// URL"),
    ({"url": "https://user:secret@8.8.8.8/hook"}, "Leave credentials out of the push URL"),
    ({"url": PUBLIC_URL, "authentication": {"scheme": "Bearer"}}, "but no credentials"),
    ({"url": PUBLIC_URL, "token": "x" * 501}, "token is 501 characters long; keep it to 500"),
])
def test_a_config_handoff_cannot_use_is_invalid_params_saying_what_to_fix(
        live_url: str, composer_api: dict[str, str], task_id: str, config: dict[str, Any], says: str) -> None:
    error = rpc(live_url, composer_api, "CreateTaskPushNotificationConfig", {"taskId": task_id, **config})["error"]
    assert error["code"] == -32602 and says in error["message"], error


def test_a_send_with_a_config_handoff_cannot_use_starts_no_task(live_url: str, composer_api: dict[str, str]) -> None:
    sent = {"message": {"messageId": "m-2", "role": "ROLE_USER", "parts": [{"data": scripts.packet()}],
                        "metadata": {"adapter": scripted(scripts.leaf())}},
            "configuration": {"taskPushNotificationConfig": {"url": "http://127.0.0.1:9/hook"}}}
    error = rpc(live_url, composer_api, "SendMessage", sent)["error"]
    assert error["code"] == -32602 and "private, loopback" in error["message"]
    assert httpx.get(f"{live_url}/api/runs", headers=composer_api).json()["count"] == 0


async def test_another_persons_task_takes_no_config_and_shows_none(
        live_url: str, composer_api: dict[str, str], other_composer_api: dict[str, str], task_id: str) -> None:
    async with a2a_client(live_url, composer_api, streaming=False) as client:
        await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task_id, id="mine", url=PUBLIC_URL, token="my-secret"))
    async with a2a_client(live_url, other_composer_api, streaming=False) as client:
        with pytest.raises(A2AError, match=f"No task {task_id} of yours"):
            await client.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=task_id, url=PUBLIC_URL))
        with pytest.raises(A2AError, match=f"No task {task_id} of yours"):
            await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task_id))


def test_the_rest_transport_answers_refusals_with_http_statuses(
        live_url: str, composer_api: dict[str, str], task_id: str) -> None:
    headers = {"A2A-Version": "1.0", **composer_api}
    configs = f"{live_url}/a2a/rest/tasks/{task_id}/pushNotificationConfigs"
    no_url = httpx.post(configs, headers=headers, json={"taskId": task_id})
    assert no_url.status_code == 400 and "needs a url" in no_url.text
    private = httpx.post(configs, headers=headers, json={"taskId": task_id, "url": "http://10.1.2.3/hook"})
    assert private.status_code == 400 and "public addresses only" in private.text
    unknown = httpx.get(f"{live_url}/a2a/rest/tasks/no-such-task/pushNotificationConfigs", headers=headers)
    assert unknown.status_code == 404 and "No task no-such-task" in unknown.text
    missing = httpx.delete(f"{configs}/nope", headers=headers)
    assert missing.status_code == 404 and "no push notification config 'nope'" in missing.text
    created = httpx.post(configs, headers=headers, json={"taskId": task_id, "id": "ops", "url": PUBLIC_URL})
    assert created.status_code == 200 and created.json()["id"] == "ops"


async def test_the_card_offers_push_notifications(live_url: str, composer_api: dict[str, str]) -> None:
    async with httpx.AsyncClient() as http:
        card = (await http.get(f"{live_url}/.well-known/agent-card.json")).json()
    assert card["capabilities"]["pushNotifications"] is True
    async with a2a_client(live_url, composer_api, streaming=False) as client:
        [answer] = [event async for event in client.send_message(request(message(
            scripts.packet(), adapter=scripted(scripts.leaf()))))]
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=answer.task.id))
    assert list(listed.configs) == []
