"""REST routes for approval rules (``/api/approval-rules``).

Rule authors (and superusers) write rules; approvers and rule authors read them. A save
answers with the rule and its simulation; 422 lists every problem on its field (``errors``)
or, when the rule would have approved items a person rejected, the simulation to confirm
(``confirm_disagreements``); 409 a save based on an older version, with its ``diff``.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Router, Schema, Status
from pydantic import Field

from delegations.accounts.roles import can_approve, can_write_rules
from delegations.api_lists import iso
from delegations.inbox.rule_store import (
    NOT_A_RULE_AUTHOR,
    SIMULATION_WINDOW,
    RuleRefusal,
    rule_fields,
    rule_save,
    rule_simulate,
)
from delegations.inbox.rules import approves_everything, rule_problems
from delegations.models import ApprovalRule
from delegations.request_bodies import RequestBody

router = Router(tags=["approval rules"])


class RuleIn(RequestBody):
    name: str | None = None
    reason: str | None = None
    match: dict[str, Any] | None = Field(default=None, description="What the rule matches (see the docs).")
    effect: str | None = Field(default=None, description="approve | reject | two_approvers")
    comment: str | None = Field(default=None, description="For reject: what the subagent is told.")
    enabled: bool | None = None
    matches_everything: bool | None = Field(
        default=None, description="Confirm a rule that approves an approval-required capability everywhere.")
    expires_at: str | None = Field(default=None, description="ISO 8601; empty: never.")
    base_version: int | None = Field(default=None, description="The version this change is based on.")
    confirm_disagreements: bool = Field(
        default=False, description="Save although the rule would have approved items a person rejected.")


class SimulateIn(RequestBody):
    rule: RuleIn
    window: int = Field(default=SIMULATION_WINDOW, ge=1, le=5000)


class RuleOut(Schema):
    id: int
    name: str
    reason: str
    owner: str | None
    match: dict[str, Any]
    effect: str
    comment: str
    enabled: bool
    matches_everything: bool
    everything_warning: bool = Field(description="It approves an approval-required capability everywhere.")
    expires_at: str | None
    version: int
    updated_at: str | None


class SavedRuleOut(Schema):
    rule: RuleOut
    simulation: dict[str, Any]


class RuleDetailOut(RuleOut):
    versions: list[dict[str, Any]]


def rule_out(rule: ApprovalRule) -> dict[str, Any]:
    match = rule.match if isinstance(rule.match, dict) else {}
    return {"id": rule.pk, "name": rule.name, "reason": rule.reason,
            "owner": rule.owner.get_username() if rule.owner else None, "match": match,
            "effect": rule.effect, "comment": rule.comment, "enabled": rule.enabled,
            "matches_everything": rule.matches_everything,
            "everything_warning": rule.effect == "approve" and approves_everything(match),
            "expires_at": iso(rule.expires_at), "version": rule.version, "updated_at": iso(rule.updated_at)}


def _body_data(body: RuleIn) -> dict[str, Any]:
    return body.model_dump(exclude_none=True, exclude={"base_version", "confirm_disagreements"})


def _readable(request: HttpRequest, rule_id: int | None = None) -> ApprovalRule | None:
    if not (can_write_rules(request.user) or can_approve(request.user)):
        raise RuleRefusal("Approval rules are read by approvers and rule authors.", status=403)
    return get_object_or_404(ApprovalRule, pk=rule_id) if rule_id is not None else None


@router.get("", response=list[RuleOut], summary="Approval rules")
def list_rules(request: HttpRequest) -> list[dict[str, Any]]:
    _readable(request)
    return [rule_out(rule) for rule in ApprovalRule.objects.select_related("owner")]


@router.post("", response={201: SavedRuleOut}, summary="Write an approval rule")
def create_rule(request: HttpRequest, body: RuleIn) -> Status:
    rule, simulation = rule_save(rule=None, data=_body_data(body), user=request.user,
                                 confirm_disagreements=body.confirm_disagreements)
    return Status(201, {"rule": rule_out(rule), "simulation": simulation.as_data()})


@router.post("/simulate", response=dict[str, Any], summary="What a rule would have done to past decisions")
def simulate_rule(request: HttpRequest, body: SimulateIn) -> dict[str, Any]:
    _readable(request)
    values, problems = rule_fields(_body_data(body.rule))
    draft = ApprovalRule(**{"match": {}, "effect": "approve", **values})
    problems.update(rule_problems(match=draft.match, effect=draft.effect, comment=draft.comment,
                                  matches_everything=True))
    if problems:
        raise RuleRefusal("The rule cannot be simulated: it has problems.", details={"errors": problems})
    return rule_simulate(rule=draft, window=body.window).as_data()


@router.get("/{rule_id}", response=RuleDetailOut, summary="One approval rule, with its versions")
def get_rule(request: HttpRequest, rule_id: int) -> dict[str, Any]:
    rule = _readable(request, rule_id)
    assert rule is not None
    versions = [{"number": v.number, "data": v.data, "saved_at": iso(v.saved_at),
                 "saved_by": v.saved_by.get_username() if v.saved_by else None}
                for v in rule.versions.select_related("saved_by")]
    return {**rule_out(rule), "versions": versions}


@router.put("/{rule_id}", response=SavedRuleOut, summary="Change an approval rule")
def update_rule(request: HttpRequest, rule_id: int, body: RuleIn) -> dict[str, Any]:
    rule = _readable(request, rule_id)
    if body.base_version is None:
        raise RuleRefusal("base_version is required: the version your change is based on.",
                          details={"errors": {"base_version": ["Required."]}})
    saved, simulation = rule_save(rule=rule, data=_body_data(body), user=request.user,
                                  base_version=body.base_version,
                                  confirm_disagreements=body.confirm_disagreements)
    return {"rule": rule_out(saved), "simulation": simulation.as_data()}


@router.delete("/{rule_id}", response={204: None}, summary="Revoke an approval rule")
def delete_rule(request: HttpRequest, rule_id: int) -> Status:
    """Past decisions keep naming the rule and version that made them."""
    rule = _readable(request, rule_id)
    if not can_write_rules(request.user):
        raise RuleRefusal(NOT_A_RULE_AUTHOR, status=403)
    assert rule is not None
    rule.delete()
    return Status(204, None)
