"""A2A clients (the official SDK's) against a live Handoff server process on loopback."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.helpers.proto_helpers import new_data_part, new_text_part
from a2a.types.a2a_pb2 import Message, Role, SendMessageRequest, StreamResponse
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Struct

BINDINGS = ["JSONRPC", "HTTP+JSON"]


def message(data: Any = None, *, text: str = "", skill: str | None = None,
            adapter: dict[str, Any] | None = None, task_id: str = "", context_id: str = "") -> Message:
    parts = [new_text_part(text)] if text else []
    if data is not None:
        parts.append(new_data_part(data))
    metadata: dict[str, Any] = {}
    if skill:
        metadata["skill"] = skill
    if adapter:
        metadata["adapter"] = adapter
    return Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=parts,
                   metadata=ParseDict(metadata, Struct()), task_id=task_id, context_id=context_id)


def scripted(config: dict[str, Any]) -> dict[str, Any]:
    return {"name": "scripted", "config": config}


def request(msg: Message, **configuration: Any) -> SendMessageRequest:
    sent = SendMessageRequest(message=msg)
    for key, value in configuration.items():
        setattr(sent.configuration, key, value)
    return sent


@asynccontextmanager
async def a2a_client(url: str, headers: dict[str, str], binding: str = "JSONRPC",
                     *, streaming: bool = True) -> AsyncIterator[Client]:
    """The SDK's client for Handoff's card, on ``binding``, with ``headers`` (a token)."""
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        factory = ClientFactory(ClientConfig(httpx_client=http, supported_protocol_bindings=[binding],
                                             streaming=streaming))
        yield factory.create(card)


def state_name(event: StreamResponse) -> str | None:
    from a2a.types.a2a_pb2 import TaskState

    if event.HasField("task"):
        return TaskState.Name(event.task.status.state)
    if event.HasField("status_update"):
        return TaskState.Name(event.status_update.status.state)
    return None


def as_dict(proto: Any) -> dict[str, Any]:
    return MessageToDict(proto)
