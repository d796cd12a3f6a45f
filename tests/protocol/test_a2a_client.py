"""The Django-free A2A client against an A2A server built with the official SDK in the test,
on loopback: it answers, asks for input (and takes the answer as a follow-up), asks for
auth, fails, or hangs, by skill."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import pytest
import uvicorn
from a2a.helpers.proto_helpers import new_data_part, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentSkill,
    Task,
    TaskState,
    TaskStatus,
)
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Struct
from starlette.applications import Starlette

from delegations.protocol.a2a_client import (
    SKILLS_EXTENSION_URI,
    RemoteAgentConfig,
    RemoteAgentError,
    delegate,
)
from delegations.protocol.trace_context import TraceContext, outgoing
from tests.services import http_on_loopback

SKILLS = ("answer", "ask", "auth", "fail", "hang", "wrong")
# what the remote's card declares in Handoff's skills extension, as a Handoff remote does
DECLARED = {"answer": {"inputSchema": {"type": "object", "required": ["options"],
                                       "properties": {"options": {"type": "array"}}},
                       "outputSchema": {"type": "object", "required": ["answer"],
                                        "properties": {"answer": {"type": "integer"}}}},
            "wrong": {"outputSchema": {"type": "object", "required": ["answer"],
                                       "properties": {"answer": {"type": "integer"}}}}}
SECRET = "s3cret-token-value"


class ScriptedAgent(AgentExecutor):
    """Does what the skill named in the message's metadata says; records what it was sent."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.cancelled: list[str] = []

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None and context.task_id and context.context_id
        metadata = context.message.metadata
        skill = metadata["skill"] if "skill" in metadata else "follow-up"  # noqa: SIM401 (a Struct has no get)
        self.seen.append({"skill": skill, "text": context.get_user_input(),
                          "headers": context.call_context.state.get("headers", {})})
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if skill == "follow-up":     # the answer to "ask": the region it asked for
            await updater.start_work()
            await updater.add_artifact([new_data_part({"region": context.get_user_input()})])
            await updater.complete()
            return
        await event_queue.enqueue_event(Task(id=context.task_id, context_id=context.context_id,
                                             status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)))
        await updater.start_work()
        say = lambda text: new_text_message(text, context_id=context.context_id, task_id=context.task_id)  # noqa: E731
        if skill in ("answer", "wrong"):
            answer = 42 if skill == "answer" else "forty-two"
            await updater.add_artifact([new_data_part({"status": "SUCCESS", "output_payload": {"answer": answer}})])
            await updater.complete()
        elif skill == "ask":
            await updater.requires_input(say("Which region?"))
        elif skill == "auth":
            await updater.requires_auth(say("Sign in at https://remote.example/approve"))
        elif skill == "fail":
            await updater.failed(say("The quote service is down."))
        else:
            await asyncio.sleep(3600)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.cancelled.append(str(context.task_id))
        updater = TaskUpdater(event_queue, str(context.task_id), str(context.context_id))
        await updater.cancel()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def remote() -> Iterator[tuple[str, ScriptedAgent]]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    card = AgentCard(name="Remote", description="A scripted remote agent", version="1.0.0",
                     supported_interfaces=[AgentInterface(url=f"{url}/rpc", protocol_binding="JSONRPC",
                                                          protocol_version="1.0")],
                     capabilities=AgentCapabilities(streaming=True, extensions=[AgentExtension(
                         uri=SKILLS_EXTENSION_URI, params=ParseDict({"skills": DECLARED}, Struct()))]),
                     default_input_modes=["application/json"], default_output_modes=["application/json"],
                     skills=[AgentSkill(id=skill, name=skill, description=skill, tags=["test"]) for skill in SKILLS])
    agent = ScriptedAgent()
    handler = DefaultRequestHandler(agent_executor=agent, task_store=InMemoryTaskStore(), agent_card=card)
    app = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/rpc")])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/.well-known/agent-card.json", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    yield url, agent
    server.should_exit = True
    thread.join(timeout=10)


def config(url: str, **overrides: Any) -> RemoteAgentConfig:
    fields: dict[str, Any] = {"name": "remote", "card_url": url, "skills": SKILLS,
                              "secret_env": "HANDOFF_A2A_SECRET_REMOTE"}
    fields.update(overrides)
    return RemoteAgentConfig(**fields)


ENV = {"HANDOFF_A2A_SECRET_REMOTE": SECRET}


async def test_an_answer_comes_back_as_the_artifacts_data_with_the_task_id_announced(remote: Any) -> None:
    url, agent = remote
    announced: list[str] = []

    async def remember(task_id: str, context_id: str) -> None:
        announced.append(task_id)

    outcome = await delegate(config(url), skill="answer", input_data={"options": ["a"]},
                             goal="Pick the cheapest option.", deadline_s=20, on_task=remember, environ=ENV)
    assert outcome.state == "TASK_STATE_COMPLETED"
    assert outcome.result == {"status": "SUCCESS", "output_payload": {"answer": 42}}
    assert announced == [outcome.task_id] and outcome.messages == 1
    assert "Pick the cheapest option." in agent.seen[-1]["text"]
    assert agent.seen[-1]["headers"]["authorization"] == f"Bearer {SECRET}"


async def test_a_call_made_for_a_traced_run_carries_its_traceparent_and_an_untraced_one_none(remote: Any) -> None:
    url, agent = remote
    await delegate(config(url), skill="answer", input_data={"options": ["a"]}, goal="Pick one.",
                   deadline_s=20, environ=ENV)
    assert "traceparent" not in agent.seen[-1]["headers"]
    run = TraceContext("8bf92f3577b34da6a3ce929d0e0e4736", "40f067aa0ba902b7")
    token = outgoing.set(run)
    try:
        await delegate(config(url), skill="answer", input_data={"options": ["a"]}, goal="Pick one.",
                       deadline_s=20, environ=ENV)
    finally:
        outgoing.reset(token)
    assert agent.seen[-1]["headers"]["traceparent"] == run.traceparent


@pytest.mark.parametrize(("skill", "state", "says"), [
    ("ask", "TASK_STATE_INPUT_REQUIRED", "Which region?"),
    ("auth", "TASK_STATE_AUTH_REQUIRED", "Sign in"),
    ("fail", "TASK_STATE_FAILED", "quote service is down"),
])
async def test_a_remote_that_stops_says_how_and_why(remote: Any, skill: str, state: str, says: str) -> None:
    outcome = await delegate(config(remote[0]), skill=skill, input_data={}, goal="Go.", deadline_s=20,
                             environ=ENV)
    assert outcome.state == state and says in outcome.status_text and outcome.result is None


async def test_a_remote_that_never_ends_is_cancelled_at_the_deadline(remote: Any) -> None:
    url, agent = remote
    with pytest.raises(RemoteAgentError, match=r"did not finish within 1 s; its task \S+ was cancelled") as caught:
        await delegate(config(url), skill="hang", input_data={}, goal="Wait.", deadline_s=1, environ=ENV)
    assert agent.cancelled and agent.cancelled[-1] in caught.value.message


async def test_a_skill_outside_the_record_is_refused_before_anything_is_sent(remote: Any) -> None:
    url, agent = remote
    sent = len(agent.seen)
    with pytest.raises(RemoteAgentError, match="no skill 'fail'"):
        await delegate(config(url, skills=("answer",)), skill="fail", input_data={}, goal="Go.",
                       deadline_s=5, environ=ENV)
    assert len(agent.seen) == sent


async def test_a_missing_secret_is_refused_and_named_without_its_value(remote: Any) -> None:
    with pytest.raises(RemoteAgentError, match="HANDOFF_A2A_SECRET_REMOTE is not set"):
        await delegate(config(remote[0]), skill="answer", input_data={}, goal="Go.", deadline_s=5, environ={})
    with pytest.raises(RemoteAgentError, match="must start with HANDOFF_A2A_SECRET_"):
        await delegate(config(remote[0], secret_env="HOME"), skill="answer", input_data={}, goal="Go.",
                       deadline_s=5, environ=ENV)


class Garbage(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b"{this is not a card")

    def log_message(self, *args: object) -> None:
        pass


async def test_a_card_that_does_not_parse_or_a_remote_that_is_down_fails_with_the_reason() -> None:
    with http_on_loopback(Garbage) as url, pytest.raises(RemoteAgentError, match="could not be read") as garbled:
        await delegate(config(url), skill="answer", input_data={}, goal="Go.", deadline_s=5, environ=ENV)
    down = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(RemoteAgentError, match="could not be read") as refused:
        await delegate(config(down), skill="answer", input_data={}, goal="Go.", deadline_s=5, environ=ENV)
    assert SECRET not in garbled.value.message + refused.value.message


async def test_an_input_the_declared_input_schema_refuses_is_not_sent(remote: Any) -> None:
    url, agent = remote
    sent = len(agent.seen)
    with pytest.raises(RemoteAgentError, match=r"does not match the input schema .* answer .*nothing was sent"):
        await delegate(config(url), skill="answer", input_data={"choices": []}, goal="Go.", deadline_s=5,
                       environ=ENV)
    assert len(agent.seen) == sent
    outcome = await delegate(config(url), skill="answer", input_data={"options": []}, goal="Go.",
                             deadline_s=5, environ=ENV)
    assert outcome.output_schema == DECLARED["answer"]["outputSchema"]


class GarbledStream(BaseHTTPRequestHandler):
    """A card that parses, and a JSON-RPC endpoint that streams garbage."""

    def do_GET(self) -> None:
        url = f"http://127.0.0.1:{self.server.server_address[1]}/rpc"
        card = {"name": "Garbled", "description": "streams garbage", "version": "1.0.0",
                "supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
                "capabilities": {"streaming": True}, "defaultInputModes": ["application/json"],
                "defaultOutputModes": ["application/json"],
                "skills": [{"id": "answer", "name": "answer", "description": "answer", "tags": ["t"]}]}
        self._send("application/json", json.dumps(card).encode())

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self._send("text/event-stream", b"data: {this is not json\n\ndata: ]]\n\n")

    def _send(self, kind: str, body: bytes) -> None:
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


async def test_a_remote_that_streams_garbage_fails_with_the_reason() -> None:
    with http_on_loopback(GarbledStream) as url, pytest.raises(RemoteAgentError, match=r"remote agent remote failed: .*Invalid JSON-RPC") as caught:
        await delegate(config(url), skill="answer", input_data={"options": []}, goal="Go.", deadline_s=10,
                       environ=ENV)
    assert SECRET not in caught.value.message


class EndAnnouncedFirst(GarbledStream):
    """A remote that streams its history as status updates, as a Handoff remote did: the
    update of the event that ended the task says COMPLETED before the artifact and the
    final status follow."""

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        task = {"id": "t-1", "contextId": "c-1"}
        completed = {"status": {"state": "TASK_STATE_COMPLETED"}, "taskId": "t-1", "contextId": "c-1"}
        artifact = {"artifactId": "t-1-result", "parts": [{"data": {"status": "SUCCESS",
                                                                     "output_payload": {"answer": 42}}}]}
        results = [{"task": {**task, "status": {"state": "TASK_STATE_WORKING"}}}, {"statusUpdate": completed},
                   {"artifactUpdate": {"taskId": "t-1", "contextId": "c-1", "artifact": artifact, "lastChunk": True}},
                   {"statusUpdate": completed}]
        self._send("text/event-stream", "".join(
            f"data: {json.dumps({'jsonrpc': '2.0', 'id': request['id'], 'result': result})}\n\n"
            for result in results).encode())


async def test_a_completed_status_streamed_before_the_artifact_still_brings_the_artifact() -> None:
    with http_on_loopback(EndAnnouncedFirst) as url:
        outcome = await delegate(config(url), skill="answer", input_data={"options": []}, goal="Go.",
                                 deadline_s=10, environ=ENV)
    assert outcome.state == "TASK_STATE_COMPLETED"
    assert outcome.result == {"status": "SUCCESS", "output_payload": {"answer": 42}}
