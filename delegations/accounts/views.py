from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from delegations.accounts.rate_limits import AttemptLimit, RateLimited, client_address, login_limits
from delegations.accounts.requests import AuthedRequest
from delegations.accounts.roles import can_approve, can_compose
from delegations.models import APIToken


def account(request: AuthedRequest) -> HttpResponse:
    tokens = APIToken.objects.filter(user=request.user)
    return render(request, "delegations/accounts/account.html", {
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
    return render(request, "delegations/accounts/account.html", {
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


class RateLimitedLoginView(LoginView):
    """Django's login page, refusing with 429 (and Retry-After) a username or an address
    that failed too often (HANDOFF_LOGIN_MAX_FAILURES, ..._PER_ADDRESS, HANDOFF_LOGIN_WINDOW_S)."""

    redirect_authenticated_user = True

    def _attempts(self) -> tuple[tuple[AttemptLimit, str], ...]:
        by_user, by_address = login_limits()
        username = str(self.request.POST.get("username", "")).strip().lower()[:150]
        return (by_user, f"user:{username}"), (by_address, f"address:{client_address(self.request)}")

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        wait = max(limit.retry_after(key) for limit, key in self._attempts())
        if wait:
            # unbound: a bound form's errors would check the password, the work refused here
            form = self.get_form_class()(request, initial={"username": request.POST.get("username", "")})
            form.cleaned_data = {}  # what add_error expects of a form that was cleaned
            form.add_error(None, RateLimited("logins", wait).message)
            response = self.render_to_response(self.get_context_data(form=form), status=429)
            response["Retry-After"] = str(wait)
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: AuthenticationForm) -> HttpResponse:
        for limit, key in self._attempts():
            limit.fail(key)
        return super().form_invalid(form)

    def form_valid(self, form: AuthenticationForm) -> HttpResponse:
        by_user, key = self._attempts()[0]
        by_user.reset(key)  # the address keeps its count: one good login must not wipe a spray
        return super().form_valid(form)


@never_cache
@login_not_required
def admin_login(request: HttpRequest) -> HttpResponseBase:
    """The admin's login page (as ``AdminSite.login`` draws it), counted against the same
    failed-login limits as /accounts/login/: a password guessed here is a password guessed."""
    redirect_url = LoginView().get_redirect_url(request) or reverse("admin:index")
    if request.method == "GET" and admin.site.has_permission(request):
        return redirect(redirect_url)
    context = {**admin.site.each_context(request), "title": "Log in", "subtitle": None,
               "app_path": request.get_full_path(), "username": request.user.get_username(),
               REDIRECT_FIELD_NAME: redirect_url}
    request.current_app = admin.site.name
    return RateLimitedLoginView.as_view(
        extra_context=context, authentication_form=AdminAuthenticationForm,
        template_name="admin/login.html", redirect_authenticated_user=False)(request)
