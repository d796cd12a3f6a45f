"""Approval rules deciding inbox items: as an item opens and for the items waiting, reject
before approve, two approvers, never beyond the run's token, the rule author's own runs,
expiry, the audit, saving with versions and bad input."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from delegations.inbox.decisions import approval_decide
from delegations.inbox.rule_decisions import (
    decide_by_rules,
    item_facts,
    rules_apply_to_waiting,
    widening_refusal,
)
from delegations.inbox.rule_store import RuleRefusal, rule_save, rule_simulate
from delegations.inbox.rules import ItemFacts, expression_problem, matched_inputs
from delegations.models import Approval, ApprovalRule, Run
from delegations.protocol.approvals import Decision
from delegations.refusals import Refusal
from delegations.runs.workflows import run_create
from tests.conftest import bearer, make_user
from tests.delegations import scripts

pytestmark = [pytest.mark.django_db(transaction=True)]

DELETE_UNDER_WORKSPACE = {"kinds": ["capability"], "capabilities": ["file_delete"], "tools": ["delete_file"],
                          "arguments": [{"name": "path", "op": "under", "value": "."}]}


@pytest.fixture
def author(django_user_model: Any) -> Any:
    """An approver who also writes rules."""
    return make_user(django_user_model, "rita", "approvers", "rule_authors", password=None)


@pytest.fixture
def second_approver(django_user_model: Any) -> Any:
    return make_user(django_user_model, "bob", "approvers", password=None)


def a_rule(author: Any, effect: str = "approve", match: dict[str, Any] | None = None, **fields: Any) -> ApprovalRule:
    data = {"name": f"{effect} deletes", "reason": "stale files are routine", "effect": effect,
            "match": DELETE_UNDER_WORKSPACE if match is None else match, **fields}
    if effect == "reject":
        data.setdefault("comment", "Never delete files here.")
    return rule_save(rule=None, data=data, user=author)[0]


def deleting_run(owner: Any) -> Run:
    return run_create(packet=scripts.approval_packet(), adapter="scripted", config=scripts.needs_approval(),
                      owner=owner)


def only_item(run: Run) -> Approval:
    return Approval.objects.select_related("run", "decided_by").get(run_id=run.pk)


def test_an_approve_rule_decides_the_item_as_it_opens_and_the_run_goes_on(author, composer, immediate_tasks):
    rule = a_rule(author)
    run = deleting_run(composer)
    run.refresh_from_db()
    item = only_item(run)
    assert item.status == "approved" and item.decided_by is None
    assert item.decider == f"rule '{rule.name}' v1"
    audit = item.rule_audit()
    assert audit["rule_id"] == rule.pk and audit["version"] == 1
    assert audit["matched"] == {"kind": "capability", "capability": "file_delete", "tool": "delete_file",
                                "arguments": {"path": "stale.txt"}}
    assert run.state == "COMPLETE", run.error
    decided = [e.data for e in run.events.filter(type="approval") if "decision" in e.data]
    assert decided[0]["decided_by"] == "rule 'approve deletes' v1"


# -- items made directly, for what no scripted run asks -------------------------------------

def a_run(owner: Any, *, capabilities: list[str] | None = None, skill: str = "", parent: Run | None = None,
          budget: dict[str, Any] | None = None, usage: dict[str, Any] | None = None) -> Run:
    root = parent.root if parent is not None and parent.root is not None else parent
    return Run.objects.create(owner=owner, adapter_name="scripted", capabilities=capabilities or [],
                              skill=skill, parent=parent, root=root, depth=parent.depth + 1 if parent else 0,
                              budget=budget or {}, usage=usage or {}, state="AWAITING_APPROVAL")


def an_item(run: Run, kind: str = "capability", **payload: Any) -> Approval:
    return Approval.objects.create(run=run, key=f"{run.pk}:{kind}:{Approval.objects.count()}", kind=kind,
                                   title=f"{kind} item", payload=payload)


def price_fetch(run: Run, url: str = "https://prices.example.com/eur") -> Approval:
    return an_item(run, tool="http_get", capability="network_outbound", arguments={"url": url})


def facts(**fields: Any) -> ItemFacts:
    return ItemFacts(**{"kind": "capability", "capability": "network_outbound", "tool": "http_get",
                        "arguments": {"url": "https://api.prices.example.com/eur", "amount": 0.004,
                                      "path": "reports/q3/summary.csv"},
                        "skill": "price-check", "skill_version": "1.4.0", "owner": "carol",
                        "groups": frozenset({"finance"}), "depth": 1, "root_skill": "coordinator",
                        "budget_left": {"max_cost_usd": 0.8}, **fields})


@pytest.mark.parametrize(("match", "expected"), [
    ({"kinds": ["capability"]}, True), ({"kinds": ["budget"]}, False),
    ({"capabilities": ["network_outbound"]}, True), ({"capabilities": ["file_delete"]}, False),
    ({"tools": ["http_get"]}, True), ({"tools": ["read_file"]}, False),
    ({"arguments": [{"name": "url", "op": "host", "value": "*.example.com"}]}, True),
    ({"arguments": [{"name": "url", "op": "host", "value": "prices.example.com"}]}, False),
    ({"arguments": [{"name": "url", "op": "host", "value": "api.prices.example.com"}]}, True),
    ({"arguments": [{"name": "path", "op": "under", "value": "reports"}]}, True),
    ({"arguments": [{"name": "path", "op": "under", "value": "report"}]}, False),
    ({"arguments": [{"name": "amount", "op": "range", "max": 0.01}]}, True),
    ({"arguments": [{"name": "amount", "op": "range", "min": 0.005}]}, False),
    ({"arguments": [{"name": "amount", "op": "equals", "value": 0.004}]}, True),
    ({"arguments": [{"name": "missing", "op": "equals", "value": 1}]}, False),
    ({"skill": {"name": "price-check"}}, True), ({"skill": {"name": "price-check", "versions": ">=1.2,<2"}}, True),
    ({"skill": {"name": "price-check", "versions": ">=2"}}, False), ({"skill": {"name": "other"}}, False),
    ({"owners": ["carol"]}, True), ({"owners": ["dave"]}, False),
    ({"groups": ["finance"]}, True), ({"groups": ["ops"]}, False),
    ({"depth": {"min": 1, "max": 2}}, True), ({"depth": {"max": 0}}, False),
    ({"root_skill": "coordinator"}, True), ({"root_skill": "other"}, False),
    ({"budget_left": {"axis": "max_cost_usd", "min": 0.5}}, True),
    ({"budget_left": {"axis": "max_cost_usd", "min": 0.9}}, False),
])
def test_each_matcher_matches_what_it_says_and_nothing_else(match, expected):
    assert (matched_inputs(match, facts()) is not None) is expected


def test_a_path_that_climbs_out_of_the_folder_does_not_match_and_a_host_needs_a_web_url():
    under = {"arguments": [{"name": "path", "op": "under", "value": "reports"}]}
    assert matched_inputs(under, facts(arguments={"path": "reports/../secrets.txt"})) is None
    assert matched_inputs(under, facts(arguments={"path": "../reports/x"})) is None
    host = {"arguments": [{"name": "url", "op": "host", "value": "prices.example.com"}]}
    assert matched_inputs(host, facts(arguments={"url": "file://prices.example.com/x"})) is None
    assert matched_inputs(host, facts(arguments={"url": "https://prices.example.com.evil.io/"})) is None


def test_every_kind_a_rule_may_decide_is_matched_by_kind():
    for kind in ("capability", "capability_request", "budget", "invalid_result"):
        assert matched_inputs({"kinds": [kind]}, facts(kind=kind)) == {"kind": kind}


# -- bad input --------------------------------------------------------------------------------

def test_a_rule_that_cannot_match_is_refused_with_each_error_on_its_field(author):
    with pytest.raises(RuleRefusal) as caught:
        rule_save(rule=None, user=author, data={"name": "broken", "reason": "x", "effect": "approve", "match": {
            "capabilities": ["teleport"], "arguments": [{"name": "url", "op": "host", "value": "https://x.com/a"}],
            "skill": {"name": "price-check", "versions": "one point two"}, "colour": "red"}})
    errors = caught.value.details["errors"]
    assert caught.value.status == 422
    assert errors["match.capabilities"][0].startswith("Unknown capability 'teleport'; known: ")
    assert "not a host pattern" in errors["match.arguments[0].value"][0]
    assert "not a version range" in errors["match.skill.versions"][0]
    assert "Unknown matcher" in errors["match.colour"][0]
    assert not ApprovalRule.objects.exists()


def test_an_everything_rule_needs_its_confirmation_and_a_reject_rule_its_comment(author):
    everything = {"name": "all", "reason": "x", "effect": "approve", "match": {"capabilities": ["file_delete"]}}
    with pytest.raises(RuleRefusal) as caught:
        rule_save(rule=None, user=author, data=everything)
    assert "confirm 'everything'" in caught.value.details["errors"]["matches_everything"][0]
    rule, _ = rule_save(rule=None, user=author, data={**everything, "matches_everything": True})
    assert rule.matches_everything
    with pytest.raises(RuleRefusal) as caught:
        rule_save(rule=None, user=author, data={"name": "no", "reason": "x", "effect": "reject", "match": {}})
    assert "comment" in caught.value.details["errors"]


@pytest.mark.django_db(serialized_rollback=True)   # the database as migrations left it
def test_a_fresh_installation_has_the_group_of_each_role():
    from django.contrib.auth.models import Group

    from delegations.accounts.roles import APPROVERS, COMPOSERS, RULE_AUTHORS

    assert {COMPOSERS, APPROVERS, RULE_AUTHORS} <= set(Group.objects.values_list("name", flat=True))


def test_only_rule_authors_write_rules(approver):
    with pytest.raises(RuleRefusal) as caught:
        a_rule(approver)
    assert caught.value.status == 403 and "rule author" in caught.value.message


def test_a_save_based_on_an_older_version_is_refused_with_the_diff(author, django_user_model):
    rule = a_rule(author)
    other = make_user(django_user_model, "ruth", "approvers", "rule_authors", password=None)
    rule_save(rule=rule, data={"reason": "changed by ruth"}, user=other, base_version=1)
    with pytest.raises(RuleRefusal) as caught:
        rule_save(rule=rule, data={"name": "mine"}, user=author, base_version=1)
    assert caught.value.status == 409 and "ruth saved this rule" in caught.value.message
    assert '+  "reason": "changed by ruth"' in caught.value.details["diff"]
    rule.refresh_from_db()
    assert rule.version == 2 and rule.name == "approve deletes"
    assert [v.number for v in rule.versions.all()] == [1, 2]


# -- deciding -----------------------------------------------------------------------------------

def test_a_reject_rule_wins_over_an_approve_rule_and_the_run_reads_its_comment(author, composer, immediate_tasks):
    a_rule(author)
    blocking = a_rule(author, "reject", name="no deletes on fridays")
    run = deleting_run(composer)
    item = only_item(run)
    assert item.status == "rejected" and item.comment == "Never delete files here."
    assert item.rule_audit()["rule_id"] == blocking.pk


def test_the_first_rule_of_equal_effect_is_named_in_the_audit(author, composer, immediate_tasks):
    first = a_rule(author, name="first")
    a_rule(author, name="second")
    item = only_item(deleting_run(composer))
    assert item.rule_audit()["name"] == "first" and item.rule_audit()["rule_id"] == first.pk


def test_two_approver_rule_keeps_the_item_until_a_second_different_approver(
        author, composer, approver, second_approver, immediate_tasks):
    a_rule(author, "two_approvers", name="deletes need two")
    run = deleting_run(composer)
    item = only_item(run)
    assert item.is_pending and item.rule_audit()["effect"] == "two_approvers"
    approval_decide(approval=item, user=approver, decision="approve")
    item = only_item(run)
    assert item.is_pending and [s.user for s in item.signoffs.all()] == [approver]
    with pytest.raises(Refusal) as caught:
        approval_decide(approval=item, user=approver, decision="approve")
    assert caught.value.status == 409 and "second, different approver" in caught.value.message
    approval_decide(approval=item, user=second_approver, decision="approve")
    run.refresh_from_db()
    assert only_item(run).decided_by == second_approver
    assert run.state == "COMPLETE", run.error
    from django.test import Client
    client = Client()
    client.force_login(second_approver)
    for url in ("/inbox/history/", f"/runs/{run.pk}/"):   # the audit names both approvers
        page = re.sub(r"<[^>]+>", "", client.get(url).content.decode())
        assert re.search(r"approved\s+by bob\s.*, after alice approved first", page), url


def test_a_rule_never_approves_beyond_the_runs_token_or_budget(author, composer):
    rule = a_rule(author, match={"capabilities": ["network_outbound"],
                                 "arguments": [{"name": "url", "op": "host", "value": "prices.example.com"}]})
    outside_token = price_fetch(a_run(composer, capabilities=["fs_read"]))
    assert "not in the run's capability token" in widening_refusal(outside_token, item_facts(outside_token))
    assert not decide_by_rules(outside_token, resume=False)
    asks_for_more = an_item(a_run(composer, capabilities=["fs_read"]), "capability_request",
                            capability="network_outbound")
    rule_save(rule=rule, base_version=1, user=author, data={"match": {"kinds": ["capability_request"]},
                                                            "matches_everything": True})
    assert not decide_by_rules(asks_for_more, resume=False)
    parent = a_run(composer, budget={"max_cost_usd": 1.0}, usage={"cost_usd": 1.0})
    spent = an_item(a_run(composer, parent=parent, budget={"max_cost_usd": 0.5}), "budget",
                    axis="max_cost_usd")
    rule_save(rule=rule, base_version=2, user=author, data={"match": {"kinds": ["budget"]}})
    assert "no max_cost_usd left" in widening_refusal(spent, item_facts(spent))
    assert not decide_by_rules(spent, resume=False)
    for item in (outside_token, asks_for_more, spent):
        item.refresh_from_db()
        assert item.is_pending and item.rule_audit() is None


def test_a_rule_does_not_decide_the_items_of_its_authors_own_runs(author, settings, immediate_tasks):
    a_rule(author)
    item = only_item(deleting_run(author))
    assert item.is_pending and item.rule_audit() is None
    settings.HANDOFF_ALLOW_SELF_APPROVAL = True
    assert rules_apply_to_waiting() == [item.pk]


def test_an_expired_or_disabled_rule_decides_nothing(author, composer, immediate_tasks):
    a_rule(author, expires_at=(timezone.now() - timedelta(minutes=1)).isoformat())
    a_rule(author, enabled=False)
    assert only_item(deleting_run(composer)).is_pending


def test_a_new_rule_decides_the_waiting_items_resumes_their_runs_and_tells_the_inbox(
        author, composer, immediate_tasks, monkeypatch):
    from delegations.live import feed
    notices: list[Any] = []
    monkeypatch.setattr(feed, "publish_sync", notices.extend)
    run = deleting_run(composer)
    assert only_item(run).is_pending
    a_rule(author)
    run.refresh_from_db()
    assert only_item(run).status == "approved" and run.state == "COMPLETE"
    decided = [message for _, message in notices if message.get("event") == "approval.decided"]
    assert decided and decided[0]["approval"]["rule"]["name"] == "approve deletes"


def test_revoking_a_rule_leaves_what_it_decided(author, composer, immediate_tasks):
    rule = a_rule(author)
    item = only_item(deleting_run(composer))
    rule.delete()
    item.refresh_from_db()
    assert item.status == "approved" and item.decider == "rule 'approve deletes' v1"


# -- simulation -------------------------------------------------------------------------------

def decided_fixture(owner: Any, person: Any) -> dict[str, Approval]:
    """Four items people decided: two price fetches approved, one from another host
    rejected, one from the price host rejected (the one a rule would get wrong)."""
    run = a_run(owner, capabilities=["network_outbound"], skill="price-check@1.4.0")
    items = {"approved_1": price_fetch(run), "approved_2": price_fetch(run, "https://prices.example.com/usd"),
             "other_host": price_fetch(run, "https://evil.example.net/"),
             "rejected_price": price_fetch(run, "https://prices.example.com/admin")}
    for name, item in items.items():
        if name.startswith("approved"):
            item.record(Decision.APPROVE, user=person)
        else:
            item.record(Decision.REJECT, user=person, comment="not that one")
    return items


PRICE_HOST = {"capabilities": ["network_outbound"], "tools": ["http_get"],
              "arguments": [{"name": "url", "op": "host", "value": "prices.example.com"}]}


def test_simulation_counts_what_a_rule_would_have_done_and_lists_each_disagreement(composer, approver):
    items = decided_fixture(composer, approver)
    draft = ApprovalRule(name="price hosts", match=PRICE_HOST, effect="approve")
    result = rule_simulate(rule=draft)
    assert (result.looked_at, result.approved, result.rejected) == (4, 3, 0)
    assert [d["id"] for d in result.disagreements] == [items["rejected_price"].pk]
    link = result.disagreements[0]["url"]
    assert link == f"/runs/{items['rejected_price'].run_id}/#run-approvals"
    assert result.disagreements[0]["person"] == "reject" and result.approves_what_a_person_rejected
    reject = rule_simulate(rule=ApprovalRule(name="no", match={"arguments": [
        {"name": "url", "op": "host", "value": "*.example.net"}]}, effect="reject", comment="no"))
    assert (reject.approved, reject.rejected, reject.disagreements) == (0, 1, [])
    assert rule_simulate(rule=draft, window=2).looked_at == 2


def test_a_rule_that_would_have_approved_what_a_person_rejected_needs_a_confirmation(author, composer, approver):
    decided_fixture(composer, approver)
    data = {"name": "price hosts", "reason": "read-only prices", "effect": "approve", "match": PRICE_HOST}
    with pytest.raises(RuleRefusal) as caught:
        rule_save(rule=None, data=data, user=author)
    assert "a person rejected" in caught.value.message
    assert caught.value.details["simulation"]["approves_what_a_person_rejected"]
    rule, simulation = rule_save(rule=None, data=data, user=author, confirm_disagreements=True)
    assert rule.pk and simulation.approved == 3


# -- the API ------------------------------------------------------------------------------------

def test_rules_through_the_api_with_versions_simulation_and_the_item_audit(
        client, author, composer, approver, immediate_tasks):
    headers = bearer(author)
    body = {"name": "stale deletes", "reason": "routine", "effect": "approve", "match": DELETE_UNDER_WORKSPACE}
    created = client.post("/api/approval-rules", body, content_type="application/json", headers=headers)
    assert created.status_code == 201, created.content
    rule_id = created.json()["rule"]["id"]
    assert created.json()["simulation"]["window"] == 200
    changed = client.put(f"/api/approval-rules/{rule_id}", {"reason": "still routine", "base_version": 1},
                         content_type="application/json", headers=headers)
    assert changed.status_code == 200 and changed.json()["rule"]["version"] == 2
    stale = client.put(f"/api/approval-rules/{rule_id}", {"name": "x", "base_version": 1},
                       content_type="application/json", headers=headers)
    assert stale.status_code == 409 and "still routine" in stale.json()["diff"]
    detail = client.get(f"/api/approval-rules/{rule_id}", headers=bearer(approver)).json()
    assert [v["number"] for v in detail["versions"]] == [1, 2]
    item = only_item(deleting_run(composer))
    shown = client.get(f"/api/approvals/{item.pk}", headers=bearer(approver)).json()
    assert shown["decided_by"] == "rule 'stale deletes' v2" and shown["rule"]["version"] == 2
    assert shown["rule"]["matched"]["tool"] == "delete_file"
    simulated = client.post("/api/approval-rules/simulate", {"rule": body, "window": 50},
                            content_type="application/json", headers=headers)
    assert simulated.status_code == 200 and simulated.json()["window"] == 50
    assert client.delete(f"/api/approval-rules/{rule_id}", headers=headers).status_code == 204


def test_the_api_refuses_bad_rules_field_by_field_and_people_without_the_role(client, author, composer, approver):
    bad = {"name": "bad", "reason": "x", "effect": "approve",
           "match": {"arguments": [{"name": "url", "op": "host", "value": "not a host"}]}}
    refused = client.post("/api/approval-rules", bad, content_type="application/json", headers=bearer(author))
    assert refused.status_code == 422
    assert "match.arguments[0].value" in refused.json()["errors"]
    ok = {**bad, "match": DELETE_UNDER_WORKSPACE}
    assert client.post("/api/approval-rules", ok, content_type="application/json",
                       headers=bearer(approver)).status_code == 403
    assert client.get("/api/approval-rules", headers=bearer(composer)).status_code == 403
    simulated = client.post("/api/approval-rules/simulate", {"rule": bad}, content_type="application/json",
                            headers=bearer(approver))
    assert simulated.status_code == 422 and "match.arguments[0].value" in simulated.json()["errors"]


# -- the pages --------------------------------------------------------------------------------

def test_make_a_rule_from_an_item_prefills_the_builder_narrowed_to_it_and_shows_the_simulation(
        client, author, composer, approver, immediate_tasks):
    decided_fixture(composer, approver)
    item = price_fetch(a_run(composer, capabilities=["network_outbound"], skill="price-check@1.4.0"),
                       "https://prices.example.com/v2/eur")
    client.force_login(author)
    inbox = client.get("/inbox/")
    assert f'/inbox/rules/new/?item={item.pk}' in inbox.content.decode()
    page = client.get(f"/inbox/rules/new/?item={item.pk}").content.decode()
    assert 'value="prices.example.com"' in page and 'value="http_get"' in page and 'value="price-check"' in page
    assert 'data-sim="approved">3<' in page and "would have approved something a person rejected" in page
    disagreement = re.search(r'<ul class="disagreements"><li class="bad"><a href="([^"]+)"', page)
    assert disagreement is not None
    shown = client.get(disagreement.group(1)).content.decode()
    assert "not that one" in shown and "rejected" in shown


def test_the_builder_saves_a_rule_that_decides_the_next_item_with_the_rule_on_every_page(
        client, author, composer, approver, immediate_tasks):
    client.force_login(author)
    form = {"name": "stale deletes", "reason": "cache files", "effect": "approve", "kinds": ["capability"],
            "capabilities": ["file_delete"], "tools": "delete_file", "folder": ".", "enabled": "on", "save": "1"}
    refused = client.post("/inbox/rules/new/", {**form, "host": "https://bad host/"})
    page = refused.content.decode()
    assert refused.status_code == 200 and page.count("not a host pattern") == 1   # said once, at its field
    assert re.search(r'<input type="text" name="host"[^>]*>.*?<ul class="errorlist[^"]*"[^>]*><li>[^<]*not a host pattern',
                     page, re.S)
    assert "fix what is marked below" in page and "I confirm: this rule approves" not in page
    everything = {**form, "tools": "", "folder": "", "kinds": ["capability_request"], "capabilities": ["file_delete"],
                  "name": "all deletes"}
    asked = client.post("/inbox/rules/new/", everything).content.decode()
    assert "I confirm: this rule approves" in asked and "confirm &#x27;everything&#x27;" in asked
    assert client.post("/inbox/rules/new/", {**everything, "matches_everything": "on"}).status_code == 302
    ApprovalRule.objects.filter(name="all deletes").delete()
    saved = client.post("/inbox/rules/new/", form)
    assert saved.status_code == 302 and saved["Location"] == "/inbox/rules/"
    rule = ApprovalRule.objects.get()
    assert rule.match["arguments"] == [{"name": "path", "op": "under", "value": "."}]
    run = deleting_run(composer)
    client.force_login(approver)
    for url in ("/inbox/history/", f"/runs/{run.pk}/", "/inbox/rules/"):
        assert "stale deletes" in client.get(url).content.decode(), url
    assert "rule &#x27;stale deletes&#x27; v1" in client.get("/inbox/history/").content.decode()


def test_an_edit_refused_because_the_rule_was_saved_since_saves_on_top_of_it_next_time(client, author):
    rule = a_rule(author)
    client.force_login(author)
    form = {"name": rule.name, "reason": "edited in the first tab", "effect": "approve",
            "kinds": ["capability", "capability_request"],
            "capabilities": ["file_delete"], "tools": "delete_file", "folder": ".", "enabled": "on",
            "base_version": "1", "save": "1"}
    rule_save(rule=rule, user=author, base_version=1, data={**rule.as_data(), "reason": "saved in another tab"})
    refused = client.post(f"/inbox/rules/{rule.pk}/", form)
    page = refused.content.decode()
    assert refused.status_code == 200 and "since version 1" in page and "saved in another tab" in page
    assert 'name="base_version" value="2"' in page and "edited in the first tab" in page
    ticked = re.findall(r'<input type="checkbox" name="kinds" value="(\w+)"[^>]*checked', page)
    assert ticked == ["capability", "capability_request"]
    saved = client.post(f"/inbox/rules/{rule.pk}/", {**form, "base_version": "2"})
    assert saved.status_code == 302
    rule.refresh_from_db()
    assert rule.version == 3 and rule.reason == "edited in the first tab"
    assert rule.match["kinds"] == ["capability", "capability_request"]


def test_the_rule_list_warns_of_an_everything_rule(client, author):
    rule_save(rule=None, user=author, data={"name": "all deletes", "reason": "x", "effect": "approve",
                                            "match": {"capabilities": ["file_delete"]}, "matches_everything": True})
    client.force_login(author)
    assert "for every skill and host" in client.get("/inbox/rules/").content.decode()


def test_admin_shows_which_rule_decided_an_item(admin_client, author, composer, immediate_tasks):
    a_rule(author)
    item = only_item(deleting_run(composer))
    page = admin_client.get(f"/admin/delegations/approval/{item.pk}/change/").content.decode()
    assert "approved by rule &#x27;approve deletes&#x27; v1" in page
    assert admin_client.get("/admin/delegations/approvalrule/").status_code == 200


# -- CEL expressions ----------------------------------------------------------------------------

@pytest.mark.parametrize(("expression", "expected"), [
    ('tool == "http_get" && arguments.amount < 0.01', True),
    ('tool == "http_get" && arguments.amount < 0.001', False),
    ('"finance" in groups && depth <= 1 && root_skill == "coordinator"', True),
    ('skill == "price-check" && skill_version.startsWith("2.")', False),
    ("arguments.no_such_argument > 1", False),   # an evaluation error does not match
    ("arguments.amount", False),                 # not a boolean: no match
])
def test_a_cel_expression_matches_when_it_is_true(expression, expected):
    assert (matched_inputs({"expression": expression}, facts()) is not None) is expected


def client_post_rule_form(author: Any, fields: dict[str, Any]) -> ApprovalRule:
    from django.test import Client
    client = Client()
    client.force_login(author)
    response = client.post("/inbox/rules/new/", {"name": "by expression", "reason": "x", "effect": "reject",
                                                 "comment": "no", "enabled": "on", "save": "1", **fields})
    assert response.status_code == 302, response.content.decode()[:2000]
    return ApprovalRule.objects.get(name="by expression")


@pytest.mark.parametrize("expression", ['__import__("os") == 1', 'tool.frob() == "x"', 'lookup(tool)'])
def test_an_expression_calling_what_cel_does_not_have_is_refused_on_its_field(expression):
    problem = expression_problem(expression)
    assert problem is not None and "which CEL does not have" in problem


@pytest.mark.parametrize(("expression", "unknown"), [
    ('argument.value == "mixed"', "argument"), ("foo == 1", "foo"),
    ("arguments.items.all(a, a > 1 && b > 1)", "b")])
def test_an_expression_reading_what_no_item_has_is_refused_naming_it(expression, unknown):
    problem = expression_problem(expression)
    assert problem is not None and problem.startswith(f"The expression reads {unknown}, which no item has")
    assert "an item has kind, capability, tool, arguments" in problem


@pytest.mark.parametrize("expression", ['tool.startsWith("http") && size(groups) > 0',
                                        'arguments.items.exists(i, i > 1) && has(arguments.amount)'])
def test_an_expression_of_cels_own_functions_and_macros_is_accepted(expression):
    assert expression_problem(expression) is None


def test_an_expression_that_does_not_compile_is_refused_on_its_field(author):
    with pytest.raises(RuleRefusal) as caught:
        rule_save(rule=None, user=author, data={"name": "x", "reason": "x", "effect": "approve",
                                                "match": {"tools": ["http_get"], "expression": "amount <"}})
    assert "does not compile" in caught.value.details["errors"]["match.expression"][0]
    saved = client_post_rule_form(author, {"expression": 'tool == "delete_file"'})
    assert saved.match["expression"] == 'tool == "delete_file"'
    # CEL, not Python: a call of a function CEL does not have is an error, which never matches
    assert matched_inputs({"expression": "__import__('os').getcwd() != ''"}, facts()) is None


@pytest.mark.parametrize("match", [
    {"kinds": "capability"}, {"kinds": [1]}, {"arguments": [1, "x"]}, {"arguments": [{"name": "a", "op": "glob"}]},
    {"arguments": [{"name": "n", "op": "range", "min": "0"}]}, {"arguments": [{"name": "n", "op": "range", "min": 2, "max": 1}]},
    {"arguments": [{"name": "p", "op": "under", "value": "../etc"}]}, {"skill": "price-check"}, {"skill": {"name": ""}},
    {"depth": {"max": "two"}}, {"depth": {}}, {"budget_left": {"axis": "max_joy", "min": 1}}, {"expression": 7},
    {"owners": [""]}, {"root_skill": 3},
])
def test_every_malformed_match_is_a_422_through_the_api_never_a_500(client, author, match):
    body = {"name": "bad", "reason": "x", "effect": "reject", "comment": "no", "match": match}
    response = client.post("/api/approval-rules", body, content_type="application/json", headers=bearer(author))
    assert response.status_code == 422, response.content
    assert response.json()["errors"], response.json()


def test_malformed_rule_fields_are_422_each_on_its_field(client, author):
    body = {"name": " ", "reason": "", "effect": "maybe", "match": {}, "expires_at": "next tuesday"}
    errors = client.post("/api/approval-rules", body, content_type="application/json",
                         headers=bearer(author)).json()["errors"]
    assert set(errors) >= {"name", "reason", "effect", "expires_at"}
    window = client.post("/api/approval-rules/simulate", {"rule": {"match": {}}, "window": 0},
                         content_type="application/json", headers=bearer(author))
    assert window.status_code == 422


def test_the_inbox_says_an_item_needs_two_approvers_and_who_approved_first(
        client, author, composer, approver, second_approver, immediate_tasks):
    a_rule(author, "two_approvers", name="deletes need two")
    run = deleting_run(composer)
    item = only_item(run)
    client.force_login(approver)
    assert "needs the approval of two different people" in client.get("/inbox/").content.decode()
    answer = client.post(f"/inbox/{item.pk}/decision/", {"decision": "approve"}, follow=True).content.decode()
    assert "a second, different approver must approve it too" in answer
    assert "alice approved first" in answer
    client.force_login(second_approver)
    client.post(f"/inbox/{item.pk}/decision/", {"decision": "approve"})
    run.refresh_from_db()
    assert run.state == "COMPLETE" and only_item(run).decided_by == second_approver


def test_simulating_a_rule_the_checks_refuse_says_why_on_its_fields(client, author):
    # Simulate showed neither a result nor a problem: only Save said the expression was wrong
    client.force_login(author)
    form = {"name": "half typed", "reason": "x", "effect": "approve", "kinds": ["capability"],
            "capabilities": ["file_delete"], "tools": "delete_file", "host": "bad host/",
            "expression": "tool == ", "simulate": "1"}
    page = client.post("/inbox/rules/new/", form).content.decode()
    assert "does not compile" in page and "not a host pattern" in page
    assert "On the last" not in page and not ApprovalRule.objects.exists()


def test_a_version_range_without_a_skill_is_refused_rather_than_dropped(client, author):
    # dropped without a word, the rule then applied to every skill
    client.force_login(author)
    form = {"name": "versions", "reason": "x", "effect": "approve", "kinds": ["capability"],
            "capabilities": ["file_delete"], "tools": "delete_file", "folder": ".", "enabled": "on",
            "skill_versions": ">=banana", "save": "1"}
    response = client.post("/inbox/rules/new/", form)
    assert response.status_code == 200 and not ApprovalRule.objects.exists()
    assert "Name the skill these versions are of" in response.content.decode()
