"""Every MCP tool x every role -> what each must get, as test_route_table.py holds it for the
pages and the REST API (``/mcp`` itself has its rows there). A new tool without a row fails.

Outcomes: 401 (no token), ok, role (an error naming the role the tool needs), none (no run
or item the caller may act on: its existence is not revealed), kind (an approval, which only
an approver decides in the inbox, never through a tool).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import transaction
from django.test import Client

from delegations.interop.mcp.endpoint import server  # with every tool registered
from delegations.models import Approval
from tests.delegations import scripts
from tests.security.conftest import ROLES, World
from tests.security.routes import row

pytestmark = pytest.mark.django_db

#                                            anon out  comp appr owner root
TOOLS = {
    "find_skills":                           "401 ok ok ok ok ok",
    "describe_skill":                        "401 ok ok ok ok ok",
    "lint_packet":                           "401 ok ok ok ok ok",
    "start_run":                             "401 role ok role ok ok",
    "read_run":                              "401 none none ok ok ok",
    "wait_for_run":                          "401 none none ok ok ok",
    "cancel_run":                            "401 none none none ok ok",
    "send_message":                          "401 none none none ok ok",
    # the run's owner answers its question (an answer grants nothing); staff may too
    "answer_clarification":                  "401 none none none ok ok",
    # one tool per published skill, as start_run of it
    "run_skill.caching":                     "401 role ok role ok ok",
}
# an approval is no question: nobody decides one through a tool, not even its approver
APPROVAL_THROUGH_THE_ANSWER_TOOL =          "401 none none none kind kind"


def _arguments(tool: str, world: World, item: Approval) -> dict[str, Any]:
    run_id = world.run.pk
    return {
        "find_skills": {"text": world.skill.name},
        "describe_skill": {"name": world.skill.name},
        "lint_packet": {"packet": scripts.packet()},
        "start_run": {"packet": scripts.packet(), "adapter": "scripted", "adapter_config": scripts.leaf()},
        "read_run": {"run_id": run_id},
        "wait_for_run": {"run_id": run_id, "timeout_s": 0},
        "cancel_run": {"run_id": run_id},
        "send_message": {"run_id": run_id, "text": "also check the cache size"},
        "answer_clarification": {"item_id": item.pk, "answer": "the EU region"},
        "run_skill.caching": {"input": {"options": ["a", "b"]}, "adapter": "scripted",
                              "adapter_config": scripts.leaf()},
    }[tool]


def _outcome(world: World, role: str, tool: str, arguments: dict[str, Any]) -> str:
    token = world.tokens.get(role)
    headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool,
               "Accept": "application/json, text/event-stream",
               **({"Authorization": f"Bearer {token}"} if token else {})}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": arguments,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}}
    with transaction.atomic():
        response = Client(raise_request_exception=False).post(
            "/mcp", json.dumps(body), content_type="application/json", headers=headers)
        transaction.set_rollback(True)
    if response.status_code != 200:
        return str(response.status_code)
    result = response.json()["result"]
    if not result["isError"]:
        return "ok"
    message = result["content"][0]["text"]
    for outcome, words in (("role", " role, which "), ("none", "No run"), ("none", "No inbox item"),
                           ("kind", "only an approver decides")):
        if words in message:
            return outcome
    return f"error:{message[:60]}"


def _clarification(world: World) -> Approval:
    return Approval.objects.create(run=world.run, key=f"{world.run.pk}:clarification:sec",
                                   kind="clarification", title="Which region?",
                                   payload={"questions": ["Which region?"]})


def test_every_tool_has_a_row() -> None:
    registered = {*server._tools, "run_skill.caching"}   # and one tool per skill, as this one
    assert set(TOOLS) == registered, "a tool without a row, or a row without its tool"


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_each_role_gets_the_expected_outcome_from_each_tool(tool: str, world: World) -> None:
    item = _clarification(world)
    scripts.add_caching_skill()
    actual = row({role: _outcome(world, role, tool, _arguments(tool, world, item)) for role in ROLES})
    assert actual == TOOLS[tool], f"{tool} as {' '.join(ROLES)}"


def test_no_role_decides_an_approval_through_the_answer_tool(world: World) -> None:
    arguments = {"item_id": world.approval.pk, "answer": "approve"}
    actual = row({role: _outcome(world, role, "answer_clarification", arguments) for role in ROLES})
    assert actual == APPROVAL_THROUGH_THE_ANSWER_TOOL
    world.approval.refresh_from_db()
    assert world.approval.status == "pending"
