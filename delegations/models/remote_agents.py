from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator, URLValidator
from django.db import models

from delegations.protocol.a2a_client import SECRET_ENV_PREFIX, RemoteAgentConfig
from delegations.protocol.a2a_subagents import parse_remote_ref, remote_ref
from delegations.protocol.capabilities import KNOWN_CAPABILITIES

from .peer_urls import credentials_problem

DEFAULT_CAPABILITY = "network_outbound"
_SKILL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@\-]{0,199}$")


@dataclass(frozen=True, slots=True)
class RemoteSkillListing:
    """One skill an enabled remote agent offers, as the skill catalog lists it: what a
    person needs to pick it (where it runs, what it needs, what a message costs)."""

    agent: str
    skill: str
    card_host: str
    capability: str
    price_per_call_usd: float

    @property
    def ref(self) -> str:
        """What a packet's ``skill`` names it by."""
        return remote_ref(self.agent, self.skill)

    @property
    def requires_approval(self) -> bool:
        return self.capability in settings.HANDOFF_APPROVAL_REQUIRED_CAPABILITIES

    def matches(self, *, q: str, capability: str, requires_approval: bool | None) -> bool:
        words = q.strip().lower()
        return ((not words or words in self.ref.lower()) and (not capability or capability == self.capability)
                and (requires_approval is None or requires_approval == self.requires_approval))


class RemoteAgentQuerySet(models.QuerySet["RemoteAgent"]):
    def listings(self, *, q: str = "", capability: str = "", subagent_type: str = "",
                 requires_approval: bool | None = None, tag: str = "") -> list[RemoteSkillListing]:
        """The enabled agents' skills matching the skill catalog's filters, so the catalog
        page and ``GET /api/skills`` list the same. A remote skill has no role and no tags
        here (its card is read only when a run calls it), so filtering by either leaves none."""
        if subagent_type or tag:
            return []
        listed = [RemoteSkillListing(agent.name, skill, agent.card_host, agent.capability,
                                     agent.price_per_call_usd)
                  for agent in self.filter(enabled=True).order_by("name") for skill in agent.allowed_skills]
        return [listing for listing in listed
                if listing.matches(q=q, capability=capability, requires_approval=requires_approval)]

    def run_configs(self) -> list[RemoteAgentConfig]:
        """The enabled agents as the A2A client takes them."""
        return [agent.to_config() for agent in self.filter(enabled=True).order_by("name")]

    def offering(self, ref: str) -> RemoteAgentConfig | None:
        """The enabled agent that offers the remote skill ``ref`` (``<agent>/<skill>``)."""
        remote = parse_remote_ref(ref)
        if remote is None:
            return None
        name, skill = remote
        agent = self.filter(enabled=True, name=name).first()
        return agent.to_config() if agent is not None and skill in agent.allowed_skills else None


class RemoteAgent(models.Model):
    """An A2A agent elsewhere whose skills runs may delegate to, within their capabilities
    and budgets. The operator's record: it decides which host receives which secret."""

    name = models.CharField(
        max_length=30, unique=True,
        validators=[RegexValidator(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$",
                                   "Use lowercase letters, digits and single hyphens.")],
        help_text="Short name runs know the agent by.")
    card_url = models.URLField(
        max_length=500, validators=[URLValidator(schemes=["http", "https"])],
        help_text="Where its agent card is, e.g. https://agents.example.com (the card is read "
                  "from /.well-known/agent-card.json there).")
    secret_env = models.CharField(
        "secret variable", max_length=100, blank=True,
        validators=[RegexValidator(rf"^{SECRET_ENV_PREFIX}[A-Z0-9_]+$",
                                   f"Name a variable that starts with {SECRET_ENV_PREFIX}.")],
        help_text=f"The NAME of the environment variable holding its credential (sent as a "
                  f"Bearer token); it must start with {SECRET_ENV_PREFIX}. The secret itself "
                  f"is never stored.")
    allowed_skills = models.JSONField(
        default=list, help_text='The ids of its skills runs may use, e.g. ["price-check@1.0.0"].')
    capability = models.CharField(
        max_length=40, default=DEFAULT_CAPABILITY,
        help_text="The capability a run needs to delegate to it.")
    price_per_call_usd = models.FloatField(
        default=0.0, validators=[MinValueValidator(0.0)],
        help_text="What one message to it costs, counted against the run's max_cost_usd.")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = RemoteAgentQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        verbose_name = "remote A2A agent"

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        if problem := credentials_problem(self.card_url or "", SECRET_ENV_PREFIX):
            errors["card_url"] = [problem]
        skills = self.allowed_skills
        if not isinstance(skills, list) or not skills or not all(isinstance(s, str) for s in skills):
            errors["allowed_skills"] = ["List at least one skill id."]
        else:
            bad = [skill for skill in skills if not _SKILL_ID.match(skill)]
            if bad:
                errors["allowed_skills"] = [f"'{bad[0]}' is not a skill id (letters, digits, '.', "
                                            f"'_', '-' and '@', such as price-check@1.0.0)."]
        if self.capability not in KNOWN_CAPABILITIES:
            errors["capability"] = [f"Unknown capability {self.capability!r}; known: "
                                    f"{', '.join(sorted(KNOWN_CAPABILITIES))}."]
        if errors:
            raise ValidationError(errors)

    @property
    def card_host(self) -> str:
        """Where the agent runs, as pages show it: host and port, never a user or password
        a URL stored without the admin's check might carry."""
        try:
            parts = urlsplit(self.card_url)
            port = parts.port
        except ValueError:
            return ""
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host   # an IPv6 address, as URLs write it
        return f"{host}:{port}" if port else host

    def to_config(self) -> RemoteAgentConfig:
        return RemoteAgentConfig(name=self.name, card_url=self.card_url, skills=tuple(self.allowed_skills),
                                 secret_env=self.secret_env, capability=self.capability,
                                 price_per_call_usd=self.price_per_call_usd)
