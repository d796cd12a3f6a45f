"""Handoff as an A2A agent, driven by the official SDK's client against a live server process
(uvicorn, the embedded worker, the scripted adapter) on loopback, on both transports."""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema
import pytest
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTasksRequest,
    StreamResponse,
    SubscribeToTaskRequest,
)
from a2a.utils.errors import A2AError

from tests.delegations import scripts
from tests.delegations.interop.a2a.conftest import (
    BINDINGS,
    a2a_client,
    as_dict,
    message,
    request,
    scripted,
    state_name,
)

pytestmark = [pytest.mark.slow]

EXTENSION = "https://handoff.dev/a2a/extensions/skills/v1"


@pytest.fixture
def caching(live_url: str) -> Any:
    return scripts.add_caching_skill()


@pytest.fixture
def composer_approver(django_user_model: Any) -> Any:
    from tests.conftest import make_user

    return make_user(django_user_model, "cara", "composers", "approvers", password=None)


async def collect(stream: Any) -> list[StreamResponse]:
    return [event async for event in stream]


def seqs(events: list[StreamResponse]) -> list[int]:
    """The event-log seqs a stream carried: its snapshot's history, then its updates."""
    found = []
    for event in events:
        if event.HasField("task"):
            found += [int(item.metadata["seq"]) for item in event.task.history]
        elif event.HasField("status_update") and "seq" in event.status_update.metadata:
            found.append(int(event.status_update.metadata["seq"]))
    return found


def logged_seqs(url: str, headers: dict[str, str], run_id: str) -> list[int]:
    from delegations.interop.a2a.tasks import HISTORY_EVENTS

    events = httpx.get(f"{url}/api/runs/{run_id}/events", headers=headers).json()["events"]
    return [event["seq"] for event in events if event["type"] in HISTORY_EVENTS]


def public_card(url: str) -> dict[str, Any]:
    return dict(httpx.get(f"{url}/.well-known/agent-card.json").json())


def decide(url: str, headers: dict[str, str], approval_id: int, **body: Any) -> None:
    answer = httpx.post(f"{url}/api/approvals/{approval_id}/decision", headers=headers, json=body)
    assert answer.status_code == 200, answer.text


# -- the card -----------------------------------------------------------------------------------

def test_the_card_lists_each_skill_with_its_schemas_in_handoffs_extension(
        live_url: str, caching: Any, composer_api: dict[str, str]) -> None:
    card = httpx.get(f"{live_url}/.well-known/agent-card.json").json()
    skill = next(s for s in card["skills"] if s["id"] == "caching@1.0.0")
    assert skill["inputModes"] == ["application/json"] and skill["outputModes"] == ["application/json"]
    [extension] = [e for e in card["capabilities"]["extensions"] if e["uri"] == EXTENSION]
    schemas = extension["params"]["skills"]["caching@1.0.0"]
    assert schemas["inputSchema"]["required"] == ["options"]
    assert set(schemas["outputSchema"]["properties"]) == {"price", "currency"}
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert {i["protocolBinding"] for i in card["supportedInterfaces"]} == {"JSONRPC", "HTTP+JSON"}
    assert all(i["url"].startswith(live_url) for i in card["supportedInterfaces"])
    # a client handed only the JSON-RPC URL finds the same card under it, without a token
    assert httpx.get(f"{live_url}/a2a/jsonrpc/.well-known/agent-card.json").json() == card


async def test_the_extended_card_lists_what_the_callers_token_may_run(
        live_url: str, caching: Any, composer_api: dict[str, str], approver_api: dict[str, str]) -> None:
    async with a2a_client(live_url, composer_api) as client:
        composing = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
    async with a2a_client(live_url, approver_api) as client:
        approving = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
    assert "caching@1.0.0" in [s.id for s in composing.skills]
    assert "caching@1.0.0" not in [s.id for s in approving.skills]


# -- running a skill ----------------------------------------------------------------------------

@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_skill_streams_to_completed_with_a_schema_valid_artifact(
        live_url: str, caching: Any, composer_api: dict[str, str], binding: str) -> None:
    card = public_card(live_url)
    [extension] = [e for e in card["capabilities"]["extensions"] if e["uri"] == EXTENSION]
    output_schema = extension["params"]["skills"]["caching@1.0.0"]["outputSchema"]
    sent = message({"options": ["redis", "memcached"]}, text="Which cache is cheapest?",
                   skill="caching@1.0.0", adapter=scripted(scripts.leaf({"price": 2.5, "currency": "EUR"})))
    async with a2a_client(live_url, composer_api, binding) as client:
        events = await collect(client.send_message(request(sent)))
    states = [state_name(event) for event in events if state_name(event)]
    assert states[0] == "TASK_STATE_SUBMITTED" and states[-1] == "TASK_STATE_COMPLETED"
    assert "TASK_STATE_WORKING" in states
    [artifact] = [event.artifact_update.artifact for event in events if event.HasField("artifact_update")]
    # the artifact comes before the first COMPLETED: a client may stop reading there
    first_completed = [state_name(event) for event in events].index("TASK_STATE_COMPLETED")
    assert [event.HasField("artifact_update") for event in events].index(True) < first_completed
    package = as_dict(artifact)["parts"][0]["data"]
    jsonschema.validate(package["output_payload"], output_schema)
    assert package["output_payload"] == {"price": 2.5, "currency": "EUR"}
    report = as_dict(artifact)["metadata"]["criteriaReport"]
    assert report["fields_unchecked"] == ["price", "currency"] and report["summary"].endswith("· 2 fields unchecked")
    run_id = events[0].task.id
    assert seqs(events) == logged_seqs(live_url, composer_api, run_id)   # no event missing


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_blocking_send_answers_with_the_finished_task(
        live_url: str, composer_api: dict[str, str], binding: str) -> None:
    sent = message(scripts.packet(), adapter=scripted(scripts.leaf()))
    async with a2a_client(live_url, composer_api, binding, streaming=False) as client:
        [answer] = await collect(client.send_message(request(sent)))
        task = await client.get_task(GetTaskRequest(id=answer.task.id))
        listed = await client.list_tasks(ListTasksRequest(context_id=answer.task.context_id))
    assert state_name(answer) == "TASK_STATE_COMPLETED"
    assert as_dict(task.artifacts[0])["parts"][0]["data"]["output_payload"] == {"answer": 42}
    assert [t.id for t in listed.tasks] == [answer.task.id]


def test_a_text_alone_is_the_goal_of_a_task_lint_reads(live_url: str, composer_api: dict[str, str]) -> None:
    sent = send_body([{"text": "Say which of three caching options is cheapest."}],
                     adapter=scripted(scripts.leaf()))
    task = rpc(live_url, sent, composer_api).json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    run = httpx.get(f"{live_url}/api/runs/{task['id']}", headers=composer_api).json()
    assert run["goal"] == "Say which of three caching options is cheapest."
    codes = {finding["code"] for finding in run["findings"]}
    assert "OUTPUT_SCHEMA_MISSING" in codes
    assert "UNKNOWN_FIELD" not in codes   # the task's A2A context is a field of Handoff's own


# -- a person in the loop -----------------------------------------------------------------------

@pytest.mark.parametrize("binding", BINDINGS)
async def test_auth_required_waits_for_the_inbox_then_completes_and_a_resubscribe_misses_nothing(
        live_url: str, composer_api: dict[str, str], approver_api: dict[str, str], binding: str) -> None:
    config = scripts.needs_approval()
    # the turn after the decision takes a while, so the resubscribe comes before the task
    # ends: a task that ended cannot be subscribed to (the spec's UnsupportedOperationError)
    config["script"][-1]["delay_ms"] = 1500
    sent = message(scripts.approval_packet(), adapter=scripted(config))
    async with a2a_client(live_url, composer_api, binding) as client:
        stream = client.send_message(request(sent))
        first = [await anext(stream)]   # the stream drops after its snapshot
        await stream.aclose()
        task_id = first[0].task.id
        task = await client.get_task(GetTaskRequest(id=task_id))
        for _ in range(50):
            if state_name(StreamResponse(task=task)) == "TASK_STATE_AUTH_REQUIRED":
                break
            task = await client.get_task(GetTaskRequest(id=task_id))
        assert state_name(StreamResponse(task=task)) == "TASK_STATE_AUTH_REQUIRED"
        status = as_dict(task.status.message)
        assert "/inbox/" in status["parts"][0]["text"]
        with pytest.raises(A2AError, match="a message cannot decide it"):   # the inbox decides
            await collect(client.send_message(request(message(text="Approved.", task_id=task_id))))
        decide(live_url, approver_api, int(status["metadata"]["approvalId"]), decision="approve")
        events = await collect(client.subscribe(SubscribeToTaskRequest(id=task_id)))
    assert state_name(events[-1]) == "TASK_STATE_COMPLETED"
    assert seqs(events) == logged_seqs(live_url, composer_api, task_id)


async def test_input_required_is_answered_by_a_follow_up_message_on_the_same_task(
        live_url: str, composer_api: dict[str, str], approver_api: dict[str, str]) -> None:
    config = {"script": [{"text": "Which region?", "tool_calls": [{"name": "yield_control", "arguments": {
        "status": "BLOCKED_AWAITING_CLARIFICATION", "output_payload": {},
        "open_questions": ["Which region should I compare?"]}}]}, scripts.yield_turn()]}
    async with a2a_client(live_url, composer_api) as client:
        events = await collect(client.send_message(request(message(scripts.packet(), adapter=scripted(config)))))
        assert state_name(events[-1]) == "TASK_STATE_INPUT_REQUIRED"
        task_id = events[0].task.id
        assert "Which region" in as_dict(events[-1].status_update.status.message)["parts"][0]["text"]
    async with a2a_client(live_url, approver_api) as client:
        answered = await collect(client.send_message(request(message(text="Europe only.", task_id=task_id))))
    assert state_name(answered[-1]) == "TASK_STATE_COMPLETED"


@pytest.mark.parametrize("binding", BINDINGS)
async def test_cancel_ends_the_task_canceled_and_a_second_cancel_is_refused(
        live_url: str, composer_api: dict[str, str], binding: str) -> None:
    sent = message(scripts.approval_packet(), adapter=scripted(scripts.needs_approval()))
    async with a2a_client(live_url, composer_api, binding) as client:
        events = await collect(client.send_message(request(sent)))
        assert state_name(events[-1]) == "TASK_STATE_AUTH_REQUIRED"
        cancelled = await client.cancel_task(CancelTaskRequest(id=events[0].task.id))
        assert state_name(StreamResponse(task=cancelled)) == "TASK_STATE_CANCELED"
        with pytest.raises(A2AError, match="already ended"):
            await client.cancel_task(CancelTaskRequest(id=events[0].task.id))


# -- bad input: the spec's errors, a message saying what to fix, no run written ---------------

def rpc(url: str, body: Any, headers: dict[str, str], **extra: str) -> httpx.Response:
    content = body if isinstance(body, str | bytes) else None
    return httpx.post(f"{url}/a2a/jsonrpc", headers={"A2A-Version": "1.0", **headers, **extra},
                      content=content, json=None if content is not None else body)


def send_body(parts: list[dict[str, Any]], **metadata: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": {
        "messageId": "m-1", "role": "ROLE_USER", "parts": parts, "metadata": metadata}}}


def runs_written(url: str, headers: dict[str, str]) -> int:
    return int(httpx.get(f"{url}/api/runs", headers=headers).json()["count"])


@pytest.mark.parametrize(("parts", "metadata", "code", "says"), [
    ([{"text": "   "}], {}, -32602, "no usable part"),
    ([{"url": "https://example.com/a.pdf"}], {}, -32602, "no usable part"),
    ([{"data": {"options": []}}], {"skill": "caching@1.0.0"}, -32602, "options"),
    ([{"data": {"options": ["a"]}}], {"skill": "nosuch@1.0.0"}, -32602, "nosuch"),
    ([{"data": {"goal": "a"}}, {"data": {"goal": "b"}}], {}, -32602, "2 data parts"),
    ([{"data": [1, 2]}], {}, -32602, "JSON object"),
])
def test_a_message_handoff_cannot_use_is_refused_and_writes_no_run(
        live_url: str, caching: Any, composer_api: dict[str, str], parts: list[dict[str, Any]],
        metadata: dict[str, Any], code: int, says: str) -> None:
    answer = rpc(live_url, send_body(parts, **metadata), composer_api)
    assert answer.status_code == 200
    error = answer.json()["error"]
    assert error["code"] == code and says in error["message"], error
    assert runs_written(live_url, composer_api) == 0


def test_the_rest_transport_answers_bad_input_with_http_statuses(
        live_url: str, caching: Any, composer_api: dict[str, str]) -> None:
    headers = {"A2A-Version": "1.0", **composer_api}
    refused = httpx.post(f"{live_url}/a2a/rest/message:send", headers=headers, json={"message": {
        "messageId": "m-1", "role": "ROLE_USER", "parts": [{"data": {"options": ["a"]}}],
        "metadata": {"skill": "nosuch"}}})
    assert refused.status_code == 400 and "nosuch" in refused.text
    missing = httpx.get(f"{live_url}/a2a/rest/tasks/no-such-task", headers=headers)
    assert missing.status_code == 404 and "No task no-such-task" in missing.text
    not_utf8 = httpx.post(f"{live_url}/a2a/rest/message:send", headers=headers, content=b"\xff\xfe")
    assert not_utf8.status_code == 400 and "not UTF-8" in not_utf8.json()["detail"]
    huge = b'{"message": {"messageId": "m-2", "role": "ROLE_USER", "parts": [{"text": "' + b"a" * 3_000_000 + b'"}]}}'
    for path in ("/a2a/rest/message:send", "/a2a/jsonrpc"):   # refused as /api and /mcp refuse it
        too_large = httpx.post(f"{live_url}{path}", headers=headers, content=huge)
        assert too_large.status_code == 413 and "larger than this server accepts" in too_large.json()["detail"]
    assert runs_written(live_url, composer_api) == 0


def test_another_persons_task_is_not_found(live_url: str, composer_api: dict[str, str],
                                            other_composer: Any) -> None:
    from tests.conftest import bearer

    sent = send_body([{"data": scripts.packet()}], adapter=scripted(scripts.leaf()))
    task_id = rpc(live_url, sent, composer_api).json()["result"]["task"]["id"]
    theirs = bearer(other_composer)
    for method in ("GetTask", "CancelTask"):
        error = rpc(live_url, {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"id": task_id}},
                    theirs).json()["error"]
        assert error["code"] == -32001 and task_id in error["message"]
    follow_up = send_body([{"text": "hello"}])
    follow_up["params"]["message"]["taskId"] = task_id
    assert rpc(live_url, follow_up, theirs).json()["error"]["code"] == -32001


def test_a_stream_without_a_token_is_401_and_a_wrong_token_too(live_url: str) -> None:
    body = {**send_body([{"data": scripts.packet()}]), "method": "SendStreamingMessage"}
    anonymous = rpc(live_url, body, {})
    assert anonymous.status_code == 401 and "Bearer" in anonymous.headers["www-authenticate"]
    wrong = rpc(live_url, body, {"Authorization": "Bearer hnd_not-a-token"})
    assert wrong.status_code == 401 and "wrong or was revoked" in wrong.text
    rest = httpx.post(f"{live_url}/a2a/rest/message:stream", json={"message": {}})
    assert rest.status_code == 401


@pytest.mark.parametrize(("body", "code"), [
    ("{not json", -32700),
    ('{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": ' + "[" * 50_000 + "]" * 50_000 + "}", -32700),
    (b"\xff\xfe", -32700),   # not UTF-8 (json.loads alone reads it as UTF-16)
    ({"jsonrpc": "2.0", "id": 1}, -32600),
    ({"jsonrpc": "2.0", "id": 1, "method": "NoSuchMethod", "params": {}}, -32601),
    ({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": 5}}, -32602),
])
def test_a_malformed_json_rpc_envelope_gets_its_error_code(
        live_url: str, composer_api: dict[str, str], body: Any, code: int) -> None:
    answer = rpc(live_url, body, composer_api)
    assert answer.status_code == 200 and answer.json()["error"]["code"] == code, answer.text


def test_an_unsupported_a2a_version_is_refused(live_url: str, composer_api: dict[str, str]) -> None:
    answer = rpc(live_url, send_body([{"data": scripts.packet()}]), composer_api, **{"A2A-Version": "9.9"})
    error = answer.json()["error"]
    assert error["code"] == -32009 and "9.9" in error["message"], error
    assert runs_written(live_url, composer_api) == 0


def test_a_host_outside_allowed_hosts_is_refused(live_url: str, composer_api: dict[str, str]) -> None:
    answer = httpx.get(f"{live_url}/.well-known/agent-card.json", headers={"Host": "evil.example"})
    assert answer.status_code == 400 and "ALLOWED_HOSTS" in answer.text


@pytest.mark.parametrize(("params", "says"), [
    ({"pageSize": 0}, "pageSize must be between 1 and 100"),
    ({"pageSize": 101}, "pageSize must be between 1 and 100"),
    ({"historyLength": -1}, "historyLength must be 0 or more"),
    ({"status": 99}, "Unknown status 99"),
    ({"status": "TASK_STATE_DONE"}, "Unknown status 'TASK_STATE_DONE'"),
    ({"pageToken": "page-two"}, "not one this server gave"),
])
def test_list_tasks_refuses_parameters_it_cannot_honour(live_url: str, composer_api: dict[str, str],
                                                        params: dict[str, Any], says: str) -> None:
    error = rpc(live_url, {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": params},
                composer_api).json()["error"]
    assert error["code"] == -32602 and says in error["message"], error


def test_list_tasks_pages_through_the_callers_tasks(live_url: str, composer_api: dict[str, str]) -> None:
    for _ in range(3):
        rpc(live_url, send_body([{"data": scripts.packet()}], adapter=scripted(scripts.leaf())), composer_api)
    listing = lambda **params: rpc(live_url, {"jsonrpc": "2.0", "id": 1, "method": "ListTasks",  # noqa: E731
                                              "params": params}, composer_api).json()["result"]
    first = listing(pageSize=2)
    assert (len(first["tasks"]), first["pageSize"], first["totalSize"]) == (2, 2, 3)
    second = listing(pageSize=2, pageToken=first["nextPageToken"])
    assert len(second["tasks"]) == 1 and not second.get("nextPageToken")
    assert {t["id"] for t in first["tasks"]}.isdisjoint(t["id"] for t in second["tasks"])


async def test_a_task_continues_the_trace_of_the_request_that_sent_it(
        live_url: str, composer_api: dict[str, str]) -> None:
    from asgiref.sync import sync_to_async

    from delegations.models import Run

    caller = "00-5bf92f3577b34da6a3ce929d0e0e4736-10f067aa0ba902b7-01"
    async with a2a_client(live_url, {**composer_api, "traceparent": caller}) as client:
        events = await collect(client.send_message(request(message(scripts.packet(),
                                                                   adapter=scripted(scripts.leaf())))))
    task_id = events[0].task.id
    assert await sync_to_async(lambda: Run.objects.get(pk=task_id).traceparent)() == caller
