"""Every A2A route x every role -> what each must get, as test_route_table.py holds it for the
pages and the REST API; against a live server, since the A2A routes are not Django's.

Outcomes: 401 (no token), ok, role (refused: starting a task needs the composer role),
none (TaskNotFound: another person's task is not revealed), owner (refused: only the
task's owner may do that), ended (the task ended; it is visible but has nothing left to
follow).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import bearer, make_user
from tests.delegations import scripts

pytestmark = [pytest.mark.slow]

ROLES = ("anon", "outsider", "composer", "approver", "owner", "root")

#                          anon out  comp appr  owner root
A2A = {
    "GET agent card":     "ok   ok   ok   ok    ok    ok",
    "SendMessage":        "401  role ok   role  ok    ok",
    "GetTask":            "401  none none none  ok    ok",
    "ListTasks":          "401  ok   ok   ok    ok    ok",
    # an approver reads a task that asks the inbox, but only its owner (or staff) cancels it
    "CancelTask":         "401  none none owner ok    ok",
    "SubscribeToTask":    "401  none none none  ended ended",
    "GetExtendedAgentCard": "401 ok  ok   ok    ok    ok",
    # push notification configs are their owner's alone, staff included
    "CreateTaskPushNotificationConfig": "401 none none none ok none",
    "GetTaskPushNotificationConfig":    "401 none none none ok none",
    "ListTaskPushNotificationConfigs":  "401 none none none ok none",
    "DeleteTaskPushNotificationConfig": "401 none none none ok none",
}
# a public address, never reached: the task it is set on has ended, so nothing is sent
PUSH_URL = "https://8.8.8.8/handoff-notifications"


@pytest.fixture
def people(live_url: str, django_user_model: Any) -> dict[str, dict[str, str]]:
    users = {"outsider": make_user(django_user_model, "oscar", password=None),
             "composer": make_user(django_user_model, "dave", "composers", password=None),
             "approver": make_user(django_user_model, "alice", "approvers", password=None),
             "owner": make_user(django_user_model, "carol", "composers", password=None),
             "root": django_user_model.objects.create_superuser(username="root", email="")}
    return {"anon": {}, **{role: bearer(user) for role, user in users.items()}}


def rpc(url: str, headers: dict[str, str], method: str, params: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}/a2a/jsonrpc", headers={"A2A-Version": "1.0", **headers},
                      json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})


def send_params(packet: dict[str, Any], adapter: dict[str, Any]) -> dict[str, Any]:
    return {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": packet}],
                        "metadata": {"adapter": {"name": "scripted", "config": adapter}}},
            "configuration": {"returnImmediately": True}}


def outcome(answer: httpx.Response) -> str:
    if answer.status_code == 401:
        return "401"
    body = answer.json() if "json" in answer.headers.get("content-type", "") else {}
    if "data:" in answer.text and "error" not in answer.text[:200]:
        return "ok"   # a stream
    error = body.get("error") if isinstance(body, dict) else None
    if error is None:
        return "ok"
    code, message = error["code"], error["message"]
    if code == -32001:
        return "none"
    if code == -32004 and "already ended" in message:
        return "ended"
    if code == -32600 and "composer role" in message:
        return "role"
    if code == -32600 and "Only the owner" in message:
        return "owner"
    return f"error {code}: {message}"


def test_every_a2a_route_answers_each_role_as_the_table_says(live_url: str,
                                                             people: dict[str, dict[str, str]]) -> None:
    owner = people["owner"]
    finished = rpc(live_url, owner, "SendMessage", {**send_params(scripts.packet(), scripts.leaf()),
                                                    "configuration": {}}).json()["result"]["task"]["id"]
    found: dict[str, list[str]] = {name: [] for name in A2A}
    for role in ROLES:
        headers = people[role]
        parked = rpc(live_url, owner, "SendMessage", send_params(
            scripts.approval_packet(), scripts.needs_approval())).json()["result"]["task"]["id"]
        card = httpx.get(f"{live_url}/.well-known/agent-card.json", headers=headers)
        found["GET agent card"].append("ok" if card.status_code == 200 else str(card.status_code))
        found["SendMessage"].append(outcome(rpc(live_url, headers, "SendMessage",
                                                send_params(scripts.packet(), scripts.leaf()))))
        found["GetTask"].append(outcome(rpc(live_url, headers, "GetTask", {"id": finished})))
        found["ListTasks"].append(outcome(rpc(live_url, headers, "ListTasks", {})))
        found["CancelTask"].append(outcome(rpc(live_url, headers, "CancelTask", {"id": parked})))
        found["SubscribeToTask"].append(outcome(rpc(live_url, headers, "SubscribeToTask", {"id": finished})))
        found["GetExtendedAgentCard"].append(outcome(rpc(live_url, headers, "GetExtendedAgentCard", {})))
        config = {"taskId": finished, "id": role}
        for method, params in (("CreateTaskPushNotificationConfig", {**config, "url": PUSH_URL}),
                               ("GetTaskPushNotificationConfig", config),
                               ("ListTaskPushNotificationConfigs", {"taskId": finished}),
                               ("DeleteTaskPushNotificationConfig", config)):
            found[method].append(outcome(rpc(live_url, headers, method, params)))
    expected = {name: row.split() for name, row in A2A.items()}
    assert found == expected
