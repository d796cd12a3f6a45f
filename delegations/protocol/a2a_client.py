"""A remote A2A agent as a subagent: the official ``a2a-sdk`` client, Django-free, configured
from what the host hands in (:class:`RemoteAgentConfig`, built by the worker from its records).

One call (:func:`delegate`) sends the packet's input as a data part and the goal as text,
follows the remote task's stream and says how it ended (:class:`RemoteOutcome`): its
result, the question of an INPUT_REQUIRED, the request of an AUTH_REQUIRED, or why it
failed. The time budget is enforced here: past ``deadline_s`` the remote task is cancelled,
as it is when the caller's task is cancelled.
A caller that checkpointed the task id (``on_task``) resumes with ``task_id``: the task is
read again (and subscribed to while it still runs) instead of being sent twice; with an
``answer`` too, that answer goes to the task as a follow-up message (a task that asked for
input continues with it). Every failure of the remote side (down, a card
that does not parse, a garbled stream, no end in time) is a :class:`RemoteAgentError` with
the reason; the secret is read from its variable at call time and never appears in one.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .schemas import validate_instance
from .trace_context import outgoing_headers

SECRET_ENV_PREFIX = "HANDOFF_A2A_SECRET_"
# the agent-card extension in which a Handoff agent declares each skill's JSON Schemas
# (an AgentSkill has no field for them)
SKILLS_EXTENSION_URI = "https://handoff.dev/a2a/extensions/skills/v1"
TERMINAL = frozenset({"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED",
                      "TASK_STATE_REJECTED"})
INTERRUPTED = frozenset({"TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"})


class RemoteAgentError(Exception):
    """The remote agent could not be used; ``message`` says why, for the run's error."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class RemoteAgentConfig:
    """A remote agent as the operator configured it."""

    name: str
    card_url: str
    skills: tuple[str, ...]
    secret_env: str = ""
    capability: str = "network_outbound"
    price_per_call_usd: float = 0.0


@dataclass
class RemoteOutcome:
    """How the remote task stands when the stream stopped."""

    task_id: str
    state: str
    context_id: str = ""
    result: dict[str, Any] | None = None
    output_schema: dict[str, Any] | None = None    # the one the remote declares for the skill
    status_text: str = ""
    messages: int = 0            # the messages this call sent: each counts as a model call


def _headers(config: RemoteAgentConfig, environ: Mapping[str, str]) -> dict[str, str]:
    if not config.secret_env:
        return {}
    if not config.secret_env.startswith(SECRET_ENV_PREFIX):
        raise RemoteAgentError(f"remote agent {config.name}: its secret variable must start with "
                               f"{SECRET_ENV_PREFIX}")
    secret = environ.get(config.secret_env)
    if not secret:
        raise RemoteAgentError(f"remote agent {config.name}: {config.secret_env} is not set")
    return {"Authorization": f"Bearer {secret}"}


def _state(event: Any) -> str:
    from a2a.types.a2a_pb2 import TaskState

    status = event.task.status if event.HasField("task") else event.status_update.status
    return str(TaskState.Name(status.state))


def _status_text(event: Any) -> str:
    from a2a.helpers.proto_helpers import get_message_text

    status = event.task.status if event.HasField("task") else event.status_update.status
    return get_message_text(status.message) if status.HasField("message") else ""


def _artifact_data(event: Any) -> dict[str, Any] | None:
    from a2a.helpers.proto_helpers import get_data_parts

    artifacts = list(event.task.artifacts) if event.HasField("task") else [event.artifact_update.artifact]
    for artifact in artifacts:
        for data in get_data_parts(artifact.parts):
            if isinstance(data, dict):
                return data
    return None


async def _follow(stream: Any, outcome: RemoteOutcome) -> RemoteOutcome:
    """Read the stream until the task ends or waits for someone. A COMPLETED status that
    comes before any artifact is read past: a remote that streams its event log as status
    updates may send the status of the event that ended its task before the artifact (a
    Handoff remote did, until c40b24f)."""
    async for event in stream:
        if event.HasField("message"):
            continue
        if event.HasField("task"):
            outcome.task_id = event.task.id
            outcome.context_id = event.task.context_id or outcome.context_id
        if event.HasField("artifact_update") or (event.HasField("task") and event.task.artifacts):
            outcome.result = _artifact_data(event) or outcome.result
        if event.HasField("task") or event.HasField("status_update"):
            outcome.state = _state(event)
            outcome.status_text = _status_text(event) or outcome.status_text
            if outcome.state == "TASK_STATE_COMPLETED" and outcome.result is None:
                continue
            if outcome.state in TERMINAL | INTERRUPTED and not event.HasField("task"):
                return outcome
            if event.HasField("task") and outcome.state in TERMINAL:
                return outcome
    return outcome


async def delegate(config: RemoteAgentConfig, *, skill: str, input_data: dict[str, Any], goal: str,
                   deadline_s: float, task_id: str = "", context_id: str = "", answer: str = "",
                   on_task: Callable[[str, str], Awaitable[None]] | None = None,
                   environ: Mapping[str, str] | None = None) -> RemoteOutcome:
    """Run ``skill`` of the remote agent (or follow ``task_id``, already sent; or send
    ``answer`` on it, to a task that asked for input) until it ends, waits for someone, or
    ``deadline_s`` passes (then it is cancelled: RemoteAgentError)."""
    import os

    import httpx
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.helpers.proto_helpers import new_data_part, new_text_part
    from a2a.types.a2a_pb2 import Message, Role, SendMessageRequest
    from google.protobuf.json_format import ParseDict
    from google.protobuf.struct_pb2 import Struct

    if skill not in config.skills:
        raise RemoteAgentError(f"remote agent {config.name} offers no skill {skill!r} here; "
                               f"allowed: {', '.join(config.skills) or 'none'}")
    headers = _headers(config, environ if environ is not None else os.environ)
    # the remote agent's task continues the run's trace (an A2A server reads the header)
    headers.update(outgoing_headers())
    outcome = RemoteOutcome(task_id=task_id, state="", context_id=context_id)
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=None)) as http:
        try:
            card = await asyncio.wait_for(A2ACardResolver(http, config.card_url).get_agent_card(), 30)
        except Exception as exc:
            raise RemoteAgentError(f"remote agent {config.name}: its card at {config.card_url} "
                                   f"could not be read ({type(exc).__name__})") from None
        schemas = declared_schemas(card, skill)
        issues = validate_instance(schemas["inputSchema"], input_data, "input") \
            if isinstance(schemas.get("inputSchema"), dict) and not task_id else []
        if issues:
            raise RemoteAgentError(f"remote agent {config.name}: the input does not match the input "
                                   f"schema its skill {skill} declares ({issues[0].field}: "
                                   f"{issues[0].message}); nothing was sent")
        if isinstance(schemas.get("outputSchema"), dict):
            outcome.output_schema = schemas["outputSchema"]
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
        try:
            async with asyncio.timeout(deadline_s):
                if task_id and not answer:
                    stream = await _resumed(client, task_id)
                else:
                    if answer:    # a follow-up on the same task: the answer it asked for
                        message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER,
                                          task_id=task_id, context_id=context_id,
                                          parts=[new_text_part(answer)])
                    else:
                        message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER,
                                          parts=[new_data_part(input_data), new_text_part(goal)],
                                          metadata=ParseDict({"skill": skill}, Struct()))
                    outcome.messages = 1
                    stream = client.send_message(SendMessageRequest(message=message))
                    stream = _announcing(stream, outcome, on_task)
                return _checked(await _follow(stream, outcome), config)
        except asyncio.CancelledError:
            # the local run was cancelled (or timed out): its remote task goes with it
            await _cancel(client, outcome.task_id)
            raise
        except TimeoutError:
            await _cancel(client, outcome.task_id)
            raise RemoteAgentError(
                f"remote agent {config.name} did not finish within {deadline_s:g} s; its task "
                f"{outcome.task_id or '(not started)'} was cancelled") from None
        except RemoteAgentError:
            raise
        except Exception as exc:
            raise RemoteAgentError(f"remote agent {config.name} failed: {type(exc).__name__}: "
                                   f"{_without(str(exc), headers)[:300]}") from None


def declared_schemas(card: Any, skill: str) -> dict[str, Any]:
    """The input and output schemas a Handoff agent's card declares for ``skill`` (in its
    skills extension); empty for any other agent."""
    from google.protobuf.json_format import MessageToDict

    for extension in card.capabilities.extensions:
        if extension.uri == SKILLS_EXTENSION_URI:
            declared = MessageToDict(extension.params).get("skills", {}).get(skill)
            return declared if isinstance(declared, dict) else {}
    return {}


async def cancel(config: RemoteAgentConfig, task_id: str, *,
                 environ: Mapping[str, str] | None = None) -> None:
    """Cancel the remote task ``task_id``, best effort (a task left waiting for input or
    sign-in nobody will give, say)."""
    import os

    import httpx
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory

    headers = _headers(config, environ if environ is not None else os.environ)
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(10)) as http:
        try:
            card = await asyncio.wait_for(A2ACardResolver(http, config.card_url).get_agent_card(), 10)
        except Exception:   # the caller's failure already says what matters
            return
        await _cancel(ClientFactory(ClientConfig(httpx_client=http)).create(card), task_id)


async def _resumed(client: Any, task_id: str) -> Any:
    """The events of a task sent before: the task as it stands when it has ended or waits
    for someone (a subscription would be refused), else a new subscription to it."""
    from a2a.types.a2a_pb2 import GetTaskRequest, StreamResponse, SubscribeToTaskRequest, TaskState

    task = await client.get_task(GetTaskRequest(id=task_id))
    if TaskState.Name(task.status.state) not in TERMINAL | INTERRUPTED:
        return client.subscribe(SubscribeToTaskRequest(id=task_id))

    async def as_it_stands() -> Any:
        yield StreamResponse(task=task)

    return as_it_stands()


async def _announcing(stream: Any, outcome: RemoteOutcome,
                      on_task: Callable[[str, str], Awaitable[None]] | None) -> Any:
    """The stream, telling ``on_task`` the task and context ids as soon as the first event
    names them."""
    announced = False
    async for event in stream:
        if not announced and event.HasField("task"):
            announced = True
            if on_task is not None:
                await on_task(event.task.id, event.task.context_id)
        yield event


def _checked(outcome: RemoteOutcome, config: RemoteAgentConfig) -> RemoteOutcome:
    if not outcome.state:
        raise RemoteAgentError(f"remote agent {config.name} ended its stream without a task state")
    if outcome.state == "TASK_STATE_COMPLETED" and outcome.result is None:
        raise RemoteAgentError(f"remote agent {config.name} completed task {outcome.task_id} "
                               f"without a data artifact")
    return outcome


async def _cancel(client: Any, task_id: str) -> None:
    """Cancel the remote task, best effort: it may have ended meanwhile."""
    from a2a.types.a2a_pb2 import CancelTaskRequest

    if not task_id:
        return
    try:
        await asyncio.wait_for(client.cancel_task(CancelTaskRequest(id=task_id)), 10)
    except Exception:   # the local failure already says what matters
        return


def _without(text: str, headers: Mapping[str, str]) -> str:
    for value in headers.values():
        text = text.replace(value, "[redacted]").replace(value.removeprefix("Bearer "), "[redacted]")
    return text
