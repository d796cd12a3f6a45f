"""Runs imported from another instance: the import page (paste or upload an export), the
read-only page of an imported run, and downloading its export again.

An imported run is a record, not a run here: nothing on these pages starts, cancels or
changes anything. Only the person who imported it, and staff, see it (404 for anyone else,
as for a run). The document format and its checks are :mod:`delegations.runs.export`'s.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from delegations.models import ImportedRun
from delegations.protocol.budgets import CONSUMABLE_AXES
from delegations.protocol.events import EventType
from delegations.run_pages import display
from delegations.run_pages import snapshot as run_snapshot
from delegations.run_pages.failure import failure_headline
from delegations.run_pages.forms import RunImportForm
from delegations.runs.export import (
    EventRecord,
    ExportError,
    RunExport,
    RunRecord,
    export_download,
    import_limit,
    run_import,
    stored_export,
)

TIMELINE_PAGE_SIZE = 500      # timeline events per page of an imported run
STREAM_CHAR_LIMIT = 20_000    # the tail of a run's streamed text the page shows
RECENT_IMPORTS = 20           # earlier imports listed on the import page


def _get_imported_for_user(request: HttpRequest, imported_id: int) -> ImportedRun:
    imported = ImportedRun.objects.visible_to(request.user).filter(pk=imported_id).first()
    if imported is None:
        raise Http404(f"No imported run {imported_id} that you can see.")
    return imported


# -- importing -----------------------------------------------------------------------------

@require_http_methods(["GET", "POST"])
def run_import_view(request: HttpRequest) -> HttpResponse:
    form = RunImportForm(request.POST, request.FILES) if request.method == "POST" else RunImportForm()
    problems: list[str] = []
    if request.method == "POST" and form.is_valid():
        try:
            imported = run_import(source=form.source(), owner=request.user)
        except ExportError as error:
            problems = error.problems
        else:
            messages.success(request, f"Imported “{imported.label}”. It is read-only, and only "
                                      "you (and staff) can see it.")
            return redirect(imported)
    return render(request, "delegations/runs/import.html", {
        "form": form, "problems": problems, "limit_bytes": import_limit(),
        "recent": ImportedRun.objects.filter(owner_id=request.user.pk)[:RECENT_IMPORTS],
    }, status=422 if request.method == "POST" else 200)


# -- reading an imported run -----------------------------------------------------------------

def _tree(export: RunExport, current_id: str | None, counts: Counter[str]) -> dict[str, Any]:
    children: dict[str, list[RunRecord]] = {}
    for record in export.runs:
        if record.parent is not None:
            children.setdefault(record.parent, []).append(record)

    def node(record: RunRecord) -> dict[str, Any]:
        return {"run": record, "tone": display.state_tone(record.state),
                "tokens": int(_number(record.usage.get("total_tokens"))), "events": counts[record.id],
                "current": record.id == current_id,
                "children": [node(child) for child in children.get(record.id, [])]}
    return node(export.run)


def _number(value: Any) -> float:
    """A figure from the file, 0 when it is none (the file was made elsewhere)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _timeline_entry(event: EventRecord, names: dict[str, str]) -> dict[str, Any]:
    wire = {"seq": event.seq, "type": str(event.type), "data": event.data,
            "ts": datetime.fromtimestamp(event.ts, tz=UTC)}
    try:
        item = run_snapshot.timeline_item(wire, {})
    except (TypeError, ValueError):
        # data this instance would never have written (a figure that is no number): shown as it is
        item = run_snapshot.TimelineItem(seq=event.seq, ts=wire["ts"], type=str(event.type),
                                         title=str(event.type), body_json=display.pretty_json(event.data),
                                         json_label="Data")
    # links to a subagent point at it in this document, not at a run of this instance
    linked = item.link_run if item.link_run in names else ""
    return {"item": item, "run_id": event.run_id, "run_name": names[event.run_id], "linked": linked}


def _stream(export: RunExport, run_id: str) -> dict[str, Any]:
    text = "".join(str(event.data.get("delta") or "") for event in export.events
                   if event.run_id == run_id and event.type == EventType.TEXT)
    trimmed = len(text) > STREAM_CHAR_LIMIT
    return {"text": text[-STREAM_CHAR_LIMIT:] if trimmed else text, "trimmed": trimmed}


def _budget(record: RunRecord) -> list[dict[str, str]]:
    """Used / limit on each axis the run had a limit on."""
    rows = []
    for axis, measure in CONSUMABLE_AXES:
        limit = record.budget.get(axis)
        if isinstance(limit, int | float) and not isinstance(limit, bool):
            rows.append({"label": display.AXIS_LABELS[axis],
                         "used": display.budget_amount(axis, _number(record.usage.get(measure))),
                         "limit": display.budget_amount(axis, float(limit))})
    return rows


@require_GET
def run_imported(request: HttpRequest, imported_id: int) -> HttpResponse:
    """The imported run read-only: the top run, or the one ``?run=<id>`` selects (and the
    timeline of only its events); the whole tree's timeline otherwise."""
    imported = _get_imported_for_user(request, imported_id)
    export = stored_export(imported)
    selected = export.record_of(request.GET.get("run", ""))
    shown = selected or export.run
    names = {record.id: record.display_label for record in export.runs}
    timeline_events = [event for event in export.events if event.type != EventType.TEXT
                       and (selected is None or event.run_id == selected.id)]
    page = Paginator(timeline_events, TIMELINE_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "delegations/runs/imported.html", {
        "imported": imported, "export": export, "record": shown, "selected": selected,
        "tree": _tree(export, selected.id if selected else None, Counter(
            event.run_id for event in export.events if event.type != EventType.TEXT)),
        "subagent_count": len(export.runs) - 1, "event_count": len(export.events),
        "timeline": [_timeline_entry(event, names) for event in page.object_list], "page": page,
        "stream": _stream(export, shown.id), "result": run_snapshot.result_view(shown.result),
        "criteria": run_snapshot.criteria_view(shown.criteria_report), "budget": _budget(shown),
        "error": shown.error, "packet_json": display.pretty_json(shown.packet),
        "headline": failure_headline(shown.state, shown.error, shown.result, skill=shown.skill,
                                     findings=shown.findings),
        "duration_s": ((shown.finished_at - shown.started_at).total_seconds()
                       if shown.started_at and shown.finished_at else None),
    })


@require_GET
def run_imported_download(request: HttpRequest, imported_id: int) -> FileResponse:
    """The export as it was imported (after its checks), to pass on again."""
    imported = _get_imported_for_user(request, imported_id)
    return export_download(imported.document, label=imported.label, run_id=imported.source_run_id)
