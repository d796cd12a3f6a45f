"""Remote agents' skills in the skill catalog and ``GET /api/skills``: each allowed skill
of an enabled agent, with where it runs, the capability it needs and what a message costs,
narrowed by the same search and filters, with "Compose" for composers; and, with none
configured, how to add one (for superusers, who may)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from delegations.models import RemoteAgent

pytestmark = pytest.mark.django_db

REF = "pricing/quote@1.0.0"


@pytest.fixture
def pricing() -> RemoteAgent:
    RemoteAgent.objects.create(name="archive", card_url="https://old.example.org", allowed_skills=["lookup"],
                               capability="search", enabled=False)
    return RemoteAgent.objects.create(
        name="pricing", card_url="https://agents.example.com:8443/a2a", allowed_skills=["quote@1.0.0", "history"],
        capability="search", price_per_call_usd=0.002, secret_env="HANDOFF_A2A_SECRET_PRICING")


def remote_cards(html: str) -> list[str]:
    return [chunk.split('"', 1)[0] for chunk in html.split('data-remote-skill="')[1:]]


def remote_section(html: str) -> str:
    return html.split('id="remote-skills"', 1)[1].split("</section>", 1)[0]


# -- the catalog page ------------------------------------------------------------------------

def test_the_catalog_lists_each_skill_of_an_enabled_agent_with_where_it_runs_and_its_cost(
        composer_client: Any, pricing: RemoteAgent) -> None:
    html = composer_client.get("/skills/").content.decode()
    remote = remote_section(html)
    assert "Remote agents" in remote
    assert remote_cards(html) == ["pricing/quote@1.0.0", "pricing/history"]   # not the disabled agent's
    assert "agents.example.com:8443" in remote and ">search</span>" in remote
    assert "$0.0020 per message" in remote and ">remote</span>" in remote
    assert f'href="/delegations/new/?skill={REF}">Compose</a>' in remote
    assert "HANDOFF_A2A_SECRET_PRICING" not in html


def test_the_search_and_filters_narrow_the_remote_skills_too(composer_client: Any, pricing: RemoteAgent) -> None:
    narrowed = composer_client.get("/skills/", {"q": "HIST"}, headers={"HX-Request": "true"}).content.decode()
    assert remote_cards(narrowed) == ["pricing/history"]
    assert remote_cards(composer_client.get("/skills/", {"capability": "fs_read"}).content.decode()) == []
    assert remote_cards(composer_client.get("/skills/", {"subagent_type": "reviewer"}).content.decode()) == []


def test_only_composers_get_a_compose_action(outsider_client: Any, pricing: RemoteAgent) -> None:
    html = outsider_client.get("/skills/").content.decode()
    assert remote_cards(html) == ["pricing/quote@1.0.0", "pricing/history"]
    assert "/delegations/new/" not in remote_section(html)


def test_with_no_remote_agent_a_superuser_is_told_how_to_add_one_and_others_see_a_line(
        client: Any, admin_user: Any, composer: Any) -> None:
    client.force_login(admin_user)
    told = remote_section(client.get("/skills/").content.decode())
    assert "No remote agent is configured." in told
    assert 'href="/admin/delegations/remoteagent/"' in told and "/api/remote-agents" in told
    client.force_login(composer)
    shown = remote_section(client.get("/skills/").content.decode())
    assert "No remote agents are configured." in shown and "/admin/" not in shown


# -- the API -----------------------------------------------------------------------------------

def test_the_skills_api_lists_the_remote_skills_beside_the_page_of_local_ones(
        client: Any, outsider_api: dict[str, str], pricing: RemoteAgent) -> None:
    body = client.get("/api/skills", headers=outsider_api).json()
    assert body["items"] == [] and body["total"] == 0
    assert body["remote_skills"][0] == {
        "ref": REF, "agent": "pricing", "skill": "quote@1.0.0", "card_host": "agents.example.com:8443",
        "capability": "search", "requires_approval": False, "price_per_call_usd": 0.002}
    assert [remote["ref"] for remote in client.get("/api/skills", {"q": "quote"}, headers=outsider_api)
            .json()["remote_skills"]] == [REF]
    assert "HANDOFF_A2A_SECRET_PRICING" not in json.dumps(body)
