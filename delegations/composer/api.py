"""REST routes for saved delegations (``/api/delegations``): lint, list, create, read,
save, delete, their versions and diffs, and starting a run.

A user sees and edits the delegations they own; superusers see and edit all. Anyone
else's answers 404 (its existence is not revealed). Saving, deleting and running need the
composer role (403). The services' refusals (:class:`DelegationError`) answer with their
status and ``{"detail": ..., **details}``; a stale save answers 409 with who saved since
and a diff.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from django.conf import settings
from django.db.models import Count
from django.http import Http404, HttpRequest
from ninja import Query, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import Field

from delegations.api_lists import PAGE_SIZE, iso, page_bounds
from delegations.composer.services import (
    NAME_MAX,
    POSITION_MAX,
    DelegationError,
    delegation_create,
    delegation_delete,
    delegation_start_run,
    delegation_update,
    version_diff,
)
from delegations.models import Delegation
from delegations.protocol import text_limits
from delegations.request_bodies import RequestBody
from delegations.runs.api import AdapterIn, RunDetailOut, run_detail
from delegations.runs.lint import lint_as_run

router = Router(tags=["delegations"])

ID_MAX = 2**63 - 1

EXAMPLE_PACKET: dict[str, Any] = {
    "goal": "Compare three caching options and answer with the best one",
    "subagent_type": "researcher",
    "instruction_set": "Compare the options; return JSON with your answer.",
    "input_data": {"options": ["redis", "memcached", "in-process"]},
    "expected_output_schema": {"answer": "string"},
    "success_criteria": ["JSON is schema-valid"],
    "budget": {"max_model_calls": 20},
}


# -- schemas ---------------------------------------------------------------------------------

class DelegationIn(RequestBody):
    name: str = Field(min_length=1, max_length=NAME_MAX, pattern=r"\S", description="1-200 characters.",
                      examples=["Caching study"])
    packet: dict[str, Any] = Field(
        description="A hand-off packet in any dialect Handoff reads, stored as composed. It must "
                    "parse; lint errors are allowed in a draft (they only block running it).",
        examples=[EXAMPLE_PACKET])
    parent: Annotated[int, Field(ge=1, le=ID_MAX)] | None = Field(
        default=None, description="The id of one of your delegations to nest this under; null for a "
                                  "top-level one.")
    template: bool = Field(default=False, description="A starting point to copy rather than run.")
    position: int | None = Field(default=None, ge=0, le=POSITION_MAX,
                                 description="Order among its siblings; default: after the last.")


class DelegationUpdateIn(RequestBody):
    base_version: int = Field(description="The version your edit started from; a save on top of "
                                          "an older one than the current is refused with 409.",
                              examples=[1])
    name: str | None = Field(default=None, min_length=1, max_length=NAME_MAX, pattern=r"\S",
                             description="Left out: unchanged.")
    packet: dict[str, Any] | None = Field(default=None, description="Left out: unchanged.")
    template: bool | None = Field(default=None, description="Left out: unchanged.")
    parent: Annotated[int, Field(ge=1, le=ID_MAX)] | None = Field(
        default=None, description="Left out: unchanged; null: move to the top level; an id: move under it.")
    position: int | None = Field(default=None, ge=0, le=POSITION_MAX,
                                 description="Left out: unchanged (or after the last sibling when moved).")


class DelegationRunIn(RequestBody):
    adapter: AdapterIn | None = Field(default=None, description="Default: HANDOFF_DEFAULT_ADAPTER.",
                                      examples=[{"name": "scripted", "config": {}}])


class DelegationChildOut(Schema):
    id: int
    name: str
    position: int
    template: bool


class DelegationSummaryOut(Schema):
    id: int
    name: str
    parent: int | None
    position: int
    template: bool
    version: int
    owner: str | None
    updated_by: str | None
    children_count: int
    created_at: str
    updated_at: str


class DelegationOut(DelegationSummaryOut):
    description: str
    packet: dict[str, Any] = Field(description="As composed (any dialect).")
    children: list[DelegationChildOut] = Field(description="In order of position.")


class DelegationPageOut(Schema):
    count: int
    page: int
    pages: int
    page_size: int
    results: list[DelegationSummaryOut]


class DelegationVersionOut(Schema):
    number: int
    name: str
    packet: dict[str, Any]
    saved_by: str | None
    saved_at: str


class VersionsOut(Schema):
    delegation_id: int
    current_version: int
    versions: list[DelegationVersionOut] = Field(description="Oldest first.")


class DiffOut(Schema):
    a: int
    b: int
    diff: str = Field(description='Unified diff of the canonical JSON packet, labelled "version a" '
                                  'and "version b"; empty when they are the same.')


class StaleOut(Schema):
    detail: str
    current_version: int
    saved_by: str = Field(description="Who saved the current version (empty when unknown).")
    saved_at: str
    diff: str = Field(description="What changed from your base version to the current one.")


class ErrorOut(Schema):
    detail: Any


class LintOut(Schema):
    findings: list[dict[str, Any]] = Field(description="Lint's findings: code, severity, field, message.")
    problems: list[dict[str, Any]] = Field(description="Parse, skill and input problems: field, message.")
    review_depth: str | None
    review_depth_reason: str | None
    errors: int
    runnable: bool
    packet: dict[str, Any] | None = Field(description="The canonical packet (skill merged) when it parses.")


class DelegationFilters(Schema):
    q: str | None = Field(default=None, description="Name contains (any case).")
    owner: Literal["mine", "all"] = Field(default="mine", description="all: everyone's (superusers; "
                                                                      "for others the same as mine).")
    template: bool | None = None
    parent: Literal["root"] | Annotated[int, Field(ge=1, le=ID_MAX)] | None = Field(
        default=None, description="root: top-level only; an id: its children (in order of position).")
    page: int = Field(default=1, ge=1)
    page_size: int = Field(default=PAGE_SIZE, ge=1, le=200)


# -- mapping rows to responses -----------------------------------------------------------------

def _username(user: Any) -> str | None:
    return user.get_username() if user is not None else None


def delegation_summary(delegation: Delegation) -> dict[str, Any]:
    children_count = getattr(delegation, "children_count", None)
    return {
        "id": delegation.pk, "name": delegation.name, "parent": delegation.parent_id,
        "position": delegation.position, "template": delegation.template,
        "version": delegation.version, "owner": _username(delegation.owner),
        "updated_by": _username(delegation.updated_by),
        "children_count": delegation.children.count() if children_count is None else children_count,
        "created_at": iso(delegation.created_at), "updated_at": iso(delegation.updated_at),
    }


def delegation_detail(delegation: Delegation) -> dict[str, Any]:
    children = [{"id": child.pk, "name": child.name, "position": child.position, "template": child.template}
                for child in delegation.children.order_by("position", "pk")]
    return {**delegation_summary(delegation), "description": delegation.description,
            "packet": delegation.packet_dict(), "children": children}


def _visible(request: HttpRequest, delegation_id: int) -> Delegation:
    delegation = (Delegation.objects.visible_to(request.user).select_related("owner", "updated_by")
                  .filter(pk=delegation_id).first())
    if delegation is None:
        raise Http404(f"No delegation {delegation_id} that you can see.")
    return delegation


def _parent(request: HttpRequest, parent_id: int | None) -> Delegation | None:
    if parent_id is None:
        return None
    parent = Delegation.objects.visible_to(request.user).filter(pk=parent_id).first()
    if parent is None:
        raise DelegationError(f"No delegation {parent_id} that you can see to nest this under.",
                              status=422, details={"field": "parent"})
    return parent


# -- lint --------------------------------------------------------------------------------------

@router.post("/lint", response={200: LintOut, 422: ErrorOut}, summary="Lint a packet",
             openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                 "schema": {"type": "object", "description":
                            "The packet itself, or {\"packet\": {...}, \"parent\": {...}} to lint a "
                            "child against its parent."},
                 "examples": {"packet": {"value": EXAMPLE_PACKET},
                              "child": {"value": {"packet": EXAMPLE_PACKET, "parent": EXAMPLE_PACKET}}},
             }}}})
def lint(request: HttpRequest) -> dict[str, Any]:
    """What the runner will say about a packet, without saving or running it. The body is
    the packet, or ``{"packet": {...}, "parent": {...}}`` (only those keys, ``packet`` an
    object) for a child, enabling the checks that compare it with its parent. Always 200
    with the report, even when it holds errors or the packet does not parse; 422 only for
    a body that is not a JSON object."""
    try:
        body = text_limits.loads(request.body, "body")
    except ValueError as exc:
        raise HttpError(422, f"The body is not valid JSON ({exc}); send the packet as a JSON object.") from None
    if not isinstance(body, dict):
        raise HttpError(422, f"The body must be a JSON object (the packet), not JSON {type(body).__name__}.")
    wrapped = isinstance(body.get("packet"), dict) and set(body) <= {"packet", "parent"}
    if not wrapped:
        return lint_as_run(body).as_dict()
    parent = body.get("parent")
    if parent is not None and not isinstance(parent, dict):
        raise HttpError(422, "'parent' must be a packet (a JSON object) or null.")
    return lint_as_run(body["packet"], parent=parent).as_dict()


# -- delegations -------------------------------------------------------------------------------

@router.get("", response=DelegationPageOut, summary="List delegations")
def list_delegations(request: HttpRequest, filters: Query[DelegationFilters]) -> dict[str, Any]:
    """Newest saved first; with ``parent``, in order of position."""
    delegations = (Delegation.objects.visible_to(request.user).select_related("owner", "updated_by")
                   .annotate(children_count=Count("children")))
    if filters.owner == "mine":
        delegations = delegations.filter(owner_id=request.user.pk)
    if filters.q:
        delegations = delegations.filter(name__icontains=filters.q)
    if filters.template is not None:
        delegations = delegations.filter(template=filters.template)
    order = ["-updated_at", "pk"]
    if filters.parent == "root":
        delegations = delegations.filter(parent__isnull=True)
    elif filters.parent is not None:
        delegations = delegations.filter(parent_id=filters.parent)
        order = ["position", "pk"]
    total = delegations.count()
    pages, start, end = page_bounds(total, filters.page, filters.page_size)
    return {"count": total, "page": filters.page, "pages": pages, "page_size": filters.page_size,
            "results": [delegation_summary(d) for d in delegations.order_by(*order)[start:end]]}


@router.post("", response={201: DelegationOut, 400: ErrorOut, 403: ErrorOut, 422: ErrorOut},
             summary="Save a new delegation")
def create_delegation(request: HttpRequest, body: DelegationIn) -> Status[dict[str, Any]]:
    """201 with the delegation at version 1. 422 when the packet does not parse (with its
    problems); 400 for a bad name or a parent that is not one of yours."""
    delegation = delegation_create(owner=request.user, name=body.name, packet=body.packet,
                                   parent=_parent(request, body.parent), template=body.template,
                                   position=body.position)
    return Status(201, delegation_detail(delegation))


@router.get("/{delegation_id}", response=DelegationOut, summary="One delegation")
def get_delegation(request: HttpRequest, delegation_id: int) -> dict[str, Any]:
    return delegation_detail(_visible(request, delegation_id))


@router.put("/{delegation_id}", response={200: DelegationOut, 400: ErrorOut, 403: ErrorOut,
                                          404: ErrorOut, 409: StaleOut, 422: ErrorOut},
            summary="Save changes on top of a version")
def update_delegation(request: HttpRequest, delegation_id: int, body: DelegationUpdateIn) -> dict[str, Any]:
    """Fields left out stay as they are. 409 when someone saved after ``base_version``:
    nothing is overwritten, and the answer says who saved, when, and what they changed."""
    delegation = _visible(request, delegation_id)
    moved = "parent" in body.model_fields_set
    changes: dict[str, Any] = {"parent": _parent(request, body.parent)} if moved else {}
    delegation = delegation_update(delegation=delegation, user=request.user, base_version=body.base_version,
                                   name=body.name, packet=body.packet, template=body.template,
                                   position=body.position, **changes)
    return delegation_detail(delegation)


@router.delete("/{delegation_id}", response={204: None, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut},
               summary="Delete a delegation and its subtree")
def delete_delegation(request: HttpRequest, delegation_id: int,
                      base_version: int | None = Query(None, ge=1, le=ID_MAX, description=(
                          "The version you are deleting; when someone saved since, nothing is deleted "
                          "and the answer is 409 with who saved and a diff."))) -> Status[None]:
    """Runs made from them stay, with the packets they were given."""
    delegation_delete(delegation=_visible(request, delegation_id), user=request.user, base_version=base_version)
    return Status(204, None)


# -- history -------------------------------------------------------------------------------------

@router.get("/{delegation_id}/versions", response=VersionsOut, summary="Every saved version")
def list_versions(request: HttpRequest, delegation_id: int) -> dict[str, Any]:
    delegation = _visible(request, delegation_id)
    versions = [{"number": v.number, "name": v.name, "packet": v.packet if isinstance(v.packet, dict) else {},
                 "saved_by": _username(v.saved_by), "saved_at": iso(v.saved_at)}
                for v in delegation.versions.select_related("saved_by")]
    return {"delegation_id": delegation.pk, "current_version": delegation.version, "versions": versions}


@router.get("/{delegation_id}/diff", response={200: DiffOut, 404: ErrorOut},
            summary="What changed between two versions")
def diff_versions(request: HttpRequest, delegation_id: int, a: int = Query(..., ge=1),
                  b: int = Query(..., ge=1)) -> dict[str, Any]:
    """404 for a version the delegation never had."""
    return {"a": a, "b": b, "diff": version_diff(_visible(request, delegation_id), a, b)}


# -- running -------------------------------------------------------------------------------------

@router.post("/{delegation_id}/runs", response={201: RunDetailOut, 403: ErrorOut, 404: ErrorOut,
                                                422: ErrorOut},
             summary="Run a delegation")
def start_run(request: HttpRequest, delegation_id: int, body: DelegationRunIn) -> Status[dict[str, Any]]:
    """201 with the run, shaped as ``GET /api/runs/{id}`` returns it, of the packet as saved
    now. 422 when the packet or adapter cannot be used; a packet with lint errors becomes a
    REJECTED run whose findings are in the response."""
    delegation = _visible(request, delegation_id)
    adapter = body.adapter
    run = delegation_start_run(delegation=delegation, user=request.user,
                               adapter=adapter.name if adapter else settings.HANDOFF_DEFAULT_ADAPTER,
                               config=adapter.config if adapter else None)
    return Status(201, run_detail(run))
