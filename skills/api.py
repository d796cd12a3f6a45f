"""REST routes of the skill registry, mounted at /api/skills.

Reads need any authenticated user; imports need the composer role. Imports go through
:func:`skills.services.skill_import`, the same path as the browser's import page, so a
manifest is accepted or refused with the same messages everywhere. Invalid manifests
raise the protocol's ProtocolError, which the project's API answers with 422 listing
every issue with its field path.
"""

from __future__ import annotations

import io
from datetime import datetime
from typing import Any, Literal

from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpRequest
from django.urls import reverse
from ninja import Query, Router, Schema, Status
from pydantic import Field

from delegations.accounts.roles import can_compose
from delegations.models import RemoteAgent
from delegations.protocol.manifest import SUBAGENT_TYPES

from .models import MAX_PAGE, Skill, SkillSource
from .services import (
    RegistryError,
    RegistryErrorCode,
    check_upload_size,
    skill_import,
    upload_limit,
)
from .views import IMPORT_REFUSED

router = Router(tags=["skills"])

SubagentTypeName = Literal[SUBAGENT_TYPES]  # type: ignore[valid-type]
_STATUS_FOR = {RegistryErrorCode.CONFLICT: 409, RegistryErrorCode.TOO_LARGE: 413}


# -- schemas --------------------------------------------------------------------------------

class ErrorOut(Schema):
    detail: str


class IssueOut(Schema):
    field: str = Field(description="Where in the manifest, e.g. capabilities[2] or input_schema.x")
    message: str


class InvalidOut(Schema):
    detail: str
    code: str | None = None
    issues: list[IssueOut] = Field(default_factory=list, description="Every problem at once")


class SkillSummaryOut(Schema):
    name: str
    version: str
    ref: str = Field(description="name@version, what a delegation's `skill` field takes")
    description: str
    subagent_type: str | None
    capabilities: list[str]
    unknown_capabilities: list[str] = Field(description="Declared but unknown to Handoff: kept, "
                                                        "no tool grants them")
    approval_capabilities: list[str] = Field(description="Capabilities whose every use waits "
                                                         "for a person")
    requires_approval: bool
    tags: list[str]
    is_latest: bool
    source: str
    created_at: datetime
    html_url: str
    api_url: str


class SkillFileOut(Schema):
    path: str
    size: int


class SkillDetailOut(SkillSummaryOut):
    entry_point: str
    entry_kind: str = Field(description="instructions, python or script")
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    instructions: str
    warnings: list[str]
    files: list[SkillFileOut]
    created_by: str | None
    content_hash: str
    manifest_url: str
    bundle_url: str


class SkillVersionOut(Schema):
    version: str
    is_latest: bool
    created_at: datetime
    api_url: str


class SkillWithVersionsOut(SkillDetailOut):
    versions: list[SkillVersionOut] = Field(description="Every version, highest first (semver)")


class RemoteSkillOut(Schema):
    ref: str = Field(description="<agent>/<skill>, what a delegation's `skill` field takes")
    agent: str = Field(description="The remote A2A agent's name")
    skill: str = Field(description="The skill's id on that agent")
    card_host: str = Field(description="Where the agent runs (host and port of its card URL)")
    capability: str = Field(description="The capability a run needs (in `capabilities`) to use it")
    requires_approval: bool = Field(description="Whether that capability waits for a person first")
    price_per_call_usd: float = Field(description="What one message to it costs (0: not declared)")


class SkillPageOut(Schema):
    items: list[SkillSummaryOut]
    total: int
    page: int
    page_size: int
    pages: int
    remote_skills: list[RemoteSkillOut] = Field(
        default_factory=list, description="Skills of the enabled remote A2A agents matching the same "
                                          "filters; not paginated (the same on every page)")


class ImportOut(Schema):
    created: bool = Field(description="false: this exact version was already in the registry")
    warnings: list[str]
    skill: SkillDetailOut


class CatalogQuery(Schema):
    q: str = Field("", max_length=200, description="Words to find in name, description or tags")
    capability: str = Field("", max_length=100)
    subagent_type: SubagentTypeName | None = None
    requires_approval: bool | None = None
    tag: str = Field("", max_length=100)
    page: int = Field(1, ge=1, le=MAX_PAGE)
    page_size: int = Field(20, ge=1, le=100)


# -- mapping rows to schemas ----------------------------------------------------------------

def _api_url(skill: Skill) -> str:
    return reverse("api:skill_version", args=[skill.name, skill.version])


def _summary(skill: Skill) -> dict[str, Any]:
    return {
        "name": skill.name, "version": skill.version, "ref": skill.ref,
        "description": skill.description, "subagent_type": skill.subagent_type or None,
        "capabilities": skill.capabilities, "unknown_capabilities": skill.unknown_capabilities,
        "approval_capabilities": skill.approval_capabilities,
        "requires_approval": skill.requires_approval, "tags": skill.tags,
        "is_latest": skill.is_latest, "source": skill.source, "created_at": skill.created_at,
        "html_url": skill.get_absolute_url(), "api_url": _api_url(skill),
    }


def _detail(skill: Skill) -> dict[str, Any]:
    return {
        **_summary(skill), "entry_point": skill.entry_point, "entry_kind": skill.entry_kind,
        "input_schema": skill.input_schema, "output_schema": skill.output_schema,
        "instructions": skill.instructions, "warnings": skill.warnings,
        "files": [{"path": row.path, "size": row.size} for row in skill.files.defer("content")],
        "created_by": skill.created_by.get_username() if skill.created_by else None,
        "content_hash": skill.content_hash,
        "manifest_url": reverse("api:skill_manifest", args=[skill.name, skill.version]),
        "bundle_url": reverse("api:skill_bundle", args=[skill.name, skill.version]),
    }


def _get_skill(name: str, version: str | None = None) -> Skill:
    skill = Skill.objects.select_related("created_by").resolve(
        f"{name}@{version}" if version else name)
    if skill is None:
        raise Http404(f"No skill {name}@{version} in the registry." if version
                      else f"No skill named {name!r} in the registry.")
    return skill


# -- reading --------------------------------------------------------------------------------

@router.get("", response=SkillPageOut, summary="Search the catalog (latest versions)")
def skill_list(request: HttpRequest, filters: Query[CatalogQuery]) -> dict[str, Any]:
    catalog: dict[str, Any] = {"q": filters.q, "capability": filters.capability,
                               "subagent_type": filters.subagent_type or "",
                               "requires_approval": filters.requires_approval, "tag": filters.tag}
    # A page past the end is empty rather than an error, like any paginated listing.
    page = Skill.objects.catalog(**catalog).paginate(filters.page, filters.page_size, clamp=False)
    return {"items": [_summary(skill) for skill in page.object_list],
            "total": page.paginator.count, "page": filters.page, "page_size": filters.page_size,
            "pages": page.paginator.num_pages,
            "remote_skills": RemoteAgent.objects.listings(**catalog)}   # read as RemoteSkillOut


@router.get("/{name}", response=SkillWithVersionsOut, url_name="skill_latest",
            summary="A skill's latest version, with the list of its versions")
def skill_latest(request: HttpRequest, name: str) -> dict[str, Any]:
    skill = _get_skill(name)
    versions = [{"version": row.version, "is_latest": row.is_latest, "created_at": row.created_at,
                 "api_url": _api_url(row)} for row in Skill.objects.versions_of(name)]
    return {**_detail(skill), "versions": versions}


@router.get("/{name}/{version}", response=SkillDetailOut, url_name="skill_version",
            summary="One version of a skill")
def skill_version(request: HttpRequest, name: str, version: str) -> dict[str, Any]:
    return _detail(_get_skill(name, version))


@router.get("/{name}/{version}/manifest", url_name="skill_manifest",
            summary="Export manifest.json (normalized schemas)",
            openapi_extra={"responses": {200: {"description": "manifest.json", "content": {
                "application/json": {"schema": {"type": "object"}}}}}})
def skill_manifest(request: HttpRequest, name: str, version: str) -> FileResponse:
    skill = _get_skill(name, version)
    return FileResponse(io.BytesIO(skill.export_manifest_json().encode()),
                        content_type="application/json", filename="manifest.json")


@router.get("/{name}/{version}/bundle", url_name="skill_bundle",
            summary="Export the bundle: manifest.json, instruction file and other files, zipped",
            openapi_extra={"responses": {200: {"description": "the bundle", "content": {
                "application/zip": {"schema": {"type": "string", "format": "binary"}}}}}})
def skill_bundle(request: HttpRequest, name: str, version: str) -> FileResponse:
    skill = _get_skill(name, version)
    return FileResponse(io.BytesIO(skill.export_bundle_zip()), as_attachment=True,
                        content_type="application/zip", filename=skill.bundle_filename)


# -- importing ------------------------------------------------------------------------------

def _request_source(request: HttpRequest) -> bytes:
    """The manifest JSON or bundle zip sent: the raw body, or the file of a multipart form
    (empty when there is none)."""
    check_upload_size(int(request.META.get("CONTENT_LENGTH") or 0), "the request body")
    if request.content_type == "multipart/form-data":
        # The field is meant to be called "file"; take whatever single file was sent.
        field_name = "file" if "file" in request.FILES else next(iter(request.FILES), None)
        upload = request.FILES.get(field_name) if field_name else None
        if upload is None:
            return b""
        check_upload_size(upload.size or 0, upload.name or "the file")
        return upload.read()
    # Read at most one byte past the limit: a body without Content-Length is bounded too.
    data = request.read(upload_limit() + 1)
    check_upload_size(len(data), "the request body")
    return data


@router.post(
    "", response={200: ImportOut, 201: ImportOut, 403: ErrorOut, 409: ErrorOut, 413: ErrorOut,
                  422: InvalidOut},
    summary="Import a skill: manifest JSON, a bundle zip, or a multipart upload (field `file`)",
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/json": {"schema": {"type": "object", "description": "manifest.json"}},
        "application/zip": {"schema": {"type": "string", "format": "binary"}},
        "multipart/form-data": {"schema": {"type": "object", "properties": {
            "file": {"type": "string", "format": "binary"}}}},
    }}},
)
def skill_create(request: HttpRequest) -> Status[dict[str, Any]]:
    """201 with the new version; 200 when this exact version was already there; 409 when
    the same name@version holds different content; 413 over the upload limit; 422 with
    every problem of an invalid manifest."""
    if not can_compose(request.user):
        raise PermissionDenied(IMPORT_REFUSED)
    try:
        source = _request_source(request)
        if not source.strip():
            return Status(422, {"detail": "The request body is empty: send manifest.json as the "
                                          "JSON body, a bundle .zip, or a multipart form with a "
                                          "`file`."})
        result = skill_import(source=source, origin=SkillSource.API, created_by=request.user)
    except RegistryError as error:
        return Status(_STATUS_FOR[error.code], {"detail": error.message})
    return Status(201 if result.created else 200, {
        "created": result.created, "warnings": result.warnings, "skill": _detail(result.skill)})
