"""Skills in the admin: searchable and filterable, read-only (versions never change once
imported; new ones come in through the import page, the API or `manage.py import_skills`)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from .models import Skill, SkillFile
from .schema_tables import schema_rows
from .services import skill_delete


class CapabilityFilter(admin.SimpleListFilter):
    title = "capability"
    parameter_name = "capability"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in Skill.objects.capability_names()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Skill]) -> QuerySet[Skill]:
        value = self.value()
        return queryset.filter(capability_rows__name=value) if value else queryset


class SkillFileInline(admin.TabularInline):
    model = SkillFile
    fields = ["path", "size"]
    readonly_fields = ["path", "size"]
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _schema_table(schema: dict[str, Any]) -> SafeString:
    return SafeString(render_to_string("skills/skill_detail.html#schema_table", {
        "rows": schema_rows(schema), "empty_text": "No constraints."}))


@admin.register(Skill)
class SkillAdmin(admin.ModelAdmin):
    list_display = ["name", "version", "is_latest", "subagent_type", "requires_approval",
                    "capability_list", "source", "created_by", "created_at"]
    list_filter = [CapabilityFilter, "subagent_type", "requires_approval", "is_latest", "source"]
    search_fields = ["name", "version", "description", "search_text"]
    list_select_related = ["created_by"]
    date_hierarchy = "created_at"
    inlines = [SkillFileInline]
    fieldsets = [
        (None, {"fields": ["name", "version", "is_latest", "description", "subagent_type",
                           "requires_approval", "capability_list", "tags", "entry_point",
                           "source", "created_by", "created_at", "public_page"]}),
        ("Schemas", {"fields": ["input_schema_table", "output_schema_table"]}),
        ("Instructions and manifest", {"classes": ["collapse"],
                                       "fields": ["instructions", "warnings", "manifest_pretty",
                                                  "raw_manifest", "content_hash"]}),
    ]
    readonly_fields = ["name", "version", "is_latest", "description", "subagent_type",
                       "requires_approval", "capability_list", "tags", "entry_point", "source",
                       "created_by", "created_at", "public_page", "input_schema_table",
                       "output_schema_table", "instructions", "warnings", "manifest_pretty",
                       "raw_manifest", "content_hash"]

    @admin.display(description="capabilities")
    def capability_list(self, skill: Skill) -> str:
        return ", ".join(skill.capabilities) or "—"

    @admin.display(description="input schema")
    def input_schema_table(self, skill: Skill) -> SafeString:
        return _schema_table(skill.input_schema)

    @admin.display(description="output schema")
    def output_schema_table(self, skill: Skill) -> SafeString:
        return _schema_table(skill.output_schema)

    @admin.display(description="normalized manifest")
    def manifest_pretty(self, skill: Skill) -> SafeString:
        return format_html("<pre>{}</pre>", json.dumps(skill.manifest, indent=2, ensure_ascii=False))

    @admin.display(description="page")
    def public_page(self, skill: Skill) -> SafeString:
        return format_html('<a href="{}">{}</a> · <a href="{}">manifest.json</a>',
                           skill.get_absolute_url(), skill.ref,
                           reverse("skills:manifest", args=[skill.name, skill.version]))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # imports validate through the protocol: use the import page or the API

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # published versions are immutable

    def delete_model(self, request: HttpRequest, obj: Skill) -> None:
        skill_delete(skill=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Skill]) -> None:
        for skill in queryset:
            skill_delete(skill=skill)
