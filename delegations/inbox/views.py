"""The approval inbox: what waits for a person across every run one may see, and deciding
an item from the inbox or from its run's page, with the same workflow as the API
(:mod:`delegations.inbox.decisions`).

Every form works as a plain POST with a redirect and a message; with htmx the inbox's
forms swap the item in place instead, and ``inbox.js`` adds the live list, the countdown,
keys and notifications on top.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Page, Paginator
from django.db.models import F, Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from delegations.accounts.roles import can_approve, can_write_rules, visible_approvals, visible_runs
from delegations.inbox.context import arguments_diff, decision_items
from delegations.inbox.decisions import (
    approval_decide,
    approvals_decide_batch,
    validate_edited_arguments,
)
from delegations.inbox.forms import BatchDecisionForm, DecisionForm, InboxFilterForm
from delegations.models import Approval
from delegations.models.approvals import ApprovalQuerySet
from delegations.protocol.approvals import DECIDED, decided_as
from delegations.refusals import Refusal

PAGE_SIZE = 20
RECENT_SHOWN = 20
DECIDE_REFUSED = ("Deciding approvals needs the approver role. Ask an admin to add you to "
                  "the “approvers” group, or ask an approver to decide.")


def _get_approval_for_user(request: HttpRequest, approval_id: int) -> Approval:
    approval = (visible_approvals(request.user).select_related("run", "run__root", "decided_by")
                .filter(pk=approval_id).first())
    if approval is None:
        raise Http404(f"No inbox item {approval_id} that you can see.")
    return approval


# -- what the pages show -------------------------------------------------------------------

def _grouped(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The page's items under their root runs, groups in the order of their first item."""
    groups: dict[str, dict[str, Any]] = {}
    for item in items:
        root = item["context"]["lineage"][0]
        group = groups.setdefault(root["id"], {"root": root, "items": []})
        group["items"].append(item)
    for group in groups.values():
        group["batchable"] = [item for item in group["items"] if item["refusal"] is None]
    return list(groups.values())


def _filtered_pending(request: HttpRequest, filters: dict[str, Any]) -> ApprovalQuerySet:
    items = (visible_approvals(request.user).pending().select_related("run", "run__root", "rule_decision")
             .prefetch_related("signoffs__user"))
    if filters["kind"]:
        items = items.filter(kind=filters["kind"])
    if filters["risk"]:
        items = items.filter(risk=filters["risk"])
    if filters["run"]:
        items = items.filter(Q(run_id=filters["run"]) | Q(run__root_id=filters["run"]))
    if filters["mine"]:
        items = items.of_runs_owned_by(request.user)
    if filters["q"]:
        text = filters["q"]
        items = items.filter(Q(title__icontains=text) | Q(run__label__icontains=text)
                             | Q(run__goal__icontains=text) | Q(run__id__startswith=text))
    newest = filters["order"] == "newest"
    return items.order_by(*(("-requested_at", "-pk") if newest else ("requested_at", "pk")))


def _recent(request: HttpRequest) -> list[Approval]:
    """The items decided last, for "Recently decided"."""
    return list(visible_approvals(request.user).decided().select_related("run", "decided_by")
                .order_by("-decided_at", "-pk")[:RECENT_SHOWN])


def _page(request: HttpRequest, items: Any) -> Page:
    return Paginator(items, PAGE_SIZE).get_page(request.GET.get("page"))


def _query_without_page(request: HttpRequest) -> str:
    query = request.GET.copy()
    query.pop("page", None)
    return query.urlencode()


@require_GET
def inbox(request: HttpRequest) -> HttpResponse:
    form = InboxFilterForm(request.GET)
    filters = form.filters()
    page = _page(request, _filtered_pending(request, filters))
    items = decision_items(request.user, list(page.object_list))
    context: dict[str, Any] = {
        "filter_form": form, "filters": filters, "page": page, "groups": _grouped(items),
        "pending_total": page.paginator.count, "filtered": any(filters[name] for name in
                                                                ("q", "kind", "risk", "run", "mine")),
        "query": _query_without_page(request), "can_approve": can_approve(request.user),
        "can_write_rules": can_write_rules(request.user),
        "recent": _recent(request), "recent_shown": RECENT_SHOWN, "hx": True,
    }
    template = "delegations/inbox/inbox.html#pending" if request.htmx else "delegations/inbox/inbox.html"  # type: ignore[attr-defined]
    return render(request, template, context)


@require_GET
def inbox_item(request: HttpRequest, approval_id: int) -> HttpResponse:
    """One pending item, in its run's group, when it passes the filters in the query (the
    live list asks for each new item); 204 when it does not or is no longer pending."""
    filters = InboxFilterForm(request.GET).filters()
    approval = _filtered_pending(request, filters).filter(pk=approval_id).first()
    if approval is None:
        return HttpResponse(status=204)
    groups = _grouped(decision_items(request.user, [approval]))
    return render(request, "delegations/inbox/inbox.html#group",
                  {"group": groups[0], "hx": True, "can_approve": can_approve(request.user),
                   "can_write_rules": can_write_rules(request.user)})


@require_GET
def inbox_history(request: HttpRequest) -> HttpResponse:
    """Every decided item one may see, newest first, with who decided what and why."""
    text = request.GET.get("q", "").strip()[:200]
    items = (visible_approvals(request.user).exclude(status=Approval.Status.PENDING)
             .select_related("run", "decided_by", "rule_decision").prefetch_related("signoffs__user")
             .order_by(F("decided_at").desc(nulls_last=True), "-requested_at", "-pk"))
    if text:
        items = items.filter(Q(title__icontains=text) | Q(comment__icontains=text)
                             | Q(answer__icontains=text) | Q(run__label__icontains=text)
                             | Q(decided_by__username__icontains=text) | Q(run__id__startswith=text))
    page = _page(request, items)
    return render(request, "delegations/inbox/history.html",
                  {"page": page, "q": text, "query": _query_without_page(request)})


# -- deciding ------------------------------------------------------------------------------

def _budget_limit(approval: Approval, raised: float | None) -> dict[str, Any] | None:
    """The raised limit of a budget item's axis, as the decision takes it."""
    axis = approval.budget_axis
    if raised is None or axis is None:
        return None
    return {axis: int(raised) if raised.is_integer() and axis != "max_cost_usd" else raised}


def _error_text(error: Refusal) -> str:
    problems = error.details.get("errors")
    if isinstance(problems, list) and problems:
        return f"{error.message} " + " ".join(str(problem) for problem in problems)
    return error.message


def _edit_confirmation(request: HttpRequest, item: dict[str, Any], arguments: dict[str, Any] | None,
                       *, back_to: str, decide_url: str, problems: list[str] | None = None) -> HttpResponse:
    """The first step of an edit: the arguments checked against the tool's schema and
    their diff against the original; the second step (``confirm``) approves them.
    ``arguments`` None: the text typed is no JSON object, for the ``problems`` given."""
    approval = item["approval"]
    preview: dict[str, Any]
    if arguments is None:
        preview = {"errors": problems or [], "diff": [], "arguments": None,
                   "typed": request.POST.get("edited_arguments", "")}
    else:
        original = (approval.payload or {}).get("arguments") if isinstance(approval.payload, dict) else None
        preview = {"errors": validate_edited_arguments(approval, arguments),
                   "diff": arguments_diff(original, arguments), "arguments": arguments}
    context = {"item": item, "approval": approval, "preview": preview, "back_to": back_to,
               "decide_url": decide_url, "hx": bool(request.htmx)}  # type: ignore[attr-defined]
    if request.htmx:  # type: ignore[attr-defined]
        return render(request, "delegations/inbox/_decide_forms.html#edit_preview", context)
    return render(request, "delegations/inbox/edit.html", context)


def _decide(request: HttpRequest, item: dict[str, Any], *, back_to: str, decide_url: str,
            resumes: str) -> HttpResponse:
    """Record the posted decision on the item and go back to ``back_to`` with a message
    (with htmx: the item re-rendered in place, decided or with the reason it was not)."""
    approval: Approval = item["approval"]
    form = DecisionForm(request.POST)
    checking_an_edit = request.POST.get("decision") == "edit" and not request.POST.get("confirm")
    if not form.is_valid() and checking_an_edit:   # answered where the check's result shows
        return _edit_confirmation(request, item, None, back_to=back_to, decide_url=decide_url,
                                  problems=[str(error) for errors in form.errors.values() for error in errors])
    if not form.is_valid():
        problems = "; ".join(f"{name}: {' '.join(map(str, errors))}" for name, errors in form.errors.items())
        return _decided(request, approval, back_to=back_to, error=f"#{approval.pk} not decided: {problems}")
    data = form.cleaned_data
    decision = data["decision"]
    if decision == "edit" and data["review_field"]:
        # a review's free-text correction: the one field typed into, as the decision takes it
        data["edited_arguments"] = {data["review_field"]: data["review_value"]}
    if decision == "edit" and not data["confirm"]:
        if data["edited_arguments"] is None:
            return _edit_confirmation(request, item, None, back_to=back_to, decide_url=decide_url,
                                      problems=["Type the edited arguments (a JSON object) first."])
        return _edit_confirmation(request, item, data["edited_arguments"], back_to=back_to,
                                  decide_url=decide_url)
    try:
        decided = approval_decide(
            approval=approval, user=request.user, decision=decision, comment=data["comment"],
            answer=data["answer"], edited_arguments=data["edited_arguments"] if decision == "edit" else None,
            always_allow=data["always_allow"],
            budget_limit=_budget_limit(approval, data["budget_limit"]) if decision == "approve" else None)
    except Refusal as error:
        return _decided(request, approval, back_to=back_to, error=f"#{approval.pk}: {_error_text(error)}")
    if decided.is_pending:   # the first of the two approvals an approval rule requires
        return _decided(request, approval, back_to=back_to,
                        notice=f"#{approval.pk}: your approval is recorded; a second, different approver "
                               f"must approve it too before {resumes} resumes.")
    done = decided_as(approval.kind, decision) + (" and always allowed for this run" if data["always_allow"] else "")
    return _decided(request, approval, back_to=back_to, notice=f"#{approval.pk} {done}; {resumes} resumes.")


def _decided(request: HttpRequest, approval: Approval, *, back_to: str, notice: str = "",
             error: str = "") -> HttpResponse:
    if not request.htmx:  # type: ignore[attr-defined]
        if error:
            messages.error(request, error)
        else:
            messages.success(request, notice)
        return redirect(back_to)
    fresh = _get_approval_for_user(request, approval.pk)
    item = decision_items(request.user, [fresh])[0]
    swapped = render_to_string("delegations/inbox/inbox.html#item",
                               {"item": item, "notice": notice, "error": error, "hx": True,
                                "can_approve": can_approve(request.user),
                                "can_write_rules": can_write_rules(request.user)}, request)
    if not error:   # "Recently decided" lists it at once, beside the item's own update
        swapped += render_to_string("delegations/inbox/inbox.html#recent", {
            "recent": _recent(request), "recent_shown": RECENT_SHOWN, "oob": True}, request)
    return HttpResponse(swapped)


@require_POST
def inbox_decide(request: HttpRequest, approval_id: int) -> HttpResponse:
    if not can_approve(request.user):
        raise PermissionDenied(DECIDE_REFUSED)
    approval = _get_approval_for_user(request, approval_id)
    item = decision_items(request.user, [approval])[0]
    return _decide(request, item, back_to=reverse("delegations:inbox"),
                   decide_url=reverse("delegations:inbox_decide", args=[approval.pk]), resumes="its run")


@require_POST
def inbox_batch(request: HttpRequest) -> HttpResponse:
    """One decision on the ticked items of one run (all or nothing)."""
    if not can_approve(request.user):
        raise PermissionDenied(DECIDE_REFUSED)
    back_to = reverse("delegations:inbox")
    form = BatchDecisionForm(request.POST)
    if not form.is_valid():
        messages.error(request, " ".join(" ".join(map(str, errors)) for errors in form.errors.values()))
        return redirect(back_to)
    ids = form.cleaned_data["ids"]
    approvals = list(visible_approvals(request.user).select_related("run", "run__root").filter(pk__in=ids))
    unseen = sorted(set(ids) - {approval.pk for approval in approvals})
    if unseen:
        messages.error(request, f"No inbox item {', '.join(f'#{pk}' for pk in unseen)} that you can see; nothing decided.")
        return redirect(back_to)
    decision = form.cleaned_data["decision"]
    try:
        approvals_decide_batch(approvals=approvals, user=request.user, decision=decision,
                               comment=form.cleaned_data["comment"])
    except Refusal as error:
        messages.error(request, f"Nothing decided: {_error_text(error)}")
    else:
        numbers = ", ".join(f"#{approval.pk}" for approval in sorted(approvals, key=lambda a: a.pk))
        messages.success(request, f"{numbers} {DECIDED[decision]} together; the run resumes.")
    return redirect(back_to)


@require_POST
def run_decide(request: HttpRequest, run_id: str, approval_id: int) -> HttpResponse:
    """Decide a pending item of this run's tree from the run page."""
    run = visible_runs(request.user).filter(pk=run_id).first()
    if run is None:
        raise Http404(f"No run {run_id} that you can see.")
    if not can_approve(request.user):
        raise PermissionDenied(DECIDE_REFUSED)
    approval = (Approval.objects.select_related("run", "run__root", "decided_by")
                .filter(pk=approval_id, run__in=run.tree()).first())
    if approval is None:
        raise Http404(f"No approval {approval_id} in this run's tree.")
    back_to = reverse("delegations:run_detail", args=[run.pk])
    item = decision_items(request.user, [approval])[0]
    return _decide(request, item, back_to=back_to, decide_url=reverse(
        "delegations:run_decide", args=[run.pk, approval.pk]), resumes="the run")
