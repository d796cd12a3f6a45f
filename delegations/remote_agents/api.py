"""REST routes for the remote A2A agents runs may delegate to (``/api/remote-agents``):
list, add, read, change, delete.

Superusers only (403 for everyone else): an agent record decides which host receives a
secret and which ``HANDOFF_A2A_SECRET_*`` variable is read for it, which is the operator's
choice. The secret itself never passes through here; an answer says only whether its
variable is set on this server.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema, Status
from pydantic import Field

from delegations.models import RemoteAgent
from delegations.request_bodies import RequestBody
from delegations.secret_records_api import record_or_404, require_superuser, saved_or_422

router = Router(tags=["remote agents"])


class RemoteAgentIn(RequestBody):
    name: str = Field(min_length=1, max_length=30, examples=["pricing"],
                      description="Lowercase letters, digits and hyphens; its skills are offered as "
                                  "a2a__<name>__<skill>.")
    card_url: str = Field(max_length=500, examples=["https://agents.example.com"],
                          description="Where its agent card is (/.well-known/agent-card.json there).")
    secret_env: str = Field("", max_length=100, examples=["HANDOFF_A2A_SECRET_PRICING"],
                            description="The name of the variable holding its credential (sent as a "
                                        "Bearer token); it must start with HANDOFF_A2A_SECRET_.")
    allowed_skills: list[str] = Field(min_length=1, max_length=200, examples=[["price-check@1.0.0"]])
    capability: str = Field("network_outbound", max_length=40,
                            description="The capability a run needs to delegate to it.")
    price_per_call_usd: float = Field(0.0, ge=0, le=1000,
                                      description="What one message to it costs, against max_cost_usd.")
    enabled: bool = True


class RemoteAgentUpdateIn(RequestBody):
    """Fields left out stay as they are."""

    name: str | None = Field(None, min_length=1, max_length=30)
    card_url: str | None = Field(None, max_length=500)
    secret_env: str | None = Field(None, max_length=100)
    allowed_skills: list[str] | None = Field(None, min_length=1, max_length=200)
    capability: str | None = Field(None, max_length=40)
    price_per_call_usd: float | None = Field(None, ge=0, le=1000)
    enabled: bool | None = None


class RemoteAgentOut(Schema):
    id: int
    name: str
    card_url: str
    secret_env: str
    secret_set: bool = Field(description="Whether secret_env is set on this server (never its value).")
    allowed_skills: list[str]
    capability: str
    price_per_call_usd: float
    enabled: bool
    created_at: datetime
    updated_at: datetime


class ErrorOut(Schema):
    detail: Any


def _out(agent: RemoteAgent) -> RemoteAgentOut:
    return RemoteAgentOut(
        id=agent.pk, name=agent.name, card_url=agent.card_url, secret_env=agent.secret_env,
        secret_set=bool(agent.secret_env and os.environ.get(agent.secret_env)),
        allowed_skills=agent.allowed_skills, capability=agent.capability,
        price_per_call_usd=agent.price_per_call_usd, enabled=agent.enabled,
        created_at=agent.created_at, updated_at=agent.updated_at)


def _superuser(request: HttpRequest) -> None:
    require_superuser(request, "remote agents")


def _agent(request: HttpRequest, agent_id: int) -> RemoteAgent:
    return record_or_404(request, RemoteAgent, agent_id, "remote agents", "remote agent")


def _saved(agent: RemoteAgent) -> Status[Any] | None:
    return saved_or_422(agent, ErrorOut)


@router.get("", response={200: list[RemoteAgentOut], 403: ErrorOut},
            summary="The remote A2A agents runs may delegate to")
def list_agents(request: HttpRequest) -> list[RemoteAgentOut]:
    _superuser(request)
    return [_out(agent) for agent in RemoteAgent.objects.all()]


@router.post("", response={201: RemoteAgentOut, 403: ErrorOut, 422: ErrorOut}, summary="Add a remote agent")
def create_agent(request: HttpRequest, body: RemoteAgentIn) -> Status[Any]:
    _superuser(request)
    agent = RemoteAgent(**body.model_dump())
    return _saved(agent) or Status(201, _out(agent))


@router.get("/{agent_id}", response={200: RemoteAgentOut, 403: ErrorOut, 404: ErrorOut},
            summary="One remote agent")
def read_agent(request: HttpRequest, agent_id: int) -> RemoteAgentOut:
    return _out(_agent(request, agent_id))


@router.put("/{agent_id}", response={200: RemoteAgentOut, 403: ErrorOut, 404: ErrorOut, 422: ErrorOut},
            summary="Change a remote agent")
def update_agent(request: HttpRequest, body: RemoteAgentUpdateIn, agent_id: int) -> Status[Any]:
    agent = _agent(request, agent_id)
    for field, value in body.model_dump(exclude_unset=True).items():
        if value is not None:
            setattr(agent, field, value)
    return _saved(agent) or Status(200, _out(agent))


@router.delete("/{agent_id}", response={204: None, 403: ErrorOut, 404: ErrorOut},
               summary="Delete a remote agent")
def delete_agent(request: HttpRequest, agent_id: int) -> Status[None]:
    _agent(request, agent_id).delete()
    return Status(204, None)
