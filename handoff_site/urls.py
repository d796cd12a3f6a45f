from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponseBase, HttpResponseNotAllowed, JsonResponse
from django.urls import URLPattern, URLResolver, include, path
from django.views.decorators.csrf import csrf_exempt

from delegations.accounts.views import RateLimitedLoginView, admin_login
from delegations.interop.mcp.endpoint import mcp_view

from .api import api


@csrf_exempt   # it changes nothing; a program's POST must read this, not the CSRF page
@login_not_required
def api_not_found(request: HttpRequest, rest: str) -> JsonResponse:
    return JsonResponse({"detail": f"No API route at /api/{rest}. See /api/docs."}, status=404)


def _json_not_allowed(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    """ninja answers a method a route lacks with a text 405; the API speaks JSON."""
    if not isinstance(response, HttpResponseNotAllowed):
        return response
    allowed = response["Allow"]
    answer = JsonResponse({"detail": f"{request.method} is not allowed on {request.path}; it "
                                     f"answers {allowed}. See /api/docs."}, status=405)
    answer["Allow"] = allowed
    return answer


def _api_view(view: Callable[..., Any]) -> Callable[..., Any]:
    """One of ninja's views, public (the API authenticates by itself, 401 JSON, so the login
    redirect must not apply) and answering a wrong method in JSON. ninja's own view has no
    hook for the 405, so it is wrapped here, where the API is mounted."""
    if iscoroutinefunction(view):
        @wraps(view)
        async def async_view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            return _json_not_allowed(request, await view(request, *args, **kwargs))
        wrapped: Callable[..., Any] = async_view
    else:
        @wraps(view)
        def sync_view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            return _json_not_allowed(request, view(request, *args, **kwargs))
        wrapped = sync_view
    return login_not_required(wrapped)


def _api_patterns(patterns: list[URLPattern | URLResolver]) -> list[URLPattern | URLResolver]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            _api_patterns(pattern.url_patterns)
        else:
            pattern.callback = _api_view(pattern.callback)
    return patterns


api_urls, app_name, namespace = api.urls

urlpatterns: list[URLPattern | URLResolver] = [
    path("accounts/login/", RateLimitedLoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/password_change/", auth_views.PasswordChangeView.as_view(),
         name="password_change"),
    path("accounts/password_change/done/", auth_views.PasswordChangeDoneView.as_view(),
         name="password_change_done"),
    path("admin/login/", admin_login),  # before the admin's own: the login limits apply
    path("admin/", admin.site.urls),
    path("api/", include((_api_patterns(list(api_urls)), app_name), namespace=namespace)),
    path("api/<path:rest>", api_not_found),
    path("mcp", mcp_view, name="mcp"),  # MCP clients: Handoff's tools over streamable HTTP
    path("skills/", include("skills.urls")),
    path("", include("delegations.urls")),
]

admin.site.site_header = "Handoff administration"
admin.site.site_title = "Handoff admin"
