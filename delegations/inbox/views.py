"""The approval inbox: what waits for a person across every run one may see, and deciding
an item from the inbox or from its run's page, with the same workflow as the API
(:func:`delegations.inbox.decisions.approval_decide`)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from delegations.accounts.roles import can_approve, visible_approvals
from delegations.inbox.decisions import approval_decide
from delegations.inbox.forms import DECIDED, DecisionForm
from delegations.models import Approval, Run
from delegations.runs.workflows import RunError

PENDING_SHOWN = 100
HISTORY_SHOWN = 20
DECIDE_REFUSED = ("Deciding approvals needs the approver role. Ask an admin to add you to "
                  "the “approvers” group, or ask an approver to decide.")


def _get_approval_for_user(request: HttpRequest, approval_id: int) -> Approval:
    approval = visible_approvals(request.user).filter(pk=approval_id).first()
    if approval is None:
        raise Http404(f"No inbox item {approval_id} that you can see.")
    return approval


@require_GET
def inbox(request: HttpRequest) -> HttpResponse:
    visible = visible_approvals(request.user).select_related("run")
    # oldest first: those runs have been parked the longest
    pending = visible.pending().order_by("requested_at", "pk")
    context: dict[str, Any] = {
        "pending": list(pending[:PENDING_SHOWN]),
        "pending_total": pending.count(),
        "history": list(visible.decided().select_related("decided_by")
                        .order_by("-decided_at", "-pk")[:HISTORY_SHOWN]),
        "history_shown": HISTORY_SHOWN, "can_approve": can_approve(request.user),
    }
    return render(request, "delegations/inbox.html", context)


def _decide(request: HttpRequest, approval: Approval, *, back_to: str, resumes: str) -> HttpResponse:
    """Record the posted decision on ``approval`` and go back to ``back_to`` with a message."""
    form = DecisionForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose approve, reject or answer.")
        return redirect(back_to)
    decision = form.cleaned_data["decision"]
    try:
        approval_decide(approval=approval, user=request.user, decision=decision,
                        comment=form.cleaned_data["comment"], answer=form.cleaned_data["answer"])
    except RunError as error:
        messages.error(request, f"#{approval.pk}: {error.message}")
    else:
        messages.success(request, f"#{approval.pk} {DECIDED[decision]}; {resumes} resumes.")
    return redirect(back_to)


@require_POST
def inbox_decide(request: HttpRequest, approval_id: int) -> HttpResponse:
    if not can_approve(request.user):
        raise PermissionDenied(DECIDE_REFUSED)
    approval = _get_approval_for_user(request, approval_id)
    return _decide(request, approval, back_to=reverse("delegations:inbox"), resumes="its run")


@require_POST
def run_decide(request: HttpRequest, run_id: str, approval_id: int) -> HttpResponse:
    """Decide a pending item of this run's tree from the run page."""
    run = Run.objects.visible_to(request.user).filter(pk=run_id).first()
    if run is None:
        raise Http404(f"No run {run_id} that you can see.")
    if not can_approve(request.user):
        raise PermissionDenied(DECIDE_REFUSED)
    approval = Approval.objects.filter(pk=approval_id, run__in=run.tree()).first()
    if approval is None:
        raise Http404(f"No approval {approval_id} in this run's tree.")
    return _decide(request, approval, back_to=reverse("delegations:run_detail", args=[run.pk]),
                   resumes="the run")
