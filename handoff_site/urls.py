from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, JsonResponse
from django.urls import URLPattern, URLResolver, include, path

from delegations.accounts.views import RateLimitedLoginView, admin_login
from delegations.interop.mcp.endpoint import mcp_view

from .api import api


@login_not_required
def api_not_found(request: HttpRequest, rest: str) -> JsonResponse:
    return JsonResponse({"detail": f"No API route at /api/{rest}. See /api/docs."}, status=404)


def _public(patterns: list[URLPattern | URLResolver]) -> list[URLPattern | URLResolver]:
    """The API authenticates by itself (401 JSON), so the login redirect must not apply."""
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            _public(pattern.url_patterns)
        else:
            pattern.callback.login_required = False  # type: ignore[union-attr,attr-defined]
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
    path("api/", include((_public(list(api_urls)), app_name), namespace=namespace)),
    path("api/<path:rest>", api_not_found),
    path("mcp", mcp_view, name="mcp"),  # MCP clients: Handoff's tools over streamable HTTP
    path("skills/", include("skills.urls")),
    path("", include("delegations.urls")),
]

admin.site.site_header = "Handoff administration"
admin.site.site_title = "Handoff admin"
