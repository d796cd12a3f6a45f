"""A run started the way the site starts one (run_create, the worker's execution) delegates
to a RemoteAgent record's skill as a child run in its tree: the child parks on the inbox
for network_outbound, an approver's decision lets it through, and the agent's secret
reaches the remote as a Bearer header but no event, page, export or log line. A packet may
name the remote skill itself (``remote/answer``); lint refuses one no agent offers."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from django.urls import reverse

from delegations.inbox.decisions import approval_decide
from delegations.models import Approval, RemoteAgent, RunEvent
from delegations.runs.export import run_export
from delegations.runs.lint import lint_as_run
from delegations.runs.workflows import run_cancel, run_create
from tests.delegations import scripts
from tests.protocol import test_a2a_client
from tests.protocol.test_a2a_client import ScriptedAgent

pytestmark = [pytest.mark.django_db(transaction=True)]

SECRET = "a2a-secret-for-the-remote-9f8e7d6c"
remote = test_a2a_client.remote     # the scripted remote agent on loopback, one per module
ANSWER = "a2a__remote__answer"


@pytest.fixture
def agent(remote: tuple[str, ScriptedAgent], monkeypatch: pytest.MonkeyPatch) -> ScriptedAgent:
    url, scripted = remote
    monkeypatch.setenv("HANDOFF_A2A_SECRET_REMOTE", SECRET)
    RemoteAgent.objects.create(name="remote", card_url=url, secret_env="HANDOFF_A2A_SECRET_REMOTE",
                               allowed_skills=["answer"])
    return scripted


def calls(name: str) -> dict[str, Any]:
    return {"script": [{"text": "Asking the remote agent.", "tool_calls": [
        {"name": name, "arguments": {"goal": "Pick the cheapest option.", "input": {"options": ["a"]}}}]},
        scripts.yield_turn()]}


def test_a_remote_call_waits_for_an_approver_then_reaches_the_agent_with_its_secret(
        immediate_tasks: None, composer: Any, approver: Any, agent: ScriptedAgent,
        client: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    sent_before = len(agent.seen)
    run = run_create(packet=scripts.packet(capabilities=["network_outbound"]), adapter="scripted",
                     config=calls(ANSWER), owner=composer)
    assert run.state == "AWAITING_APPROVAL"
    approval = Approval.objects.get(run__root=run)
    child = approval.run
    assert child.parent_id == run.pk and child.label == "remote/answer"
    assert approval.payload["tool"] == ANSWER and len(agent.seen) == sent_before
    approval_decide(approval=approval, user=approver, decision="approve")
    run.refresh_from_db()
    child.refresh_from_db()
    assert run.state == "COMPLETE" and child.state == "COMPLETE"
    assert len(agent.seen) == sent_before + 1
    assert agent.seen[-1]["headers"]["authorization"] == f"Bearer {SECRET}"
    [result] = [e.data for e in RunEvent.objects.filter(run=run, type="tool_result")]
    assert result["ok"] and result["result"]["result"]["output_payload"] == {"answer": 42}
    assert child.result["output_payload"] == {"answer": 42}
    assert SECRET not in json.dumps([e.data for e in RunEvent.objects.filter(run=run)])
    client.force_login(composer)
    page = client.get(reverse("delegations:run_detail", args=[run.pk]))
    assert page.status_code == 200 and ANSWER in page.content.decode()
    assert SECRET not in page.content.decode()
    assert SECRET not in json.dumps(run_export(run), default=str)
    assert SECRET not in caplog.text


def test_a_disabled_agent_or_a_skill_not_allowed_offers_nothing(
        immediate_tasks: None, composer: Any, agent: ScriptedAgent) -> None:
    sent_before = len(agent.seen)
    run = run_create(packet=scripts.packet(capabilities=["network_outbound"]), adapter="scripted",
                     config=calls("a2a__remote__fail"), owner=composer)
    [result] = [e.data for e in RunEvent.objects.filter(run=run, type="tool_result")]
    assert "There is no tool 'a2a__remote__fail'" in result["error"]["message"]
    RemoteAgent.objects.update(enabled=False)
    run = run_create(packet=scripts.packet(capabilities=["network_outbound"]), adapter="scripted",
                     config=calls(ANSWER), owner=composer)
    [result] = [e.data for e in RunEvent.objects.filter(run=run, type="tool_result")]
    assert f"There is no tool '{ANSWER}'" in result["error"]["message"]
    assert len(agent.seen) == sent_before


def test_a_packet_naming_a_remote_skill_runs_on_the_agent_and_lint_refuses_one_nobody_offers(
        immediate_tasks: None, composer: Any, approver: Any, agent: ScriptedAgent) -> None:
    run = run_create(packet=scripts.packet(skill="remote/answer", capabilities=["network_outbound"],
                                           subagent_type=None, instruction_set=None),
                     adapter="scripted", config={"script": []}, owner=composer)
    approval_decide(approval=Approval.objects.get(run=run), user=approver, decision="approve")
    run.refresh_from_db()
    assert run.state == "COMPLETE", run.error
    assert run.result["output_payload"] == {"answer": 42}
    for skill, says in [("remote/fail", "No enabled remote agent offers 'remote/fail'"),
                        ("elsewhere/answer", "No enabled remote agent offers")]:
        report = lint_as_run(scripts.packet(skill=skill, capabilities=["network_outbound"]))
        assert not report.runnable and says in json.dumps(report.problems)
    report = lint_as_run(scripts.packet(skill="remote/answer", capabilities=[]))
    assert not report.runnable and "needs the capability 'network_outbound'" in json.dumps(report.problems)


def test_cancelling_a_parked_remote_run_cancels_the_remote_task_it_left_waiting(
        immediate_tasks: None, composer: Any, agent: ScriptedAgent) -> None:
    RemoteAgent.objects.update(allowed_skills=["answer", "ask"], capability="search")
    run = run_create(packet=scripts.packet(skill="remote/ask", capabilities=["search"], subagent_type=None,
                                           instruction_set=None, expected_output_schema=None,
                                           success_criteria=[]),
                     adapter="scripted", config={"script": []}, owner=composer)
    assert run.state == "AWAITING_APPROVAL"
    assert "Which region?" in Approval.objects.get(run=run).title
    cancelled_before = len(agent.cancelled)
    run_cancel(run=run, reason="Not needed.")
    run.refresh_from_db()
    assert run.state == "CANCELLED" and len(agent.cancelled) == cancelled_before + 1
