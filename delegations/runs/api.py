"""REST routes for runs (``/api/runs``) and result parsing (``/api/protocol``).

Visibility: a user sees the runs they own and every run in those trees; staff see every
run. A run someone may not see answers 404 (its existence is not revealed); acting on a
visible run answers 403 when the role is missing (creating and retrying need the
composer role). A request that conflicts with the run's state raises ``RunError``, which
the API answers with its status (409 or 422) and message.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from ninja import Header, Query, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import Field

from delegations.accounts.roles import can_compose, visible_runs
from delegations.api_lists import PAGE_SIZE, iso, page_bounds
from delegations.live.notices import release_connection, wait_for
from delegations.models import Delegation, Run, RunEvent
from delegations.protocol import text_limits
from delegations.protocol.errors import ErrorCode, ProtocolError
from delegations.protocol.lifecycle import A2A_STATE, TERMINAL_STATES, RunState
from delegations.protocol.results import parse_result
from delegations.request_bodies import RequestBody
from delegations.runs.export import (
    ExportError,
    check_size,
    export_download,
    import_limit,
    run_export,
    run_import,
)
from delegations.runs.idempotency import KEY_MAX_CHARS, KeyReused, StillStarting, once
from delegations.runs.workflows import run_cancel, run_create, run_retry, run_send_message

router = Router(tags=["runs"])
protocol_router = Router(tags=["protocol"])

EVENTS_LIMIT = 1000


# -- schemas --------------------------------------------------------------------------------

class AdapterIn(RequestBody):
    name: str = Field(description="local, openai, anthropic or scripted")
    config: dict[str, Any] = Field(default_factory=dict,
                                   description="Adapter settings; API keys come from the server's "
                                               "environment, never from here.")


class RunCreateIn(RequestBody):
    packet: dict[str, Any] | str | None = Field(
        default=None, description="A hand-off packet in any dialect Handoff reads (object or JSON text); see docs/protocol.md.")
    delegation_id: int | None = Field(default=None, description="Run a saved delegation instead.")
    adapter: AdapterIn | None = Field(default=None, description="Default: HANDOFF_DEFAULT_ADAPTER.")


class MessageIn(RequestBody):
    text: str = Field(description=f"What the subagent should know; at most "
                                  f"{text_limits.MAX_MESSAGE_CHARS:,} characters.")


class RunSummaryOut(Schema):
    id: str
    state: str
    a2a_state: str
    label: str
    goal: str
    subagent_type: str
    skill: str
    adapter: dict[str, Any]
    session_key: str
    owner: str | None
    parent: str | None
    root: str
    depth: int
    attempt: int
    usage: dict[str, Any]
    created_at: str
    started_at: str | None
    finished_at: str | None
    archived_at: str | None


class RunChildOut(Schema):
    id: str
    label: str
    state: str
    depth: int


class RunDetailOut(RunSummaryOut):
    input_hash: str
    packet: dict[str, Any]
    budget: dict[str, Any]
    capabilities: list[str]
    timeout_s: float | None
    cleanup: str
    result: dict[str, Any] | None
    criteria_report: dict[str, Any] | None
    findings: list[dict[str, Any]]
    error: dict[str, Any] | None
    previous_failure: dict[str, Any] | None
    retry_of: str | None
    allocated_at: str | None
    cancel_requested: bool
    last_seq: int
    children: list[RunChildOut]
    websocket: str


class RunPageOut(Schema):
    count: int
    page: int
    pages: int
    page_size: int
    results: list[RunSummaryOut]


class EventOut(Schema):
    run_id: str
    seq: int
    type: str
    ts: float
    data: dict[str, Any]


class EventsOut(Schema):
    run_id: str
    last_seq: int
    more: bool
    events: list[EventOut]


class MessageOut(Schema):
    id: int
    run_id: str
    text: str
    queued: bool
    delivered: bool


class RunFilters(Schema):
    state: str | None = Field(default=None, description=(
        "One state or several, comma-separated, in any case: " + ", ".join(RunState) + "."))
    skill: str | None = None
    owner: str | None = None
    root_only: bool = False
    archived: bool = Field(default=False, description="Include archived runs.")
    page: int = Field(default=1, ge=1)
    page_size: int = Field(default=PAGE_SIZE, ge=1, le=200)


# -- mapping rows to responses -----------------------------------------------------------------

def run_summary(run: Run) -> dict[str, Any]:
    return {
        "id": run.pk, "state": run.state, "a2a_state": A2A_STATE[RunState(run.state)],
        "label": run.label, "goal": run.goal, "subagent_type": run.subagent_type,
        "skill": run.skill, "adapter": {"name": run.adapter_name, "config": run.adapter_config},
        "session_key": run.session_key,
        "owner": run.owner.get_username() if run.owner_id and run.owner else None,
        "parent": run.parent_id, "root": run.root_run_id, "depth": run.depth,
        "attempt": run.attempt, "usage": run.usage or {}, "created_at": iso(run.created_at),
        "started_at": iso(run.started_at), "finished_at": iso(run.finished_at),
        "archived_at": iso(run.archived_at),
    }


def run_detail(run: Run, *, new: bool = False) -> dict[str, Any]:
    """``new``: a run just created, which has no children yet (one query fewer)."""
    children = [] if new else [dict(zip(("id", "label", "state", "depth"), child, strict=True))
                               for child in Run.objects.children_of(run.pk)]
    return {
        **run_summary(run), "input_hash": run.input_hash, "packet": run.packet,
        "budget": run.budget or {}, "capabilities": run.capabilities or [],
        "timeout_s": run.timeout_s, "cleanup": run.cleanup, "result": run.result,
        "criteria_report": run.criteria_report, "findings": run.findings or [],
        "error": run.error, "previous_failure": run.previous_failure, "retry_of": run.retry_of_id,
        "allocated_at": iso(run.allocated_at),
        "cancel_requested": run.cancel_requested_at is not None, "last_seq": run.last_seq,
        "children": children, "websocket": f"/ws/runs/{run.pk}/",
    }


def _visible_run(request: HttpRequest, run_id: str, *, to_act: bool = False) -> Run:
    """A run the caller may read; ``to_act`` (cancel, message, retry): one of their own
    (staff: any). Approvers read the runs that ask them, but only to decide."""
    runs = Run.objects.visible_to(request.user) if to_act else visible_runs(request.user)
    run = runs.select_related("owner").filter(pk=run_id).first()
    if run is None:
        raise Http404(f"No run {run_id} that you can see.")
    return run


def _optional_body(request: HttpRequest, field: str) -> str:
    """An optional text field of a body that may be empty, JSON or a plain form post
    (a cancel button needs no body at all)."""
    if not request.body.strip():
        return ""
    if "json" in (request.content_type or ""):
        try:
            data = text_limits.loads(request.body, "body")
        except ValueError as exc:
            raise HttpError(422, f"The body is not valid JSON ({exc}).") from None
    else:
        data = request.POST.dict()
    if not isinstance(data, dict):
        raise HttpError(422, f"The body must be a JSON object (with an optional '{field}').")
    value = data.get(field, "")
    if not isinstance(value, str):
        raise HttpError(422, f"'{field}' must be text.")
    return value


# -- runs -------------------------------------------------------------------------------------

WAIT_MAX_S = 30.0
# a waiting client has its answer once the run ends or waits for a person
ANSWERED_STATES = frozenset({*TERMINAL_STATES, RunState.AWAITING_APPROVAL})


def _wait_parameter() -> Any:
    return Query(0, ge=0, le=WAIT_MAX_S, description=(
        f"Seconds to wait (at most {WAIT_MAX_S:g}) for the run to end or to wait for a person; "
        "the answer comes as soon as it does, so a client need not poll. The wait holds no "
        "server thread."))


@router.post("", response={201: RunDetailOut}, summary="Start a run")
async def create_run(request: HttpRequest, response: HttpResponse, body: RunCreateIn,
                     wait: float = _wait_parameter(),
                     idempotency_key: str | None = Header(None, alias="Idempotency-Key", description=(
                         f"Any text of yours, up to {KEY_MAX_CHARS} characters, kept a day: the same "
                         "key with the same body answers with the run it started (header "
                         "Idempotent-Replayed: true) instead of starting another, so a start whose "
                         "answer was lost can be sent again. The same key with another body is a "
                         "422."))) -> Status[dict[str, Any]]:
    """From a packet (any dialect) or a saved delegation. A packet naming a skill runs
    the registry's version of it, pinned as ``name@version`` in ``skill``. 422 when the
    packet is invalid (with every issue), names a skill or version the registry lacks,
    has input_data the skill's input_schema refuses, or the adapter is unknown or
    misconfigured; a packet with lint errors becomes a REJECTED run whose findings are in
    the response. A W3C ``traceparent`` header makes the run tree continue the caller's
    trace (a malformed one is ignored). With ``wait``, the answer is the run once it ended
    or waits for a person (or as it stands when the wait runs out): one request instead of
    a start and a ``GET ?wait=``."""
    run, detail, replayed = await sync_to_async(_create_run)(request, body, bool(wait), idempotency_key)
    if wait and run.state not in ANSWERED_STATES:
        detail = await _answer(request, run.pk, wait, seen=True)
    if replayed:
        response["Idempotent-Replayed"] = "true"
    return Status(201, detail)


def _create_run(request: HttpRequest, body: RunCreateIn, waits: bool,
                key: str | None) -> tuple[Run, dict[str, Any], bool]:
    if not can_compose(request.user):
        raise PermissionDenied("Starting runs needs the composer role.")
    if (body.packet is None) == (body.delegation_id is None):
        raise HttpError(422, "Send either 'packet' (a hand-off packet) or 'delegation_id' (a saved "
                             "delegation), not both and not neither.")
    delegation = None
    packet: dict[str, Any] | str
    if body.delegation_id is not None:
        delegation = Delegation.objects.filter(pk=body.delegation_id).filter(
            Q(owner=request.user) | Q(owner__isnull=True) if not request.user.is_staff else Q()).first()
        if delegation is None:
            raise Http404(f"No delegation {body.delegation_id} that you can see.")
        packet = delegation.packet_dict()
    else:
        assert body.packet is not None
        packet = body.packet
    adapter = body.adapter

    def start() -> Run:
        return run_create(packet=packet, adapter=adapter.name if adapter else None,
                          config=adapter.config if adapter else None, owner=request.user,
                          delegation=delegation, traceparent=request.headers.get("traceparent", ""))

    run, replayed = (start(), False) if key is None else _once(request, body, key, start)
    detail = run_detail(run, new=not replayed)
    if waits:
        release_connection()
    return run, detail, replayed


def _once(request: HttpRequest, body: RunCreateIn, key: str, start: Callable[[], Run]) -> tuple[Run, bool]:
    """The run this key started (True), or the one ``start`` starts now (False)."""
    if not key.strip() or len(key) > KEY_MAX_CHARS:
        raise HttpError(422, f"The Idempotency-Key header must be 1 to {KEY_MAX_CHARS} characters "
                             f"(it has {len(key.strip())}); send your own key for this start, or "
                             f"leave the header out.")
    try:
        return once(request, "POST /api/runs", body.model_dump(mode="json"), key, start)
    except KeyReused:
        raise HttpError(422, f"The Idempotency-Key {key!r} started an earlier run with another "
                             f"body. Send that body again to get that run back, or use a new key "
                             f"for a new run.") from None
    except StillStarting:
        raise HttpError(409, f"A start with the Idempotency-Key {key!r} is still being handled; "
                             f"send it again in a few seconds to get its run.") from None


@router.get("", response=RunPageOut, summary="List runs")
def list_runs(request: HttpRequest, filters: Query[RunFilters]) -> dict[str, Any]:
    runs = Run.objects.visible_to(request.user).select_related("owner")
    if filters.state:
        wanted = [s.strip().upper() for s in filters.state.split(",") if s.strip()]
        unknown = [s for s in wanted if s not in RunState.__members__]
        if unknown:
            raise HttpError(422, f"Unknown state {', '.join(unknown)}; use one of "
                                 f"{', '.join(RunState)} (comma-separated for several).")
        runs = runs.filter(state__in=wanted)
    if filters.skill:
        runs = runs.filter(Q(skill=filters.skill) | Q(skill__startswith=f"{filters.skill}@"))
    if filters.owner:
        runs = runs.filter(owner__username=filters.owner)
    if filters.root_only:
        runs = runs.filter(parent__isnull=True)
    if not filters.archived:
        runs = runs.filter(archived_at__isnull=True)
    total = runs.count()
    pages, start, end = page_bounds(total, filters.page, filters.page_size)
    return {"count": total, "page": filters.page, "pages": pages, "page_size": filters.page_size,
            "results": [run_summary(run) for run in runs.order_by("-created_at", "pk")[start:end]]}


class ImportedOut(Schema):
    id: int
    url: str = Field(description="The imported run's read-only page.")
    label: str
    runs: int
    events: int


class ImportRefusedOut(Schema):
    detail: str
    problems: list[str] = Field(description="Each thing wrong with the file, in words.")


# before /{run_id}: Django would take "import" for a run id and answer 405
@router.post("/import", response={201: ImportedOut, 413: ImportRefusedOut, 422: ImportRefusedOut},
             summary="Import a run exported from another instance, to read it here",
             openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                 "schema": {"type": "object", "description": "a run export (GET /api/runs/{id}/export)"}}}}})
def import_run(request: HttpRequest) -> Status[dict[str, Any]]:
    """Body: the export as it was downloaded. 201 with its read-only page, which only you (and
    staff) see; 422 with every problem when it is not a whole, gapless run export (nothing is
    stored); 413 over HANDOFF_RUN_IMPORT_LIMIT_BYTES."""
    declared = request.META.get("CONTENT_LENGTH") or "0"
    try:
        check_size(int(declared) if declared.isdigit() else 0)
        # read at most one byte past the limit: a body without Content-Length is bounded too
        imported = run_import(source=request.read(import_limit() + 1), owner=request.user)
    except ExportError as error:
        return Status(error.status, {"detail": error.message, "problems": error.problems})
    document = imported.document
    return Status(201, {"id": imported.pk, "url": imported.get_absolute_url(), "label": imported.label,
                        "runs": len(document["runs"]), "events": len(document["events"])})


def _detail_if_settled(request: HttpRequest, run_id: str, *, anyway: bool,
                       seen: bool = False) -> tuple[bool, dict[str, Any] | None]:
    """Whether a waiting client has its answer (the run ended, or waits for a person), and
    the run as GET returns it then (or ``anyway``). ``seen``: the caller may read the run
    (it started it, or an earlier look showed it), so the row is read by id alone: the
    visibility rule compiled again doubled the cost (1.2 ms against 0.6, this machine,
    2026-12-05), and the row is read raw (:meth:`RunQuerySet.rows`), its owner taken from
    the request when it is the caller. The connection is closed after the look, so a
    client waiting for a run holds none."""
    try:
        run = _seen_run(request, run_id) if seen else _visible_run(request, run_id)
        settled = run.state in ANSWERED_STATES
        return settled, run_detail(run) if settled or anyway else None
    finally:
        release_connection()


def _seen_run(request: HttpRequest, run_id: str) -> Run:
    found = Run.objects.rows([run_id])
    if not found:
        raise Http404(f"No run {run_id}: it was deleted.")
    run = found[0]
    if run.owner_id is not None and run.owner_id == request.user.pk:
        run.owner = request.user
    return run


def _state_of(run_id: str) -> str | None:
    """The run's state alone, a waiting client's look between notices."""
    try:
        return Run.objects.state_of(run_id)
    finally:
        release_connection()


@router.get("/{run_id}", response=RunDetailOut, summary="One run")
async def get_run(request: HttpRequest, run_id: str, wait: float = _wait_parameter()) -> dict[str, Any]:
    return await _answer(request, run_id, wait)


async def _answer(request: HttpRequest, run_id: str, wait: float, *, seen: bool = False) -> dict[str, Any]:
    """The run as GET returns it, once it is settled or ``wait`` seconds ran out. ``seen``:
    the caller may read the run (it just started it)."""
    look = sync_to_async(_detail_if_settled)

    async def settled(heard: bool) -> tuple[bool, dict[str, Any] | None]:
        # the row once the feed told of the run settling; else its state first
        nonlocal seen
        if seen and not heard and await sync_to_async(_state_of)(run_id) not in ANSWERED_STATES:
            return False, None
        answer = await look(request, run_id, anyway=False, seen=seen)
        seen = True   # the first look raised Http404 for a run the caller may not read
        return answer

    detail = await wait_for(run_id, wait, settled, ANSWERED_STATES) if wait else None
    if detail is None:   # no wait, or it ran out: the run as it stands
        detail = (await look(request, run_id, anyway=True))[1]
    assert detail is not None
    return detail


@router.get("/{run_id}/events", response=EventsOut, summary="The run's events after seq N")
def run_events(request: HttpRequest, run_id: str, after: int = Query(0, ge=0),
               limit: int = Query(EVENTS_LIMIT, ge=1, le=EVENTS_LIMIT)) -> dict[str, Any]:
    """The event log is the source of truth: a client that missed live events refills the
    gap from here (``after`` = the last seq it has)."""
    run = _visible_run(request, run_id)
    rows = list(RunEvent.objects.filter(run=run, seq__gt=after).order_by("seq")[:limit + 1])
    return {"run_id": run.pk, "last_seq": run.last_seq, "more": len(rows) > limit,
            "events": [row.as_wire() for row in rows[:limit]]}


def _tree_node(run: Run, children_of: dict[str | None, list[Run]]) -> dict[str, Any]:
    return {"id": run.pk, "label": run.label, "state": run.state, "depth": run.depth,
            "subagent_type": run.subagent_type, "session_key": run.session_key,
            "usage": run.usage or {}, "budget": run.budget or {},
            "started_at": iso(run.started_at), "finished_at": iso(run.finished_at),
            "children": [_tree_node(child, children_of) for child in children_of.get(run.pk, [])]}


@router.get("/{run_id}/tree", summary="The run and its descendants, nested")
def run_tree(request: HttpRequest, run_id: str) -> dict[str, Any]:
    run = _visible_run(request, run_id)
    children_of: dict[str | None, list[Run]] = {}
    for member in run.tree().order_by("depth", "created_at", "pk"):
        children_of.setdefault(member.parent_id, []).append(member)
    return _tree_node(run, children_of)


@router.post("/{run_id}/cancel", response=RunDetailOut, summary="Cancel a run and its descendants")
def cancel_run(request: HttpRequest, run_id: str) -> dict[str, Any]:
    """Optional body ``{"reason": "..."}``. 409 when the run already ended. A run a worker
    executes stops within a second (the response then shows ``cancel_requested``); one
    waiting or parked is cancelled at once."""
    run = _visible_run(request, run_id, to_act=True)
    reason = _optional_body(request, "reason")
    run = run_cancel(run=run, reason=reason or f"Cancelled by {request.user.get_username()}.")
    return run_detail(run)


@router.post("/{run_id}/messages", response={202: MessageOut},
                  summary="Send a message to a running subagent")
def send_message(request: HttpRequest, run_id: str, body: MessageIn) -> Status[dict[str, Any]]:
    """OpenClaw's ``send``: the text reaches the run as a user message at its next turn. 409
    when the run already ended or a cancel was requested for it; 422 when the text is empty
    or too long."""
    run = _visible_run(request, run_id, to_act=True)
    message = run_send_message(run=run, text=body.text, sender=request.user)
    return Status(202, {"id": message.pk, "run_id": run.pk, "text": message.text, "queued": True,
                 "delivered": message.delivered_at is not None})


@router.post("/{run_id}/retry", response={201: RunDetailOut}, summary="A new attempt")
def retry_run(request: HttpRequest, run_id: str) -> Status[dict[str, Any]]:
    """Optional body ``{"fix_instructions": "..."}``. A new run of the same packet with
    attempt + 1 and the agloop previous_failure; a COMPLETE run is RETURNED first. 409
    while the run is still going."""
    run = _visible_run(request, run_id, to_act=True)
    if not can_compose(request.user):
        raise PermissionDenied("Retrying runs needs the composer role.")
    fix_instructions = _optional_body(request, "fix_instructions")
    retried = run_retry(run=run, user=request.user, fix_instructions=fix_instructions)
    return Status(201, run_detail(retried))


# -- protocol helpers -----------------------------------------------------------------------------

@protocol_router.post("/parse-result", summary="Normalize a subagent result (any dialect)")
def parse_result_route(request: HttpRequest) -> dict[str, Any]:
    """Body: the result as JSON (yield_control arguments, a delegation-contract envelope,
    an OpenClaw announce...), ``{"text": "..."}`` holding prose with a RESULT block, or plain text.
    422 with the reason when it is not a usable result."""
    raw = request.body.decode("utf-8", errors="replace")
    source: Any = raw
    if "json" in (request.content_type or ""):
        try:
            source = json.loads(raw) if raw.strip() else ""
        except ValueError as exc:
            raise ProtocolError(ErrorCode.INVALID_RESULT,
                                f"The body is not valid JSON ({exc}); send JSON or text/plain.") from None
        if isinstance(source, dict) and set(source) == {"text"} and isinstance(source["text"], str):
            source = source["text"]
    if not isinstance(source, str | dict):
        raise ProtocolError(ErrorCode.INVALID_RESULT,
                            f"Expected a JSON object or text, got JSON {type(source).__name__}.")
    return parse_result(source).to_dict()


# -- exporting a run (importing one is next to list_runs: its path must come first) ----------

@router.get("/{run_id}/export", url_name="run_export", summary="The run's whole record as one JSON file",
            openapi_extra={"responses": {200: {"description": "the run export (handoff.run-export)",
                                               "content": {"application/json": {"schema": {"type": "object"}}}}}})
def export_run(request: HttpRequest, run_id: str) -> FileResponse:
    """The run, every run of its tree and every event of the tree in stored order, with
    packets, results and criteria reports (``"format": "handoff.run-export", "version": 1``),
    as a download. Adapter configs keep only the model settings. Import it on another
    instance with ``POST /api/runs/import`` or the Import a run page."""
    run = _visible_run(request, run_id)
    return export_download(run_export(run), label=run.label, run_id=run.pk)
