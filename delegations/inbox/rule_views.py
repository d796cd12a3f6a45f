"""The approval rule pages: the list (with a warning on "everything" rules) and the
builder, which simulates the rule on the last decisions before it saves it, and starts
prefilled from an inbox item ("Make a rule from this")."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from delegations.accounts.roles import can_approve, can_write_rules, visible_approvals
from delegations.models import ApprovalRule

from .rule_forms import RuleForm, initial_from_item, initial_from_rule
from .rule_store import RuleRefusal, rule_save, rule_simulate
from .rules import approves_everything, rule_problems


def _require_author(request: HttpRequest) -> None:
    if not can_write_rules(request.user):
        raise PermissionDenied("Writing approval rules needs the rule author role.")


@require_GET
@login_required
def rule_list(request: HttpRequest) -> HttpResponse:
    """Every rule, oldest first (the order conflicts are settled in)."""
    if not (can_approve(request.user) or can_write_rules(request.user)):
        raise PermissionDenied("Approval rules are read by approvers and rule authors.")
    rules = list(ApprovalRule.objects.select_related("owner").order_by("pk"))
    rows = [{"rule": rule, "everything": rule.effect == "approve" and approves_everything(rule.match or {})}
            for rule in rules]
    return render(request, "delegations/inbox/rules.html",
                  {"rows": rows, "can_write_rules": can_write_rules(request.user)})


@require_http_methods(["GET", "POST"])
@login_required
def rule_new(request: HttpRequest) -> HttpResponse:
    _require_author(request)
    initial: dict[str, Any] = {"enabled": True}
    item_id = request.GET.get("item", "")
    if item_id.isdigit():
        item = get_object_or_404(visible_approvals(request.user).select_related("run"), pk=int(item_id))
        initial = initial_from_item(item)
    return _builder(request, None, initial)


@require_http_methods(["GET", "POST"])
@login_required
def rule_edit(request: HttpRequest, rule_id: int) -> HttpResponse:
    _require_author(request)
    rule = get_object_or_404(ApprovalRule, pk=rule_id)
    return _builder(request, rule, initial_from_rule(rule))


def _builder(request: HttpRequest, rule: ApprovalRule | None, initial: dict[str, Any]) -> HttpResponse:
    """GET: the form (and the simulation of what it holds); POST: simulate, then save unless
    only the simulation was asked for (the "Simulate" button) or the save is refused."""
    form = RuleForm(request.POST or None, initial=initial)
    simulation, refusal = None, None
    if request.method == "POST" and form.is_valid():
        data = form.rule_data()
        if "simulate" not in request.POST:
            try:
                rule_save(rule=rule, data=data, user=request.user,
                                     base_version=form.cleaned_data["base_version"],
                                     confirm_disagreements=form.cleaned_data["confirm_disagreements"])
                return redirect("delegations:rule_list")
            except RuleRefusal as error:
                refusal = error
                for where, messages in error.details.get("errors", {}).items():
                    form.add_refusal(where, " ".join(messages), data["match"])
                if "current_version" in error.details:   # saved since: the next save goes on top
                    form.rebase(error.details["current_version"])
        simulation = _simulate(data, form if "simulate" in request.POST else None)
    elif request.method == "GET" and initial.get("kinds"):
        probe = RuleForm(initial | {"effect": initial.get("effect", "approve"), "reason": "-", "name": "-"})
        simulation = _simulate(probe.rule_data()) if probe.is_valid() else None
    return render(request, "delegations/inbox/rule_builder.html",
                  {"form": form, "rule": rule, "simulation": simulation, "refusal": refusal})


def _simulate(data: dict[str, Any], form: RuleForm | None = None) -> dict[str, Any] | None:
    """What the rule would have done to the last decisions; None for a match the checks
    refuse, each problem said on ``form``'s field (a save says them itself)."""
    problems = rule_problems(match=data["match"], effect=data["effect"], comment=data["comment"] or "-",
                             matches_everything=True)
    if problems:
        if form is not None:
            for where, messages in problems.items():
                form.add_refusal(where, " ".join(messages), data["match"])
        return None
    draft = ApprovalRule(name=data["name"], match=data["match"], effect=data["effect"], comment=data["comment"])
    return rule_simulate(rule=draft).as_data()
