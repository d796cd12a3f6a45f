from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest

from .models import APIToken, McpServer, RemoteAgent, WorkerHeartbeat


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


class SuperusersOnly(admin.ModelAdmin):
    """A record that decides which host receives a secret: superusers only."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser


@admin.register(McpServer)
class McpServerAdmin(SuperusersOnly):
    list_display = ["name", "url", "stdio_command", "secret_env", "enabled", "updated_at"]
    list_filter = ["enabled"]
    search_fields = ["name", "url"]
    fields = ["name", "url", "stdio_command", "secret_env", "allowed_tools", "tool_capabilities",
              "timeout_s", "enabled"]


@admin.register(RemoteAgent)
class RemoteAgentAdmin(SuperusersOnly):
    list_display = ["name", "card_url", "secret_env", "capability", "enabled", "updated_at"]
    list_filter = ["enabled", "capability"]
    search_fields = ["name", "card_url"]
    fields = ["name", "card_url", "secret_env", "allowed_skills", "capability",
              "price_per_call_usd", "enabled"]


# -- runs, events, approvals (issue 6) ---------------------------------------------------------

import json  # noqa: E402

from django.utils.html import format_html  # noqa: E402
from django.utils.safestring import SafeString  # noqa: E402

from .models import (  # noqa: E402
    Approval,
    ApprovalRule,
    ApprovalRuleVersion,
    Delegation,
    DelegationVersion,
    Run,
    RunCheckpoint,
    RunEvent,
    RunMessage,
)


def _pretty(value: Any) -> SafeString:
    """JSON shown read-only and readable (indented, in a scrollable block)."""
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    return format_html('<pre style="max-height:28em;overflow:auto;white-space:pre-wrap">{}</pre>', text)


def _json_fields(*names: str) -> dict[str, Any]:
    """Read-only `<name>_pretty` admin methods for JSON columns."""
    methods: dict[str, Any] = {}
    for name in names:
        def shown(self: Any, obj: Any, _name: str = name) -> SafeString:
            return _pretty(getattr(obj, _name))
        shown.short_description = name.replace("_", " ")  # type: ignore[attr-defined]
        methods[f"{name}_pretty"] = shown
    return methods


class RunEventInline(admin.TabularInline):
    model = RunEvent
    extra = 0
    can_delete = False
    fields = ("seq", "type", "ts", "data")
    readonly_fields = ("seq", "type", "ts", "data")
    ordering = ["seq"]
    max_num = 0
    show_change_link = True


RunJson = type("RunJson", (), _json_fields(
    "packet", "adapter_config", "capabilities", "budget", "usage", "result", "criteria_report",
    "findings", "error", "previous_failure"))


@admin.register(Run)
class RunAdmin(RunJson, admin.ModelAdmin):  # type: ignore[misc,valid-type]
    list_display = ["id", "label", "state", "skill", "adapter_name", "owner", "depth", "attempt",
                    "created_at", "finished_at", "archived_at"]
    list_filter = ["state", "adapter_name", "depth", "cleanup", "created_at", "archived_at"]
    search_fields = ["id", "label", "goal", "skill", "session_key", "input_hash", "owner__username"]
    date_hierarchy = "created_at"
    list_select_related = ["owner"]
    raw_id_fields = ["parent", "root", "owner", "delegation", "retry_of"]
    readonly_fields = [
        "id", "parent", "root", "depth", "owner", "delegation", "input_hash", "label", "goal",
        "subagent_type", "skill", "agent_id", "session_key", "adapter_name", "timeout_s", "cleanup",
        "state", "attempt", "retry_of", "created_at", "allocated_at", "started_at", "finished_at",
        "archived_at", "lease_owner", "lease_expires_at", "recoveries", "cancel_requested_at",
        "last_seq", "packet_pretty", "adapter_config_pretty", "capabilities_pretty",
        "budget_pretty", "usage_pretty", "result_pretty", "criteria_report_pretty",
        "findings_pretty", "error_pretty", "previous_failure_pretty", "checkpoint_pretty"]
    fieldsets = [
        (None, {"fields": ["id", "label", "goal", "state", "owner", "delegation", "skill",
                           "subagent_type", "session_key", "attempt", "retry_of"]}),
        ("Tree", {"fields": ["parent", "root", "depth"]}),
        ("Contract", {"fields": ["input_hash", "packet_pretty", "capabilities_pretty",
                                 "budget_pretty", "timeout_s", "cleanup", "previous_failure_pretty"]}),
        ("Adapter", {"fields": ["adapter_name", "adapter_config_pretty", "agent_id"]}),
        ("Times", {"fields": ["created_at", "allocated_at", "started_at", "finished_at", "archived_at"]}),
        ("Outcome", {"fields": ["usage_pretty", "result_pretty", "criteria_report_pretty",
                                "findings_pretty", "error_pretty"]}),
        ("Execution", {"classes": ["collapse"],
                       "fields": ["lease_owner", "lease_expires_at", "recoveries",
                                  "cancel_requested_at", "last_seq", "checkpoint_pretty"]}),
    ]
    inlines = [RunEventInline]

    @admin.display(description="checkpoint")
    def checkpoint_pretty(self, obj: Run) -> SafeString:
        return _pretty(RunCheckpoint.data_of(obj.pk))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # runs start through the API, the pages or run_delegation


@admin.register(RunEvent)
class RunEventAdmin(admin.ModelAdmin):
    list_display = ["run", "seq", "type", "ts"]
    list_filter = ["type", "ts"]
    search_fields = ["run__id", "run__label"]
    list_select_related = ["run"]
    readonly_fields = ("run", "seq", "type", "ts", "data_pretty")
    fields = ("run", "seq", "type", "ts", "data_pretty")
    data_pretty = _json_fields("data")["data_pretty"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # the event log is append-only, written by runs

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(RunMessage)
class RunMessageAdmin(admin.ModelAdmin):
    list_display = ["run", "sender", "created_at", "delivered_at"]
    list_filter = ["delivered_at"]
    search_fields = ["text", "run__id"]
    raw_id_fields = ["run", "sender"]


ApprovalJson = type("ApprovalJson", (), _json_fields("payload", "edited_arguments", "budget_limit"))


@admin.register(Approval)
class ApprovalAdmin(ApprovalJson, admin.ModelAdmin):  # type: ignore[misc,valid-type]
    """The audit of every inbox item: what was asked, who decided what and when, with the
    comment, edited arguments, always-allow and raised limits. Read only: people decide in
    the inbox or through the API, where the rules are checked."""

    list_display = ["title", "kind", "status", "decision", "risk", "run", "requested_at",
                    "expires_at", "decided_by", "decided_by_rule", "decided_at", "always_allow"]
    list_filter = ["status", "kind", "decision", "risk", "always_allow", "requested_at",
                   "decided_at", "decided_by"]
    search_fields = ["title", "key", "run__id", "comment", "answer", "decided_by__username"]
    list_select_related = ["run", "decided_by", "rule_decision"]
    date_hierarchy = "requested_at"
    readonly_fields = ("run", "key", "kind", "title", "risk", "requested_at", "expires_at",
                       "payload_pretty", "status", "decision", "decided_by", "decided_by_rule",
                       "decided_at", "comment", "answer", "edited_arguments_pretty", "always_allow",
                       "budget_limit_pretty")
    fieldsets = [
        ("What was asked", {"fields": ("run", "key", "kind", "title", "risk", "requested_at",
                                       "expires_at", "payload_pretty")}),
        ("The decision", {"fields": ("status", "decision", "decided_by", "decided_by_rule", "decided_at", "comment",
                                     "answer", "edited_arguments_pretty", "always_allow",
                                     "budget_limit_pretty")}),
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # runs open items; people decide them in the inbox or the API

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a decision in admin would skip the inbox's rules and the run's resume

    @admin.display(description="approval rule")
    def decided_by_rule(self, approval: Approval) -> str:
        """'approved by rule 'price hosts' v3', with what it matched."""
        audit = approval.rule_audit()
        return f"{audit['label']} (matched {audit['matched']})" if audit is not None else "—"


class ApprovalRuleVersionInline(admin.TabularInline):
    model = ApprovalRuleVersion
    extra = 0
    can_delete = False
    fields = readonly_fields = ("number", "data", "saved_by", "saved_at")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ApprovalRule)
class ApprovalRuleAdmin(admin.ModelAdmin):
    """Approval rules and their versions, to read. Rules are written in the rule builder or
    the API, where each save is simulated, checked and versioned."""

    list_display = ["name", "effect", "enabled", "matches_everything", "owner", "version", "expires_at",
                    "updated_at"]
    list_filter = ["effect", "enabled", "matches_everything"]
    search_fields = ["name", "reason", "owner__username"]
    readonly_fields = ("name", "reason", "owner", "match", "effect", "comment", "enabled", "matches_everything",
                       "expires_at", "version", "updated_by", "created_at", "updated_at")
    inlines = [ApprovalRuleVersionInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# -- delegations (the composer) ---------------------------------------------------------------

DelegationJson = type("DelegationJson", (), _json_fields("packet"))


class DelegationVersionInline(DelegationJson, admin.TabularInline):  # type: ignore[misc,valid-type]
    model = DelegationVersion
    extra = 0
    can_delete = False
    max_num = 0
    fields = ("number", "name", "saved_by", "saved_at", "packet_pretty")
    readonly_fields = fields
    ordering = ["-number"]


@admin.register(Delegation)
class DelegationAdmin(DelegationJson, admin.ModelAdmin):  # type: ignore[misc,valid-type]
    list_display = ["name", "owner", "parent", "template", "version", "updated_at"]
    list_filter = ["template", "created_at", "updated_at"]
    search_fields = ["name"]
    list_select_related = ["owner", "parent"]
    raw_id_fields = ["parent", "owner"]
    readonly_fields = ["version", "updated_by", "created_at", "updated_at", "packet_pretty"]
    fields = ["name", "description", "owner", "parent", "position", "template", "packet",
              "packet_pretty", "version", "updated_by", "created_at", "updated_at"]
    inlines = [DelegationVersionInline]

    def save_model(self, request: Any, obj: Delegation, form: Any, change: bool) -> None:
        """An admin's edit is a save like any other: a new version, kept in the history."""
        if change and {"name", "packet"} & set(form.changed_data):
            obj.version += 1
        obj.updated_by = request.user
        super().save_model(request, obj, form, change)
        if not change or {"name", "packet"} & set(form.changed_data):
            obj.keep_version(request.user)


# -- runs imported from other instances --------------------------------------------------------

from .models import ImportedRun  # noqa: E402


@admin.register(ImportedRun)
class ImportedRunAdmin(admin.ModelAdmin):
    list_display = ["label", "owner", "created_at"]
    list_filter = ["created_at"]
    search_fields = ["label", "owner__username"]
    list_select_related = ["owner"]
    fields = ["label", "owner", "created_at", "document_pretty"]
    readonly_fields = ["label", "owner", "created_at", "document_pretty"]

    @admin.display(description="document")
    def document_pretty(self, obj: ImportedRun) -> SafeString:
        return _pretty(obj.document)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # imported through the Import a run page or POST /api/runs/import

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a record of a run on another instance: read, never edited
