"""A run's whole record as one JSON file, and reading such a file back on another instance.

The document (``"format": "handoff.run-export"``, ``"version": 1``) holds the exported run
(``run``), every run of its tree with its parent (``runs``, the exported run first, as the
top of the tree) and every event of the tree in the order it was stored (``events``, the
same ``{run_id, seq, type, ts, data}`` as the API and the websocket). It is made to leave
the instance: the adapter's config keeps only the settings that say which model ran;
scripts, server paths, hosts and environment variable names stay here (and credentials
are never stored with a run at all, see ``adapters/config_checks.py``).

:func:`read_export` accepts a document only when all of it is usable, so an imported run
(:class:`~delegations.models.ImportedRun`) always shows a whole, gapless record.
"""

from __future__ import annotations

import io
import json
from collections import deque
from datetime import datetime
from typing import Any

from django.conf import settings
from django.http import FileResponse
from django.utils import timezone
from django.utils.text import slugify
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from delegations.models import ImportedRun, Run, RunEvent
from delegations.protocol.events import EventType
from delegations.protocol.lifecycle import RunState
from delegations.protocol.text_limits import parse, value_issue
from delegations.runs.redaction import redactor

FORMAT = "handoff.run-export"
VERSION = 1
# The adapter settings an export shares: they say which model ran and how. Everything else
# in a config (a scripted run's script, model_path, the operator's endpoint; base_url or
# api_key_env in a config stored before endpoints) describes this server, not the run, and
# may name its hosts or files. An import holding anything else is refused, naming the key.
SHARED_CONFIG_KEYS = ("model", "temperature", "max_tokens", "seed", "n_ctx", "tool_choice", "stream")
MAX_PROBLEMS = 20   # the problems an error lists; a broken file can have thousands
# Far deeper than any instance delegates (HANDOFF_MAX_DEPTH, 3 by default); it bounds the
# nesting the imported run's page draws.
MAX_TREE_DEPTH = 32
TOP_KEYS = ("run", "runs", "events")


class ExportError(Exception):
    """A document this server cannot import. ``problems`` says each thing wrong in words,
    ``status`` is 413 for a file over the size limit and 422 for everything else."""

    def __init__(self, problems: list[str], *, status: int = 422) -> None:
        extra = len(problems) - MAX_PROBLEMS
        self.problems = problems[:MAX_PROBLEMS] + ([f"… and {extra} more."] if extra > 0 else [])
        self.status = status
        more = f" (and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''})" if len(problems) > 1 else ""
        self.message = f"The run export was not imported: {problems[0]}{more}"
        super().__init__(self.message)


# -- the document -------------------------------------------------------------------------

class AdapterRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str = Field(default="", max_length=40)
    config: dict[str, Any] = Field(default_factory=dict)

    @field_validator("config")
    @classmethod
    def _model_settings_only(cls, config: dict[str, Any]) -> dict[str, Any]:
        others = [f"'{key}'" for key in config if key not in SHARED_CONFIG_KEYS]
        if others:
            verb = "is not a model setting" if len(others) == 1 else "are not model settings"
            raise ValueError(f"{', '.join(others)} {verb}; an export's adapter config holds "
                             f"only {', '.join(SHARED_CONFIG_KEYS)}")
        return config


class RunRecord(BaseModel):
    """One run of the exported tree, as the instance it ran on recorded it."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(min_length=1, max_length=64)
    parent: str | None = Field(default=None, max_length=64)
    label: str = Field(default="", max_length=200)
    goal: str = ""
    subagent_type: str = Field(default="", max_length=40)
    skill: str = Field(default="", max_length=200)
    state: RunState
    depth: int = Field(default=0, ge=0)
    attempt: int = Field(default=1, ge=1)
    adapter: AdapterRecord = Field(default_factory=AdapterRecord)
    session_key: str = Field(default="", max_length=200)
    input_hash: str = Field(default="", max_length=64)
    packet: dict[str, Any] = Field(default_factory=dict)
    capabilities: list[str] = Field(default_factory=list)
    budget: dict[str, Any] = Field(default_factory=dict)
    usage: dict[str, Any] = Field(default_factory=dict)
    timeout_s: float | None = Field(default=None, allow_inf_nan=False)
    result: dict[str, Any] | None = None
    criteria_report: dict[str, Any] | None = None
    findings: list[dict[str, Any]] = Field(default_factory=list)
    error: dict[str, Any] | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    last_seq: int = Field(default=0, ge=0, description="The seq of the run's last event.")

    @property
    def pk(self) -> str:
        """The run's id under the name the run pages' filters (``run_name``) read."""
        return self.id

    @property
    def display_label(self) -> str:
        """What to call the run: its label, else the start of its goal, else its id."""
        return self.label or (self.goal[:80] + ("…" if len(self.goal) > 80 else "")) or self.id


class EventRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")

    run_id: str = Field(min_length=1, max_length=64)
    seq: int = Field(ge=1)
    type: EventType
    # a time a page can draw (0001 to 9999): 1e20 failed the imported run's page
    ts: float = Field(allow_inf_nan=False, ge=-62135596800, le=253402300799, description="Epoch seconds.")
    data: dict[str, Any] = Field(default_factory=dict)


class RunExport(BaseModel):
    model_config = ConfigDict(extra="ignore")

    format: str
    version: int
    exported_at: datetime | None = None
    run: RunRecord
    runs: list[RunRecord]
    events: list[EventRecord]

    def record_of(self, run_id: str) -> RunRecord | None:
        return next((record for record in self.runs if record.id == run_id), None)


# -- writing ------------------------------------------------------------------------------

def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def shared_config(config: Any) -> dict[str, Any]:
    """The part of an adapter config an export may carry (see SHARED_CONFIG_KEYS)."""
    if not isinstance(config, dict):
        return {}
    return {key: value for key, value in config.items() if key in SHARED_CONFIG_KEYS}


def _run_record(run: Run, *, top_id: str, last_seq: int) -> dict[str, Any]:
    return {
        "id": run.pk, "parent": None if run.pk == top_id else run.parent_id,
        "label": run.label, "goal": run.goal, "subagent_type": run.subagent_type,
        "skill": run.skill, "state": run.state, "depth": run.depth, "attempt": run.attempt,
        "adapter": {"name": run.adapter_name, "config": shared_config(run.adapter_config)},
        "session_key": run.session_key, "input_hash": run.input_hash, "packet": run.packet,
        "capabilities": run.capabilities or [], "budget": run.budget or {},
        "usage": run.usage or {}, "timeout_s": run.timeout_s, "result": run.result,
        "criteria_report": run.criteria_report, "findings": run.findings or [],
        "error": run.error, "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at), "finished_at": _iso(run.finished_at),
        "last_seq": last_seq,
    }


def run_export(run: Run) -> dict[str, Any]:
    """The run, its descendants and all their events, as one JSON-ready document.

    A run still going can be exported: the events are read in one query after the runs,
    and each run's ``last_seq`` is taken from the events exported, so the document is
    whole and gapless even while the log grows (a subagent spawned in between is left out,
    with its events)."""
    members = list(run.tree().order_by("depth", "created_at", "pk"))
    member_ids = {member.pk for member in members}
    events: list[dict[str, Any]] = []
    last_seq: dict[str, int] = {}
    rows = RunEvent.objects.filter(run__in=run.tree()).order_by("pk")
    for row in rows.iterator(chunk_size=2000):
        if row.run_id in member_ids:
            events.append(row.as_wire())
            last_seq[row.run_id] = row.seq
    records = [_run_record(member, top_id=run.pk, last_seq=last_seq.get(member.pk, 0))
               for member in members]
    return {"format": FORMAT, "version": VERSION, "exported_at": timezone.now().isoformat(),
            "run": records[0], "runs": records, "events": events}


def export_json(document: dict[str, Any]) -> bytes:
    return json.dumps(document, ensure_ascii=False).encode("utf-8")


def export_filename(label: str, run_id: str) -> str:
    """``run-<label>.json`` (the label as a file name can hold it), else ``run-<id>.json``."""
    return f"run-{slugify(label)[:80] or run_id}.json"


def export_download(document: dict[str, Any], *, label: str, run_id: str) -> FileResponse:
    """An export as a JSON file to save (the API's, the run page's, an imported run's)."""
    return FileResponse(io.BytesIO(export_json(document)), as_attachment=True,
                        content_type="application/json", filename=export_filename(label, run_id))


# -- reading ------------------------------------------------------------------------------

def import_limit() -> int:
    return int(settings.HANDOFF_RUN_IMPORT_LIMIT_BYTES)


def _size_text(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB" if size >= 1024 * 1024 else f"{size / 1024:.1f} KB"


def check_size(size: int) -> None:
    """ExportError (413) when ``size`` bytes is over the import limit."""
    limit = import_limit()
    if size > limit:
        raise ExportError([f"The file is {_size_text(size)}; run exports of up to "
                           f"{_size_text(limit)} can be imported here "
                           "(HANDOFF_RUN_IMPORT_LIMIT_BYTES)."], status=413)


def _parse(source: bytes | str | dict[str, Any]) -> Any:
    """The document as Python values, refused when it is over the size limit or not JSON."""
    if isinstance(source, dict):
        check_size(len(json.dumps(source, ensure_ascii=False).encode("utf-8")))
    else:
        check_size(len(source.encode("utf-8") if isinstance(source, str) else source))
    if isinstance(source, dict):
        return source
    try:
        text = source.decode("utf-8-sig") if isinstance(source, bytes) else source
        document = parse(text)
    except UnicodeDecodeError as exc:
        raise ExportError([f"The file is not UTF-8 text (byte {exc.start}); a run export is "
                           "JSON."]) from None
    except json.JSONDecodeError as exc:
        raise ExportError([f"The file is not valid JSON: {exc.msg} at line {exc.lineno}, "
                           f"column {exc.colno}."]) from None
    except ValueError as exc:
        raise ExportError([f"The file is not valid JSON: {exc}."]) from None
    if (issue := value_issue(document)) is not None:
        raise ExportError([f"{issue.field or 'The file'}: {issue.message}."])
    return document


def _json_kind(value: Any) -> str:
    kinds = {list: "array", str: "string", bool: "true/false", int: "number", float: "number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def _check_header(document: Any) -> None:
    """Format, version and the top-level keys: what says whether this is a run export at all."""
    if not isinstance(document, dict):
        raise ExportError([f"A run export is a JSON object ({{...}}); this file holds a JSON "
                           f"{_json_kind(document)}."])
    found = document.get("format")
    if found != FORMAT:
        what = "has no \"format\"" if found is None else f"has \"format\": {json.dumps(found)[:80]}"
        raise ExportError([f"This is not a Handoff run export: it {what}, where an export says "
                           f"\"format\": \"{FORMAT}\". Export a run with its page's Export as "
                           "JSON button or GET /api/runs/<id>/export."])
    version = document.get("version")
    if version != VERSION or isinstance(version, bool):
        if isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
            raise ExportError([f"This export is version {version}; this server reads version "
                               f"{VERSION}. Update Handoff here, or export the run again from an "
                               "instance of this version."])
        raise ExportError([f"\"version\" must be {VERSION}, not {json.dumps(version)[:40]}."])
    missing = [key for key in TOP_KEYS if key not in document]
    if missing:
        raise ExportError([f"The export lacks {', '.join(repr(key) for key in missing)}: a run "
                           "export holds the run, its tree's runs and their events."])


def _where(location: tuple[int | str, ...]) -> str:
    """``("runs", 2, "state")`` -> ``runs[2].state``."""
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "the document"


def _schema_problems(error: ValidationError) -> list[str]:
    problems = []
    for issue in error.errors(include_url=False):
        where = _where(tuple(issue["loc"]))
        problems.append(f"{where} is missing." if issue["type"] == "missing"
                        else f"{where}: {issue['msg']}.")
    return problems


def _short(run_id: str) -> str:
    return run_id[:8]


def _tree_problems(export: RunExport) -> list[str]:
    """The runs must form one tree whose top is the exported run."""
    problems: list[str] = []
    known: set[str] = set()
    for index, record in enumerate(export.runs):
        if record.id in known:
            problems.append(f"runs[{index}]: run {_short(record.id)} is listed more than once.")
        known.add(record.id)
    top = export.run.id
    if top not in known:
        return [*problems, f"The exported run ({_short(top)}) is not in \"runs\"."]
    children: dict[str, list[str]] = {}
    for index, record in enumerate(export.runs):
        if record.parent is None and record.id != top:
            problems.append(f"runs[{index}]: run {_short(record.id)} has no parent; only the "
                            f"exported run ({_short(top)}) is the top of the tree.")
        elif record.parent is not None and record.id == top:
            problems.append(f"runs[{index}]: the exported run ({_short(top)}) must have "
                            "\"parent\": null, as the top of the tree.")
        elif record.parent is not None and record.parent not in known:
            problems.append(f"runs[{index}]: the parent of run {_short(record.id)} "
                            f"({_short(record.parent)}) is not in \"runs\".")
        elif record.parent is not None:
            children.setdefault(record.parent, []).append(record.id)
    if problems:
        return problems
    reached, queue, deepest = {top}, deque([(top, 0)]), 0
    while queue:
        parent, level = queue.popleft()
        deepest = max(deepest, level)
        for child in children.get(parent, []):
            if child not in reached:
                reached.add(child)
                queue.append((child, level + 1))
    if deepest > MAX_TREE_DEPTH:
        problems.append(f"The tree is {deepest} levels deep; an imported tree may be at most "
                        f"{MAX_TREE_DEPTH} deep.")
    return problems + [f"runs[{index}]: run {_short(record.id)} is not below the exported run "
                       "(its parents go round in a circle)." for index, record in enumerate(export.runs)
                       if record.id not in reached]


def _event_problems(export: RunExport) -> list[str]:
    """Each run's events must be there from seq 1 to its last_seq, in order, none missing."""
    problems: list[str] = []
    known = {record.id for record in export.runs}
    next_seq: dict[str, int] = {}
    for index, event in enumerate(export.events):
        if event.run_id not in known:
            problems.append(f"events[{index}] belongs to run {_short(event.run_id)}, which is "
                            "not in \"runs\".")
            continue
        expected = next_seq.get(event.run_id, 1)
        if event.seq != expected:
            kind = "a gap" if event.seq > expected else "out of order"
            problems.append(f"events[{index}]: the events of run {_short(event.run_id)} are "
                            f"{kind}: seq {event.seq} where seq {expected} was expected.")
        next_seq[event.run_id] = max(expected, event.seq + 1)
    for index, record in enumerate(export.runs):
        held = next_seq.get(record.id, 1) - 1
        if held != record.last_seq:
            problems.append(f"runs[{index}]: run {_short(record.id)} has last_seq "
                            f"{record.last_seq} but the file holds its events up to seq {held}; "
                            "the export is cut short.")
    return problems


def read_export(source: bytes | str | dict[str, Any]) -> RunExport:
    """The run export in ``source`` (the file's bytes or text, or the parsed JSON), checked
    whole; ExportError saying what is wrong otherwise."""
    document = _parse(source)
    _check_header(document)
    try:
        export = RunExport.model_validate(document)
    except ValidationError as error:
        raise ExportError(_schema_problems(error)) from None
    problems = _tree_problems(export)
    problems += _event_problems(export) if not problems else []
    if problems:
        raise ExportError(problems)
    return export


def run_import(*, source: bytes | str | dict[str, Any], owner: Any) -> ImportedRun:
    """Store a run export for ``owner`` to read (nothing is stored when it is not valid)."""
    export = read_export(source)
    # a document from elsewhere may hold this server's secrets: stored redacted, as runs are
    secrets = redactor()
    return ImportedRun.objects.create(owner=owner, label=secrets.text(export.run.display_label[:200]),
                                      document=secrets.value(export.model_dump(mode="json")))


def stored_export(imported: ImportedRun) -> RunExport:
    """The export an ImportedRun holds (validated when it was stored)."""
    return RunExport.model_validate(imported.document)
