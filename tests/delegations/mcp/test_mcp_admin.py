"""The admin's MCP servers: superusers add and change them, with the model's checks;
staff who are not superusers do not see them (a record decides where a secret goes)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from delegations.models import McpServer
from tests.conftest import make_user

pytestmark = [pytest.mark.django_db]

ADD = "/admin/delegations/mcpserver/add/"
FORM = {"name": "github", "url": "https://mcp.example.com/mcp", "stdio_command": "",
        "secret_env": "HANDOFF_MCP_SECRET_GITHUB", "allowed_tools": '["search_issues"]',
        "tool_capabilities": '{"search_issues": "search"}', "timeout_s": "30", "enabled": "on"}


def test_a_superuser_adds_a_server_in_the_admin(client: Client, admin_user: Any) -> None:
    client.force_login(admin_user)
    response = client.post(ADD, FORM)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert McpServer.objects.get().tool_capabilities == {"search_issues": "search"}


def test_the_admin_refuses_a_secret_variable_outside_the_mcp_prefix(client: Client, admin_user: Any) -> None:
    client.force_login(admin_user)
    response = client.post(ADD, {**FORM, "secret_env": "OPENAI_API_KEY"})
    assert response.status_code == 200 and "HANDOFF_MCP_SECRET_" in response.content.decode()
    assert not McpServer.objects.exists()


def test_staff_who_are_not_superusers_do_not_see_mcp_servers(client: Client, django_user_model: Any) -> None:
    staff = make_user(django_user_model, "stan", is_staff=True)
    client.force_login(staff)
    assert client.get("/admin/delegations/mcpserver/").status_code == 403
    assert client.post(ADD, FORM).status_code == 403
    assert not McpServer.objects.exists()
