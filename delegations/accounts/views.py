from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from delegations.accounts.requests import AuthedRequest
from delegations.accounts.roles import can_approve, can_compose
from delegations.models import APIToken


def account(request: AuthedRequest) -> HttpResponse:
    tokens = APIToken.objects.filter(user=request.user)
    return render(request, "delegations/account.html", {
        "tokens": tokens,
        "roles": [name for name, has in (("composer", can_compose(request.user)),
                                         ("approver", can_approve(request.user))) if has],
    })


@require_POST
def token_create(request: AuthedRequest) -> HttpResponse:
    name = request.POST.get("name", "").strip()[:100]
    if not name:
        messages.error(request, "Give the token a name, e.g. 'deploy script', so you can tell it apart later.")
        return redirect("delegations:account")
    token, raw = APIToken.issue(user=request.user, name=name)
    # Shown once: only the digest is stored.
    return render(request, "delegations/account.html", {
        "tokens": APIToken.objects.filter(user=request.user),
        "new_token": raw, "new_token_row": token,
        "roles": [],
    })


@require_POST
def token_revoke(request: AuthedRequest, token_id: int) -> HttpResponse:
    token = get_object_or_404(APIToken, pk=token_id, user=request.user)
    token.revoke()
    messages.success(request, f"Token “{token.name}” revoked; programs using it now get 401.")
    return redirect("delegations:account")
