"""Remote A2A agents (RemoteAgent): superusers add them in the admin with the model's checks,
staff who are not superusers do not see them, and a record becomes the A2A client's config."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from delegations.models import RemoteAgent
from delegations.protocol.a2a_client import RemoteAgentConfig
from tests.conftest import make_user

pytestmark = [pytest.mark.django_db]

ADD = "/admin/delegations/remoteagent/add/"
FORM = {"name": "quotes", "card_url": "https://agents.example.com", "secret_env": "HANDOFF_A2A_SECRET_QUOTES",
        "allowed_skills": '["price-check@1.0.0"]', "capability": "network_outbound",
        "price_per_call_usd": "0.02", "enabled": "on"}


def test_a_superuser_adds_a_remote_agent_and_the_client_gets_its_config(client: Client, admin_user: Any) -> None:
    client.force_login(admin_user)
    response = client.post(ADD, FORM)
    assert response.status_code == 302, response.content.decode()[:2000]
    RemoteAgent.objects.create(name="off", card_url="https://off.example.com", allowed_skills=["x"],
                               enabled=False)
    assert RemoteAgent.objects.run_configs() == [RemoteAgentConfig(
        name="quotes", card_url="https://agents.example.com", skills=("price-check@1.0.0",),
        secret_env="HANDOFF_A2A_SECRET_QUOTES", capability="network_outbound", price_per_call_usd=0.02)]


@pytest.mark.parametrize(("field", "value", "says"), [
    ("secret_env", "OPENAI_API_KEY", "HANDOFF_A2A_SECRET_"),
    ("card_url", "https://user:pw@agents.example.com", "Leave credentials out of the URL"),
    ("allowed_skills", "[]", "List at least one skill id"),
    ("allowed_skills", '["price check"]', "is not a skill id"),
    ("capability", "launch_rockets", "Unknown capability"),
    ("price_per_call_usd", "-1", "greater than or equal to 0"),
])
def test_the_admin_refuses_a_record_that_cannot_be_used(client: Client, admin_user: Any, field: str,
                                                        value: str, says: str) -> None:
    client.force_login(admin_user)
    response = client.post(ADD, {**FORM, field: value})
    assert response.status_code == 200 and says in response.content.decode()
    assert not RemoteAgent.objects.exists()


def test_staff_who_are_not_superusers_do_not_see_remote_agents(client: Client, django_user_model: Any) -> None:
    client.force_login(make_user(django_user_model, "stan", is_staff=True))
    assert client.get("/admin/delegations/remoteagent/").status_code == 403
    assert client.post(ADD, FORM).status_code == 403
    assert not RemoteAgent.objects.exists()
