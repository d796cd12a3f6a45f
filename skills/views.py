"""Catalog, skill pages, import and export. Everyone logged in browses; composers import."""

from __future__ import annotations

import io
from typing import Any

from django.contrib import messages
from django.core.paginator import Page
from django.db.models import Count
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_GET
from django_htmx.http import push_url

from delegations.accounts.roles import can_compose
from delegations.models import RemoteAgent
from delegations.protocol.errors import ProtocolError

from .forms import CatalogFilterForm, SkillImportForm
from .models import Skill, approval_required_capabilities
from .services import RegistryError, skill_import, upload_limit

PAGE_SIZE = 24
IMPORT_REFUSED = ("Only composers can import skills. Ask an admin to add you to the "
                  "“composers” group; meanwhile you can browse and export every skill.")


def _get_skill(name: str, version: str | None = None) -> Skill:
    skill = Skill.objects.resolve(f"{name}@{version}" if version else name)
    if skill is None:
        wanted = f"{name}@{version}" if version else name
        raise Http404(f"No skill {wanted} in the registry.")
    return skill


def _with_version_counts(page: Page[Skill]) -> Page[Skill]:
    names = [skill.name for skill in page.object_list]
    counts = dict(Skill.objects.filter(name__in=names).values_list("name").annotate(Count("id")))
    for skill in page.object_list:
        skill.version_count = counts.get(skill.name, 1)  # type: ignore[attr-defined]
    return page


def _page_links(page: Page[Skill]) -> list[int | str]:
    """Page numbers to link, with the paginator's ELLIPSIS for a gap: 1 … 4 5 [6] 7 8 … 20."""
    return list(page.paginator.get_elided_page_range(page.number, on_each_side=2, on_ends=1))


def _with_skill(url_name: str, ref: str) -> str | None:
    """``url_name`` prefilled with the skill ``ref``, or None while that page does not exist."""
    try:
        return f"{reverse(url_name)}?skill={ref}"
    except NoReverseMatch:
        return None


def _remote_skills(request: HttpRequest, filters: dict[str, Any]) -> list[dict[str, Any]]:
    """The remote agents' skills the filters match, each with the composer prefilled with
    it for those who may compose (the composer gives it the agent's capability)."""
    composes = can_compose(request.user)
    return [{"listing": listing,
             "compose_url": _with_skill("delegations:delegation_new", listing.ref) if composes else None}
            for listing in RemoteAgent.objects.listings(**filters)]


@require_GET
def catalog(request: HttpRequest) -> HttpResponse:
    form = CatalogFilterForm(request.GET)
    filters = form.filters()
    page = Skill.objects.catalog(**filters).paginate(request.GET.get("page"), PAGE_SIZE)
    page = _with_version_counts(page)
    context: dict[str, Any] = {
        "form": form, "filters": filters, "page": page, "page_links": _page_links(page),
        "query": form.query_string(), "clear_tag_query": form.query_string(tag=""),
        # called by the template, so only when the full page (its filter form) renders
        "capability_names": Skill.objects.capability_names,
        "filtered": any(value not in ("", None) for value in filters.values()),
        "can_import": can_compose(request.user),
        "remote_skills": _remote_skills(request, filters),
        # only superusers add remote agents (the admin, /api/remote-agents)
        "can_add_remote_agents": request.user.is_superuser,
    }
    if request.htmx and not request.htmx.boosted:  # type: ignore[attr-defined]
        response = render(request, "skills/catalog.html#results", context)
        # The address bar shows the canonical query (empty fields left out).
        query = form.query_string(page=page.number if page.number > 1 else "")
        return push_url(response, f"{reverse('skills:catalog')}{'?' + query if query else ''}")
    return render(request, "skills/catalog.html", context)


@require_GET
def detail(request: HttpRequest, name: str, version: str | None = None) -> HttpResponse:
    skill = _get_skill(name, version)
    context = {
        "skill": skill, "versions": Skill.objects.versions_of(skill.name),
        # starting runs is for composers, like importing: in the composer, or as raw JSON
        "compose_url": _with_skill("delegations:delegation_new", skill.ref) if can_compose(request.user) else None,
        "run_url": _with_skill("delegations:run_new", skill.ref) if can_compose(request.user) else None,
        "files": skill.files.defer("content"),
    }
    if request.htmx and not request.htmx.boosted:  # type: ignore[attr-defined]
        return render(request, "skills/skill_detail.html#skill", context)
    return render(request, "skills/skill_detail.html", context)


@require_GET
def manifest_download(request: HttpRequest, name: str, version: str) -> FileResponse:
    skill = _get_skill(name, version)
    return FileResponse(io.BytesIO(skill.export_manifest_json().encode()), as_attachment=True,
                        content_type="application/json", filename="manifest.json")


@require_GET
def bundle_download(request: HttpRequest, name: str, version: str) -> FileResponse:
    skill = _get_skill(name, version)
    return FileResponse(io.BytesIO(skill.export_bundle_zip()), as_attachment=True,
                        content_type="application/zip", filename=skill.bundle_filename)


def import_skill(request: HttpRequest) -> HttpResponse:
    if not can_compose(request.user):
        messages.error(request, IMPORT_REFUSED)
        return redirect("skills:catalog")
    form = (SkillImportForm(request.POST, request.FILES) if request.method == "POST"
            else SkillImportForm())
    issues: list[dict[str, str]] = []
    if request.method == "POST" and form.is_valid():
        source, origin = form.source()
        try:
            result = skill_import(source=source, origin=origin, created_by=request.user)
        except ProtocolError as error:
            issues = [issue.as_dict() for issue in error.issues] or [
                {"field": "manifest", "message": error.message}]
        except RegistryError as error:
            form.add_error(None, error.message)
        else:
            skill = result.skill
            if result.created:
                messages.success(request, f"Imported {skill.ref}.")
            else:
                messages.info(request, f"{skill.ref} is already in the registry with exactly this "
                                       "content; nothing changed.")
            for warning in result.warnings:
                messages.warning(request, f"Warning: {warning}")
            return redirect(skill)
    return render(request, "skills/import.html", {
        "form": form, "issues": issues, "upload_limit": upload_limit(),
        "approval_capabilities": sorted(approval_required_capabilities()),
    })
