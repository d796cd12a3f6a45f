"""/api/mcp-servers: superusers add, read, change and delete the MCP servers runs may use;
a record that names a variable outside HANDOFF_MCP_SECRET_*, an unknown capability, both
or neither of a URL and a stdio command, or a command the operator did not allowlist is
refused with every problem by field; the secret's value never appears."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from delegations.models import McpServer
from tests.conftest import bearer

pytestmark = [pytest.mark.django_db]

SECRET = "github-token-for-the-api-test-99"


@pytest.fixture
def root_api(admin_user: Any) -> dict[str, str]:
    return bearer(admin_user)


def send(client: Client, method: str, path: str, headers: dict[str, str], body: Any = None) -> Any:
    return getattr(client, method)(f"/api/mcp-servers{path}", body, content_type="application/json",
                                   headers=headers)


GITHUB = {"name": "github", "url": "https://mcp.example.com/mcp", "secret_env": "HANDOFF_MCP_SECRET_GITHUB",
          "allowed_tools": ["search_issues", "get_issue"], "tool_capabilities": {"search_issues": "search"}}


def test_a_superuser_adds_a_server_and_sees_whether_its_secret_is_set_never_the_secret(
        client: Client, root_api: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HANDOFF_MCP_SECRET_GITHUB", SECRET)
    created = send(client, "post", "", root_api, GITHUB)
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["secret_set"] is True and body["secret_env"] == "HANDOFF_MCP_SECRET_GITHUB"
    assert SECRET not in created.content.decode()
    server = McpServer.objects.get(name="github")
    config = server.to_config()
    assert config is not None
    assert config.tools == (("search_issues", "search"), ("get_issue", "network_outbound"))
    listed = send(client, "get", "", root_api)
    assert [s["name"] for s in listed.json()] == ["github"]


def test_a_superuser_changes_and_deletes_a_server(client: Client, root_api: dict[str, str]) -> None:
    server_id = send(client, "post", "", root_api, GITHUB).json()["id"]
    changed = send(client, "put", f"/{server_id}", root_api, {"enabled": False, "timeout_s": 5})
    assert changed.status_code == 200 and changed.json()["enabled"] is False
    assert changed.json()["allowed_tools"] == ["search_issues", "get_issue"]
    assert McpServer.objects.run_configs() == []
    assert send(client, "delete", f"/{server_id}", root_api).status_code == 204
    assert send(client, "get", f"/{server_id}", root_api).status_code == 404


@pytest.mark.parametrize(("change", "field", "said"), [
    ({"secret_env": "DJANGO_SECRET_KEY"}, "secret_env", "HANDOFF_MCP_SECRET_"),
    ({"tool_capabilities": {"search_issues": "teleport"}}, "tool_capabilities", "unknown capability"),
    ({"tool_capabilities": {"delete_repo": "search"}}, "tool_capabilities", "not in allowed_tools"),
    ({"stdio_command": "files"}, "url", "not both"),
    ({"url": ""}, "url", "either a URL or a stdio command"),
    ({"url": "", "stdio_command": "rm-everything"}, "stdio_command", "not in HANDOFF_MCP_STDIO_COMMANDS"),
    ({"url": "file:///etc/passwd"}, "url", "valid URL"),
    ({"url": "https://bot:hunter2-token@mcp.example.com/mcp"}, "url", "credentials out of the URL"),
    ({"url": "http://[::1/mcp"}, "url", "valid URL"),
    ({"name": "Git_Hub"}, "name", "lowercase"),
    ({"allowed_tools": ["search issues"]}, "allowed_tools", "letters, digits"),
])
def test_a_server_the_rules_refuse_is_422_by_field_and_not_stored(
        client: Client, root_api: dict[str, str], change: dict[str, Any], field: str, said: str) -> None:
    response = send(client, "post", "", root_api, {**GITHUB, **change})
    assert response.status_code == 422, response.json()
    assert any(said in message for message in response.json()["detail"][field])
    assert not McpServer.objects.exists()


def test_a_stdio_command_from_the_operators_allowlist_is_taken(
        client: Client, root_api: dict[str, str], settings: Any) -> None:
    settings.HANDOFF_MCP_STDIO_COMMANDS = {"files": ["/usr/local/bin/mcp-files", "--read-only"]}
    response = send(client, "post", "", root_api, {**GITHUB, "url": "", "stdio_command": "files"})
    assert response.status_code == 201, response.json()
    config = McpServer.objects.get().to_config()
    assert config is not None and config.command == ("/usr/local/bin/mcp-files", "--read-only")
    settings.HANDOFF_MCP_STDIO_COMMANDS = {}
    assert McpServer.objects.run_configs() == []   # no longer allowlisted: not used


def test_a_composer_may_not_see_or_add_servers(client: Client, composer: Any) -> None:
    headers = bearer(composer)
    assert send(client, "get", "", headers).status_code == 403
    refused = send(client, "post", "", headers, GITHUB)
    assert refused.status_code == 403 and "superusers" in refused.json()["detail"]
    assert not McpServer.objects.exists()
