"""/api/remote-agents: superusers add, read, change and delete the remote A2A agents runs may
delegate to; a record naming a variable outside HANDOFF_A2A_SECRET_*, an unknown capability,
no skill, a URL with credentials in it or a bad name is refused with every problem by
field; the secret's value never appears."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from delegations.models import RemoteAgent
from tests.conftest import bearer

pytestmark = [pytest.mark.django_db]

SECRET = "pricing-token-for-the-api-test-42"
PRICING = {"name": "pricing", "card_url": "https://agents.example.com",
           "secret_env": "HANDOFF_A2A_SECRET_PRICING", "allowed_skills": ["price-check@1.0.0"],
           "price_per_call_usd": 0.02}


@pytest.fixture
def root_api(admin_user: Any) -> dict[str, str]:
    return bearer(admin_user)


def send(client: Client, method: str, path: str, headers: dict[str, str], body: Any = None) -> Any:
    return getattr(client, method)(f"/api/remote-agents{path}", body, content_type="application/json",
                                   headers=headers)


def test_a_superuser_adds_an_agent_and_sees_whether_its_secret_is_set_never_the_secret(
        client: Client, root_api: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HANDOFF_A2A_SECRET_PRICING", SECRET)
    created = send(client, "post", "", root_api, PRICING)
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["secret_set"] is True and body["capability"] == "network_outbound"
    assert SECRET not in created.content.decode()
    [config] = RemoteAgent.objects.run_configs()
    assert config.skills == ("price-check@1.0.0",) and config.price_per_call_usd == 0.02
    assert [agent["name"] for agent in send(client, "get", "", root_api).json()] == ["pricing"]


def test_a_superuser_changes_and_deletes_an_agent(client: Client, root_api: dict[str, str]) -> None:
    agent_id = send(client, "post", "", root_api, PRICING).json()["id"]
    changed = send(client, "put", f"/{agent_id}", root_api, {"enabled": False, "capability": "search"})
    assert changed.status_code == 200 and changed.json()["enabled"] is False
    assert changed.json()["capability"] == "search" and changed.json()["allowed_skills"] == ["price-check@1.0.0"]
    assert RemoteAgent.objects.run_configs() == []
    assert send(client, "delete", f"/{agent_id}", root_api).status_code == 204
    assert send(client, "get", f"/{agent_id}", root_api).status_code == 404


@pytest.mark.parametrize(("change", "field", "said"), [
    ({"secret_env": "DJANGO_SECRET_KEY"}, "secret_env", "HANDOFF_A2A_SECRET_"),
    ({"capability": "teleport"}, "capability", "Unknown capability"),
    ({"allowed_skills": ["price check"]}, "allowed_skills", "is not a skill id"),
    ({"card_url": "file:///etc/passwd"}, "card_url", "valid URL"),
    ({"card_url": "https://bot:hunter2@agents.example.com"}, "card_url", "credentials out of the URL"),
    ({"card_url": "http://[agents.example.com"}, "card_url", "valid URL"),   # urlsplit raises on it
    ({"name": "Pri_Cing"}, "name", "lowercase"),
])
def test_an_agent_the_rules_refuse_is_422_by_field_and_not_stored(
        client: Client, root_api: dict[str, str], change: dict[str, Any], field: str, said: str) -> None:
    response = send(client, "post", "", root_api, {**PRICING, **change})
    assert response.status_code == 422, response.json()
    assert any(said in message for message in response.json()["detail"][field])
    assert not RemoteAgent.objects.exists()


def test_an_empty_skill_list_is_refused_by_the_body_check(client: Client, root_api: dict[str, str]) -> None:
    response = send(client, "post", "", root_api, {**PRICING, "allowed_skills": []})
    assert response.status_code == 422 and not RemoteAgent.objects.exists()


def test_a_composer_may_not_see_or_add_agents(client: Client, composer: Any) -> None:
    headers = bearer(composer)
    assert send(client, "get", "", headers).status_code == 403
    refused = send(client, "post", "", headers, PRICING)
    assert refused.status_code == 403 and "superusers" in refused.json()["detail"]
    assert not RemoteAgent.objects.exists()
