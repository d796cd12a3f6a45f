from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest

from .models import APIToken, WorkerHeartbeat


@admin.register(APIToken)
class APITokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at", "created_at"]
    search_fields = ["name", "user__username", "prefix"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]
    fields = ["user", "name", "prefix", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def save_model(self, request: HttpRequest, obj: APIToken, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        token, raw = APIToken.issue(user=obj.user, name=obj.name)
        obj.pk, obj.prefix, obj.digest = token.pk, token.prefix, token.digest
        # The only time the token is visible; only its hash is stored.
        messages.warning(request, f"Copy this token now, it will not be shown again: {raw}")

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        for token in queryset.filter(revoked_at__isnull=True):
            token.revoke()


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(admin.ModelAdmin):
    list_display = ["worker_id", "kind", "hostname", "pid", "started_at", "last_seen"]
    list_filter = ["kind"]
