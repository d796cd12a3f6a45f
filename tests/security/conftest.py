"""One small world for the security tests: a user per role and one of everything they
might reach for (a run waiting on an approval, a delegation with a child, a skill, a token,
a run imported from another instance)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import User

from delegations.models import (
    APIToken,
    Approval,
    ApprovalRule,
    Delegation,
    ImportedRun,
    McpServer,
    RemoteAgent,
    Run,
)
from delegations.runs.export import run_export, run_import
from tests.conftest import make_user
from tests.delegations import scripts
from tests.delegations.conftest import immediate_tasks, workspaces
from tests.delegations.runs.test_run_pages import make_run
from tests.skills.factories import add_skill

__all__ = ["immediate_tasks", "workspaces"]

ROLES = ("anonymous", "outsider", "composer", "approver", "owner", "superuser")


@dataclass
class World:
    users: dict[str, User | None]
    run: Run
    approval: Approval
    delegation: Delegation
    child: Delegation
    skill: Any
    token: APIToken
    tokens: dict[str, str]
    imported: ImportedRun
    mcp_server: McpServer
    remote_agent: RemoteAgent
    rule: ApprovalRule

    def url_kwargs(self) -> dict[str, Any]:
        """What each path parameter of the site names, in this world."""
        return {"run_id": self.run.pk, "approval_id": self.approval.pk,
                "delegation_id": self.delegation.pk, "node_id": self.child.pk,
                "token_id": self.token.pk, "name": self.skill.name, "version": self.skill.version,
                "imported_id": self.imported.pk, "server_id": self.mcp_server.pk,
                "agent_id": self.remote_agent.pk,
                "rule_id": self.rule.pk}


def _user(username: str, *groups: str, **extra: Any) -> User:
    return make_user(User, username, *groups, password=None, **extra)


@pytest.fixture
def world(db: None) -> World:
    users: dict[str, User | None] = {
        "anonymous": None,
        "outsider": _user("sec-outsider"),
        "composer": _user("sec-composer", "composers"),
        "approver": _user("sec-approver", "approvers"),
        "owner": _user("sec-owner", "composers"),
        "superuser": _user("sec-root", is_staff=True, is_superuser=True),
    }
    owner = users["owner"]
    run = make_run(owner, state="AWAITING_APPROVAL", label="cleanup")
    approval = Approval.objects.create(run=run, key=f"{run.pk}:capability:sec", kind="capability",
                                       title="Delete stale.txt",
                                       payload={"tool": "delete_file", "arguments": {"path": "stale.txt"}})
    delegation = Delegation.objects.create(name="caching study", packet=scripts.packet(), owner=owner)
    child = Delegation.objects.create(name="part a", packet=scripts.packet(label="a"), owner=owner,
                                      parent=delegation)
    skill = add_skill(created_by=owner)
    tokens = {role: APIToken.issue(user=user, name="sec")[1]
              for role, user in users.items() if user is not None}
    token = APIToken.objects.get(user=owner)
    imported = run_import(source=run_export(run), owner=owner)
    mcp_server = McpServer.objects.create(name="sec-tools", url="http://127.0.0.1:9/mcp",
                                          allowed_tools=["forecast"])
    remote_agent = RemoteAgent.objects.create(name="sec-agent", card_url="http://127.0.0.1:9",
                                              allowed_skills=["answer"])
    rule = ApprovalRule.objects.create(name="sec rule", reason="budget items stop here", effect="reject",
                                       comment="No.", match={"kinds": ["budget"]}, owner=users["superuser"])
    return World(users=users, run=run, approval=approval, delegation=delegation, child=child,
                 skill=skill, token=token, tokens=tokens, imported=imported, mcp_server=mcp_server,
                 remote_agent=remote_agent,
                 rule=rule)
