"""The approval inbox: what waits for a person across every run one may see, decided
with the same workflow as the run page and the API (services.approval_decide)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from delegations.forms import DECIDED, DecisionForm
from delegations.models import Approval
from delegations.roles import can_approve
from delegations.services import RunError, approval_decide

from .runs import DECIDE_REFUSED

PENDING_SHOWN = 100
HISTORY_SHOWN = 20


def _get_approval_for_user(request: HttpRequest, approval_id: int) -> Approval:
    approval = Approval.objects.visible_to(request.user).filter(pk=approval_id).first()
    if approval is None:
        raise Http404(f"No inbox item {approval_id} that you can see.")
    return approval


@require_GET
def inbox(request: HttpRequest) -> HttpResponse:
    visible = Approval.objects.visible_to(request.user).select_related("run")
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


@require_POST
def inbox_decide(request: HttpRequest, approval_id: int) -> HttpResponse:
    if not can_approve(request.user):
        raise PermissionDenied(DECIDE_REFUSED)
    approval = _get_approval_for_user(request, approval_id)
    form = DecisionForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose approve, reject or answer.")
        return redirect("delegations:inbox")
    decision = form.cleaned_data["decision"]
    try:
        approval_decide(approval=approval, user=request.user, decision=decision,
                        comment=form.cleaned_data["comment"], answer=form.cleaned_data["answer"])
    except RunError as error:
        messages.error(request, f"#{approval.pk}: {error.message}")
    else:
        messages.success(request, f"#{approval.pk} {DECIDED[decision]}; its run resumes.")
    return redirect("delegations:inbox")
