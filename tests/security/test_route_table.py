"""Every page and API route x every role -> the status each must get. The route lists are
read from the URL resolver and the OpenAPI schema, so a new route without a row here fails.

Roles (columns): anonymous, outsider (logged in, no group), composer (not the owner),
approver, owner (the composer whose run, delegation and token these are), superuser.
Pages send anonymous people to the login page (302); the API answers them 401. A page a
role may not use answers 403, or 404 where saying it exists would leak (another person's
run or delegation). GET on a POST-only route is 405; POST on a page without a form is 405.
Bodies are empty forms for pages and the small valid JSON bodies below for the API.
"""

from __future__ import annotations

from typing import Any

import pytest

from delegations.runs.export import run_export
from tests.delegations import scripts
from tests.security.conftest import ROLES, World
from tests.security.routes import api_routes, api_status, fill, page_routes, page_status, row

pytestmark = pytest.mark.django_db

#                                          anon out comp appr owner root
PAGES = {
    "GET login":                            "200 302 302 302 302 302",
    "POST login":                           "200 302 302 302 302 302",
    "GET logout":                           "302 405 405 405 405 405",
    "POST logout":                          "302 302 302 302 302 302",
    "GET password_change":                  "302 200 200 200 200 200",
    "POST password_change":                 "302 200 200 200 200 200",
    "GET password_change_done":             "302 200 200 200 200 200",
    "POST password_change_done":            "302 405 405 405 405 405",
    "GET skills:catalog":                   "302 200 200 200 200 200",
    "POST skills:catalog":                  "302 405 405 405 405 405",
    "GET skills:import":                    "302 302 200 302 200 200",
    "POST skills:import":                   "302 302 200 302 200 200",
    "GET skills:detail":                    "302 200 200 200 200 200",
    "POST skills:detail":                   "302 405 405 405 405 405",
    "GET skills:version":                   "302 200 200 200 200 200",
    "POST skills:version":                  "302 405 405 405 405 405",
    "GET skills:manifest":                  "302 200 200 200 200 200",
    "POST skills:manifest":                 "302 405 405 405 405 405",
    "GET skills:bundle":                    "302 200 200 200 200 200",
    "POST skills:bundle":                   "302 405 405 405 405 405",
    "GET delegations:dashboard":            "302 200 200 200 200 200",
    "POST delegations:dashboard":           "302 405 405 405 405 405",
    "GET delegations:account":              "302 200 200 200 200 200",
    "POST delegations:account":             "302 200 200 200 200 200",
    "GET delegations:token_create":         "302 405 405 405 405 405",
    "POST delegations:token_create":        "302 302 302 302 302 302",
    "GET delegations:token_revoke":         "302 405 405 405 405 405",
    # only the token's own user may revoke it, not even a superuser through the page
    "POST delegations:token_revoke":        "302 404 404 404 302 404",
    "GET delegations:delegation_list":      "302 200 200 200 200 200",
    "POST delegations:delegation_list":     "302 405 405 405 405 405",
    "GET delegations:delegation_new":       "302 403 200 403 200 200",
    "POST delegations:delegation_new":      "302 403 200 403 200 200",
    "GET delegations:delegation_lint":      "302 405 405 405 405 405",
    "POST delegations:delegation_lint":     "302 403 200 403 200 200",
    "GET delegations:delegation_fill":      "302 405 405 405 405 405",
    "POST delegations:delegation_fill":     "302 403 422 403 422 422",
    "GET delegations:delegation_edit":      "302 403 404 403 200 200",
    "POST delegations:delegation_edit":     "302 403 404 403 200 200",
    "GET delegations:delegation_dry_run":   "302 405 405 405 405 405",
    "POST delegations:delegation_dry_run":  "302 403 404 403 422 422",
    "GET delegations:delegation_tree":      "302 403 404 403 200 200",
    "POST delegations:delegation_tree":     "302 405 405 405 405 405",
    "GET delegations:tree_run":             "302 405 405 405 405 405",
    "POST delegations:tree_run":            "302 403 404 403 302 302",
    "GET delegations:tree_json":            "302 405 405 405 405 405",
    "POST delegations:tree_json":           "302 403 404 403 422 422",
    "GET delegations:tree_undo":            "302 405 405 405 405 405",
    "POST delegations:tree_undo":           "302 403 404 403 404 404",
    "GET delegations:tree_redo":            "302 405 405 405 405 405",
    "POST delegations:tree_redo":           "302 403 404 403 404 404",
    "GET delegations:tree_node_edit":       "302 405 405 405 405 405",
    "POST delegations:tree_node_edit":      "302 403 404 403 422 422",
    "GET delegations:tree_child_add":       "302 405 405 405 405 405",
    "POST delegations:tree_child_add":      "302 403 404 403 422 422",
    "GET delegations:tree_node_move":       "302 405 405 405 405 405",
    "POST delegations:tree_node_move":      "302 403 404 403 422 422",
    "GET delegations:tree_node_remove":     "302 405 405 405 405 405",
    "POST delegations:tree_node_remove":    "302 403 404 403 302 302",
    "GET delegations:runs":                 "302 200 200 200 200 200",
    "POST delegations:runs":                "302 405 405 405 405 405",
    "GET delegations:run_new":              "302 403 200 403 200 200",
    "POST delegations:run_new":             "302 403 422 403 422 422",
    # anyone signed in imports a run to read; only the importer (and staff) see it afterwards
    "GET delegations:run_import":           "302 200 200 200 200 200",
    "POST delegations:run_import":          "302 422 422 422 422 422",
    "GET delegations:run_imported":         "302 404 404 404 200 200",
    "POST delegations:run_imported":        "302 405 405 405 405 405",
    "GET delegations:run_imported_download": "302 404 404 404 200 200",
    "POST delegations:run_imported_download": "302 405 405 405 405 405",
    # approvers open (never act on) the runs whose trees ask them something
    "GET delegations:run_detail":           "302 404 404 200 200 200",
    "POST delegations:run_detail":          "302 405 405 405 405 405",
    "GET delegations:run_live":             "302 404 404 200 200 200",
    "POST delegations:run_live":            "302 405 405 405 405 405",
    "GET delegations:run_replay":           "302 404 404 200 200 200",
    "POST delegations:run_replay":          "302 405 405 405 405 405",
    "GET delegations:run_cancel":           "302 405 405 405 405 405",
    "POST delegations:run_cancel":          "302 404 404 404 302 302",
    "GET delegations:run_message":          "302 405 405 405 405 405",
    "POST delegations:run_message":         "302 404 404 404 302 302",
    "GET delegations:run_retry":            "302 405 405 405 405 405",
    "POST delegations:run_retry":           "302 404 404 404 302 302",
    "GET delegations:run_trace_export":     "302 405 405 405 405 405",
    "POST delegations:run_trace_export":    "302 404 404 404 302 302",
    "GET delegations:run_compare":          "302 404 404 200 200 200",
    "POST delegations:run_compare":         "302 405 405 405 405 405",
    "GET delegations:inbox":                "302 200 200 200 200 200",
    "POST delegations:inbox":               "302 405 405 405 405 405",
    "GET delegations:inbox_history":        "302 200 200 200 200 200",
    "POST delegations:inbox_history":       "302 405 405 405 405 405",
    # deciding: approvers only, and not on their own runs (HANDOFF_ALLOW_SELF_APPROVAL off)
    "GET delegations:inbox_batch":          "302 405 405 405 405 405",
    "POST delegations:inbox_batch":         "302 403 403 302 403 302",
    "GET delegations:inbox_item":           "302 204 204 200 200 200",
    "POST delegations:inbox_item":          "302 405 405 405 405 405",
    "GET delegations:inbox_decide":         "302 405 405 405 405 405",
    "POST delegations:inbox_decide":        "302 403 403 302 403 302",
    "GET delegations:run_decide":           "302 405 405 405 405 405",
    "POST delegations:run_decide":          "302 404 404 302 403 302",
    # approval rules: approvers read them; rule authors (here: the superuser) write them
    "GET delegations:rule_list":            "302 403 403 200 403 200",
    "POST delegations:rule_list":           "302 405 405 405 405 405",
    "GET delegations:rule_new":             "302 403 403 403 403 200",
    "POST delegations:rule_new":            "302 403 403 403 403 200",
    "GET delegations:rule_edit":            "302 403 403 403 403 200",
    "POST delegations:rule_edit":           "302 403 403 403 403 200",
    # MCP clients: JSON-RPC by POST only, with a token (a browser session is none; the tools
    # have a table of their own, test_mcp_route_table.py); a form post is no JSON-RPC
    "GET mcp":                              "405 405 405 405 405 405",
    "POST mcp":                             "415 415 415 415 415 415",
}

#                                                      anon out comp appr owner root
API = {
    "GET /api/health":                                  "200 200 200 200 200 200",
    "GET /api/ready":                                   "200 200 200 200 200 200",
    "GET /api/me":                                      "401 200 200 200 200 200",
    "GET /api/skills":                                  "401 200 200 200 200 200",
    "POST /api/skills":                                 "401 403 201 403 201 201",
    "GET /api/skills/{name}":                           "401 200 200 200 200 200",
    "GET /api/skills/{name}/{version}":                 "401 200 200 200 200 200",
    "GET /api/skills/{name}/{version}/bundle":          "401 200 200 200 200 200",
    "GET /api/skills/{name}/{version}/manifest":        "401 200 200 200 200 200",
    "POST /api/delegations/lint":                       "401 200 200 200 200 200",
    "GET /api/delegations":                             "401 200 200 200 200 200",
    "POST /api/delegations":                            "401 403 201 403 201 201",
    "GET /api/delegations/{delegation_id}":             "401 404 404 404 200 200",
    "PUT /api/delegations/{delegation_id}":             "401 404 404 404 200 200",
    "DELETE /api/delegations/{delegation_id}":          "401 404 404 404 204 204",
    "GET /api/delegations/{delegation_id}/versions":    "401 404 404 404 200 200",
    "GET /api/delegations/{delegation_id}/diff":        "401 404 404 404 200 200",
    "POST /api/delegations/{delegation_id}/runs":       "401 404 404 404 201 201",
    "GET /api/runs":                                    "401 200 200 200 200 200",
    "POST /api/runs":                                   "401 403 201 403 201 201",
    "GET /api/runs/{run_id}":                           "401 404 404 200 200 200",
    "GET /api/runs/{run_id}/events":                    "401 404 404 200 200 200",
    "GET /api/runs/{run_id}/tree":                      "401 404 404 200 200 200",
    "GET /api/runs/{run_id}/export":                    "401 404 404 200 200 200",
    "POST /api/runs/import":                            "401 201 201 201 201 201",
    "POST /api/runs/{run_id}/cancel":                   "401 404 404 404 200 200",
    "POST /api/runs/{run_id}/messages":                 "401 404 404 404 202 202",
    "POST /api/runs/{run_id}/retry":                    "401 404 404 404 409 409",
    "GET /api/approvals":                               "401 200 200 200 200 200",
    "GET /api/approvals/{approval_id}":                 "401 404 404 200 200 200",
    "POST /api/approvals/{approval_id}/decision":       "401 404 404 200 403 200",
    "POST /api/approvals/batch":                        "401 404 404 200 403 200",
    "POST /api/protocol/parse-result":                  "401 200 200 200 200 200",
    # a server record decides which host receives a secret: superusers only
    "GET /api/mcp-servers":                             "401 403 403 403 403 200",
    "POST /api/mcp-servers":                            "401 403 403 403 403 201",
    "GET /api/mcp-servers/{server_id}":                 "401 403 403 403 403 200",
    "PUT /api/mcp-servers/{server_id}":                 "401 403 403 403 403 200",
    "DELETE /api/mcp-servers/{server_id}":              "401 403 403 403 403 204",
    "GET /api/remote-agents":                           "401 403 403 403 403 200",
    "POST /api/remote-agents":                          "401 403 403 403 403 201",
    "GET /api/remote-agents/{agent_id}":                "401 403 403 403 403 200",
    "PUT /api/remote-agents/{agent_id}":                "401 403 403 403 403 200",
    "DELETE /api/remote-agents/{agent_id}":             "401 403 403 403 403 204",
    # a rule is a standing approval: approvers read rules, rule authors (and superusers) write
    # them; a rule author's token is tested in tests/delegations/inbox/test_approval_rules.py
    "GET /api/approval-rules":                          "401 403 403 200 403 200",
    "POST /api/approval-rules":                         "401 403 403 403 403 201",
    "POST /api/approval-rules/simulate":                "401 403 403 200 403 200",
    "GET /api/approval-rules/{rule_id}":                "401 403 403 200 403 200",
    "PUT /api/approval-rules/{rule_id}":                "401 403 403 403 403 200",
    "DELETE /api/approval-rules/{rule_id}":             "401 403 403 403 403 204",
}


_RULE = {"name": "table rule", "reason": "from the table", "effect": "reject", "comment": "No.",
         "match": {"kinds": ["invalid_result"]}}


def _api_request(key: str, world: World) -> tuple[str, Any]:
    """The query string and JSON body a route is called with."""
    decision = {"decision": "approve", "comment": "fine by me"}
    requests: dict[str, tuple[str, Any]] = {
        "POST /api/skills": ("", {"skill_name": "table-skill", "version": "1.0.0",
                                  "entry_point": "instructions.md", "instructions": "Do it.",
                                  "input_schema": {}, "output_schema": {}, "capabilities": []}),
        "POST /api/delegations/lint": ("", scripts.packet()),
        "POST /api/delegations": ("", {"name": "from the table", "packet": scripts.packet()}),
        "PUT /api/delegations/{delegation_id}": ("", {"base_version": 1, "name": "renamed"}),
        "GET /api/delegations/{delegation_id}/diff": ("?a=1&b=1", None),
        "POST /api/delegations/{delegation_id}/runs": ("", {}),
        "POST /api/runs": ("", {"packet": scripts.packet(),
                                "adapter": {"name": "scripted", "config": scripts.leaf()}}),
        "POST /api/runs/{run_id}/messages": ("", {"text": "also check the cache size"}),
        "POST /api/runs/import": ("", run_export(world.run)),
        "POST /api/approvals/{approval_id}/decision": ("", decision),
        "POST /api/approvals/batch": ("", {"ids": [world.approval.pk], **decision}),
        "POST /api/protocol/parse-result": ("", {"status": "SUCCESS", "output_payload": {"a": 1}}),
        "POST /api/mcp-servers": ("", {"name": "table-tools", "url": "http://127.0.0.1:9/mcp",
                                       "allowed_tools": ["forecast"]}),
        "PUT /api/mcp-servers/{server_id}": ("", {"enabled": False}),
        "POST /api/remote-agents": ("", {"name": "table-agent", "card_url": "http://127.0.0.1:9",
                                         "allowed_skills": ["answer"]}),
        "PUT /api/remote-agents/{agent_id}": ("", {"enabled": False}),
        "POST /api/approval-rules": ("", _RULE),
        "POST /api/approval-rules/simulate": ("", {"rule": _RULE}),
        "PUT /api/approval-rules/{rule_id}": ("", {"reason": "still stops here", "base_version": 1}),
    }
    return requests.get(key, ("", None))


def test_every_page_route_has_a_row_for_get_and_post() -> None:
    expected = {f"{method} {name}" for name in page_routes() for method in ("GET", "POST")}
    assert set(PAGES) == expected, ("rows to add: " f"{sorted(expected - set(PAGES))}; "
                                    f"rows of routes that are gone: {sorted(set(PAGES) - expected)}")


def test_every_api_operation_has_a_row() -> None:
    operations = set(api_routes())
    assert set(API) == operations, (f"rows to add: {sorted(operations - set(API))}; "
                                    f"rows of routes that are gone: {sorted(set(API) - operations)}")


@pytest.mark.parametrize("key", sorted(PAGES))
def test_each_role_gets_the_expected_status_from_each_page(key: str, world: World) -> None:
    method, name = key.split(" ", 1)
    path = fill(page_routes()[name], world)
    actual = row({role: page_status(world, role, method, path) for role in ROLES})
    assert actual == PAGES[key], f"{key} ({path}) as {' '.join(ROLES)}"


@pytest.mark.parametrize("key", sorted(API))
def test_each_role_gets_the_expected_status_from_each_api_operation(key: str, world: World) -> None:
    method, pattern = key.split(" ", 1)
    query, body = _api_request(key, world)
    path = fill(pattern, world) + query
    actual = row({role: api_status(world, role, method, path, body) for role in ROLES})
    assert actual == API[key], f"{key} ({path}) as {' '.join(ROLES)}"
