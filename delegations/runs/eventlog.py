"""Writing the event log: gapless per-run numbering, and keeping run rows in step.

Every writer (the runner's sink in a worker, an API request that cancels a parked run,
the sweeper) appends through :func:`persist_batch`, in one transaction that locks the
runs concerned and numbers their events from ``Run.last_seq``: two writers on one run
queue behind each other and no seq is skipped or reused. The run row is a projection of
the events (state and its times, child rows, usage, result): :func:`_apply` is the only
place that maps an event onto it. Every event and checkpoint is redacted here, before it is
written (``redaction.py``): what the rows, pages, exports and websockets show was stored so.

The writes are SQL of our own beside the ORM, on purpose: this is the hot path of live
delivery. The same batches written through the ORM (``select_for_update``, ``bulk_create``,
``bulk_update``, the checkpoint upsert as ``bulk_create(update_conflicts=True)``) measured,
side by side on 2026-12-01 with ``tests/benchmarks/bench_runs.py`` (100 viewers of a
1000-subagent tree), p50 30-32 ms and p99 53-56 ms against 18-19 ms and 39-47 ms here, and
about twice the server CPU: the ORM compiles each statement again on every batch and
serializes every event's data a second time. The functions below say what each saves.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pydantic_core
from django.db import connection, transaction
from django.db.models import DateTimeField, Field, JSONField
from django.utils import timezone

from delegations.models import Run, RunCheckpoint, RunCheckpointPart, RunEvent
from delegations.models.raw_rows import concrete_fields
from delegations.protocol.checkpoints import Checkpoint
from delegations.protocol.errors import ProtocolError
from delegations.protocol.events import EventType
from delegations.protocol.lifecycle import RunState, can_transition, is_terminal
from delegations.protocol.redaction import Redactor
from delegations.runs.redaction import redactor

logger = logging.getLogger(__name__)

# large JSON columns a batch never reads (a scripted config can be hundreds of kB): loading
# them on every batch would cost more than the writes. A parent's adapter_config is loaded
# once per writer, when it first announces a child (see _child_row).
BULKY_FIELDS = ("packet", "result", "criteria_report", "previous_failure",
                "adapter_config")


# told, once a batch is committed, of the root runs whose state it changed and the states
# they entered, in order (the A2A server's push notifications); they must not block
RootStateListener = Callable[[list[tuple[str, str]]], None]
_root_state_listeners: list[RootStateListener] = []


def on_root_state_changed(listener: RootStateListener) -> None:
    """Call ``listener([(run_id, state), ...])`` after every batch that changes the state of
    a root run (every writer's, from now on)."""
    if listener not in _root_state_listeners:
        _root_state_listeners.append(listener)


def _tell_root_state_listeners(changes: list[tuple[str, str]]) -> None:
    for listener in _root_state_listeners:
        listener(changes)


@dataclass(slots=True)
class PendingEvent:
    run_id: str
    type: str
    data: dict[str, Any]
    ts: float


@dataclass(slots=True)
class PendingCheckpoint:
    run_id: str
    checkpoint: Checkpoint  # dumped in the writer's thread


@dataclass(slots=True)
class StoredParts:
    """The parts of a run's checkpoint a writer stored (the objects themselves): the
    runner appends to a conversation and never changes a message it holds, so the next
    save writes the messages after the prefix it shares with these."""
    lists: dict[str, list[Any]]
    wholes: dict[str, Any]


@dataclass
class WriterMemory:
    """What one writer (an execution's sink) keeps between its batches, so that a batch
    neither reads nor writes again what an earlier one did: each run's ancestors, each
    parent's adapter config (its children's rows are made from it) and what of each
    running run's checkpoint is stored."""
    lineage: dict[str, list[str]] = field(default_factory=dict)  # run id -> ancestor ids
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    checkpoints: dict[str, StoredParts] = field(default_factory=dict)


@dataclass
class BatchResult:
    events: list[dict[str, Any]] = field(default_factory=list)   # wire shape, in order
    texts: list[str] = field(default_factory=list)               # the same, as JSON text
    lineage: dict[str, list[str]] = field(default_factory=dict)  # run id -> ancestor ids


class _Row:
    """One event being stored: its data is serialized once, for the table and the wire."""

    __slots__ = ("data_json", "run_id", "seq", "stamp", "text", "type", "wire")

    def __init__(self, run_id: str, seq: int, type: str, data: dict[str, Any], data_json: str,
                 stamp: datetime) -> None:
        self.run_id, self.seq, self.type, self.stamp, self.data_json = run_id, seq, type, stamp, data_json
        ts = stamp.timestamp()
        self.wire: dict[str, Any] = {"run_id": run_id, "seq": seq, "type": type, "ts": ts, "data": data}
        self.text = (f'{{"run_id":{json.dumps(run_id)},"seq":{seq},"type":{json.dumps(type)},'
                     f'"ts":{ts!r},"data":{self.data_json}}}')


def _json_placeholder() -> str:
    """The SQL parameter for JSON text written as it is into a JSON column."""
    return "%s::jsonb" if connection.vendor == "postgresql" else "%s"


def _insert_events(rows: list[_Row]) -> None:
    """INSERT the rows with one executemany (bulk_create would serialize the data again)."""
    if not rows:
        return
    quote = connection.ops.quote_name
    ts_field = RunEvent._meta.get_field("ts")
    assert isinstance(ts_field, Field)
    sql = (f"INSERT INTO {quote(RunEvent._meta.db_table)} ({quote('run_id')}, {quote('seq')}, "
           f"{quote('type')}, {quote('data')}, {quote('ts')}) VALUES (%s, %s, %s, {_json_placeholder()}, %s)")
    params = [(row.run_id, row.seq, row.type, row.data_json,
               ts_field.get_db_prep_save(row.stamp, connection)) for row in rows]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


def canonical_hash(packet: dict[str, Any]) -> str:
    """sha256 of a canonical packet dict (same text as HandoffPacket.canonical_json)."""
    text = json.dumps(packet, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _lineage(runs: dict[str, Run], run_id: str, known: dict[str, list[str]]) -> list[str]:
    cached = known.get(run_id)
    if cached is not None:
        return cached
    run = runs.get(run_id)
    if run is None:
        run = Run.objects.only("id", "parent_id").get(pk=run_id)
    ancestors = [] if run.parent_id is None else [run.parent_id, *_lineage(runs, run.parent_id, known)]
    known[run_id] = ancestors
    return ancestors


def persist_batch(items: list[PendingEvent | PendingCheckpoint],
                  memory: WriterMemory | None = None) -> BatchResult:
    """Store events and checkpoints in order, in one transaction; returns the stored
    events in wire shape and the ancestors of each run concerned (for publishing)."""
    memory = memory if memory is not None else WriterMemory()
    known = memory.lineage
    out = BatchResult(lineage=known)
    if not items:
        return out
    # serialized before the write lock is taken. Only a run's newest checkpoint in the
    # batch counts.
    newest = {item.run_id: item for item in items if isinstance(item, PendingCheckpoint)}
    secrets = redactor()
    saves = {run_id: _CheckpointSave(item.checkpoint, memory.checkpoints.get(run_id), secrets)
             for run_id, item in newest.items()}
    data_texts = [_json_text(item.data) if isinstance(item, PendingEvent) else "" for item in items]
    for index, item in enumerate(items):
        # one substring test per event; only an event holding a secret is rewritten
        if isinstance(item, PendingEvent) and secrets.in_json(data_texts[index]):
            item.data = secrets.value(item.data)
            data_texts[index] = _json_text(item.data)
    with transaction.atomic():
        wanted = sorted({item.run_id for item in items})
        # locked in a fixed order, so concurrent writers on one tree cannot deadlock
        runs: dict[str, Run] = {run.pk: run for run in Run.objects.rows(wanted, lock=True, without=BULKY_FIELDS)}
        announced = [child_id for item in items
                     if isinstance(item, PendingEvent) and item.type == EventType.CHILD
                     and (child_id := str(item.data.get("child_run_id") or ""))]
        if announced:  # a child announced again on resume already has its row
            runs.update((run.pk, run) for run in Run.objects.rows(announced, without=BULKY_FIELDS))
        created: list[Run] = []
        changed: dict[str, set[str]] = {}
        rows: list[_Row] = []
        for index, item in enumerate(items):
            if isinstance(item, PendingCheckpoint):
                if item.run_id not in runs and saves.pop(item.run_id, None) is not None:
                    logger.warning("Checkpoint for unknown run %s dropped", item.run_id)
                continue
            run = runs.get(item.run_id)
            if run is None:
                logger.warning("Event %s for unknown run %s dropped", item.type, item.run_id)
                continue
            if item.type == EventType.CHILD:
                child = _child_row(run, item.data, runs, memory.configs)
                if child is not None:
                    runs[child.pk] = child
                    created.append(child)
                    known.pop(child.pk, None)
            run.last_seq += 1
            changed.setdefault(run.pk, set()).add("last_seq")
            stamp = datetime.fromtimestamp(item.ts, tz=UTC)
            rows.append(_Row(run.pk, run.last_seq, item.type, item.data, data_texts[index], stamp))
            fields = _apply(run, item, runs, known, stamp)
            if fields:
                changed.setdefault(run.pk, set()).update(fields)
                if "usage" in fields:
                    for ancestor_id in _lineage(runs, run.pk, known):
                        if ancestor_id in runs:
                            changed.setdefault(ancestor_id, set()).add("usage")
        # new child rows are inserted as the batch left them (events applied already)
        new_ids = {run.pk for run in created}
        insert_runs(created)
        # one UPDATE statement per set of changed fields, not one per run
        by_fields: dict[tuple[str, ...], list[Run]] = {}
        for run_id, fields in changed.items():
            if run_id not in new_ids:
                by_fields.setdefault(tuple(sorted(fields)), []).append(runs[run_id])
        for fields_changed, group in by_fields.items():
            _update_rows(group, fields_changed)
        _store_checkpoints(saves)
        _insert_events(rows)
    for run_id, save in saves.items():
        if is_terminal(save.checkpoint.state):
            # written again only by a resume, which starts with a memory of its own
            memory.checkpoints.pop(run_id, None)
        else:
            memory.checkpoints[run_id] = save.parts
    for row in rows:
        _lineage(runs, row.run_id, known)
        out.events.append(row.wire)
        out.texts.append(row.text)
    if _root_state_listeners:
        changes = [(row.run_id, str(row.wire["data"].get("state"))) for row in rows
                   if row.type == EventType.STATE and not known[row.run_id]]
        if changes:   # robust: a listener's error is logged, never the writer's
            transaction.on_commit(functools.partial(_tell_root_state_listeners, changes), robust=True)
    return out


def insert_runs(runs: list[Run]) -> None:
    """INSERT new run rows with one executemany, the instances saved thereafter as Django
    saves them (``_state``): bulk_create, then get_db_prep_save per column, were most of
    the cost of storing a turn that delegates fifty subagents, and a new root run's
    ``save()`` took 786 µs against 348 (this machine, 2026-12-05)."""
    if not runs:
        return
    quote = connection.ops.quote_name
    fields = concrete_fields(Run)
    sql = (f"INSERT INTO {quote(Run._meta.db_table)} ({', '.join(quote(str(f.column)) for f in fields)}) "
           f"VALUES ({', '.join(_placeholder(field) for field in fields)})")
    with connection.cursor() as cursor:
        cursor.executemany(sql, _column_values(runs, fields))
    for run in runs:
        run._state.adding, run._state.db = False, connection.alias


def _placeholder(field: Field[Any, Any]) -> str:
    return _json_placeholder() if isinstance(field, JSONField) else "%s"


def _column_values(runs: list[Run], fields: Iterable[Field[Any, Any]]) -> list[list[Any]]:
    """Each run's values of these columns as the database takes them: what the fields'
    get_db_prep_save gives (JSON text, the backend's datetime) without its layers per
    value, which cost more than the writes. JSON goes in through _placeholder."""
    adapt_datetime = connection.ops.adapt_datetimefield_value
    converters = [(field.attname, _json_or_null if isinstance(field, JSONField)
                   else adapt_datetime if isinstance(field, DateTimeField) else None) for field in fields]
    return [[value if convert is None else convert(value)
             for name, convert in converters for value in (getattr(run, name),)] for run in runs]


def _json_text(value: Any) -> str:
    """Compact JSON as the event log and run columns store it (NaN refused: it is not JSON)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _json_or_null(value: Any) -> str | None:
    return None if value is None else _json_text(value)


def _new_run(**values: Any) -> Run:
    """A Run from column values (by attname), the others at their defaults: positional
    arguments take Model.__init__'s fast path, several times cheaper than keywords."""
    columns = [values.pop(field.attname) if field.attname in values else field.get_default()
               for field in concrete_fields(Run)]
    run = Run(*columns)  # type: ignore[misc]  # the stubs know keyword arguments only
    if values:
        raise TypeError(f"Run has no columns {', '.join(values)}")
    return run


def _update_rows(group: list[Run], names: tuple[str, ...]) -> None:
    """UPDATE these columns of these runs with one executemany (Django's bulk_update builds
    a CASE expression per row and costs more than the write itself)."""
    quote = connection.ops.quote_name
    fields = [field for name in names if isinstance(field := Run._meta.get_field(name), Field)]
    assignments = ", ".join(f"{quote(str(field.column))} = {_placeholder(field)}" for field in fields)
    sql = f"UPDATE {quote(Run._meta.db_table)} SET {assignments} WHERE {quote('id')} = %s"
    params = [[*values, run.pk] for values, run in zip(_column_values(group, fields), group, strict=True)]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


def _part_json(value: Any) -> str:
    return pydantic_core.to_json(value, inf_nan_mode="null").decode()


def _redacted_json(text: str, secrets: Redactor) -> str:
    """JSON text with the secrets in it replaced (the same text when it holds none)."""
    return _part_json(secrets.value(json.loads(text))) if secrets.in_json(text) else text


class _CheckpointSave:
    """One run's checkpoint to store, serialized and redacted: its head
    (``RunCheckpoint.data``, the checkpoint without its parts) and the part rows that
    changed since ``stored``, what this writer stored of it before (None: not known, so
    every part is written anew)."""

    __slots__ = ("checkpoint", "drops", "head", "parts", "rows", "stored")

    def __init__(self, checkpoint: Checkpoint, stored: StoredParts | None, secrets: Redactor) -> None:
        values = checkpoint.__dict__
        self.checkpoint, self.stored = checkpoint, stored
        self.parts = StoredParts({name: values[name] for name in RunCheckpoint.LIST_PARTS},
                                 {name: values[name] for name in RunCheckpoint.WHOLE_PARTS})
        self.head = _redacted_json(checkpoint.model_dump_json(
            exclude={*RunCheckpoint.LIST_PARTS, *RunCheckpoint.WHOLE_PARTS}), secrets)
        self.drops: list[tuple[str, int]] = []       # (field, first position) of rows to delete
        self.rows: list[tuple[str, int, str]] = []   # (field, position, JSON) of rows to insert
        for name, items in self.parts.lists.items():
            before = stored.lists[name] if stored is not None else []
            keep = 0
            for old, new in zip(before, items, strict=False):
                if old is not new:
                    break
                keep += 1
            if keep < len(before):
                self.drops.append((name, keep))
            self.rows += [(name, position, _redacted_json(_part_json(items[position]), secrets))
                          for position in range(keep, len(items))]
        for name, value in self.parts.wholes.items():
            if stored is None or stored.wholes[name] is not value:
                if stored is not None:
                    self.drops.append((name, 0))
                self.rows.append((name, 0, _redacted_json(_part_json(value), secrets)))


def _store_checkpoints(saves: dict[str, _CheckpointSave]) -> None:
    """Replace each run's checkpoint head, delete the part rows that changed (a list's
    from its first changed item on) and insert the new ones."""
    if not saves:
        return
    quote = connection.ops.quote_name
    table, run, data = quote(RunCheckpoint._meta.db_table), quote("run_id"), quote("data")
    parts, field, position = quote(RunCheckpointPart._meta.db_table), quote("field"), quote("position")
    # SQLite and PostgreSQL both have INSERT ... ON CONFLICT; the JSON text goes in as it is
    upsert = (f"INSERT INTO {table} ({run}, {data}) VALUES (%s, {_json_placeholder()}) "
              f"ON CONFLICT ({run}) DO UPDATE SET {data} = excluded.{data}")
    drop_all = f"DELETE FROM {parts} WHERE {run} = %s"
    drop_from = f"DELETE FROM {parts} WHERE {run} = %s AND {field} = %s AND {position} >= %s"
    insert = (f"INSERT INTO {parts} ({run}, {field}, {position}, {data}) "
              f"VALUES (%s, %s, %s, {_json_placeholder()})")
    statements: list[tuple[str, list[tuple[Any, ...]]]] = [
        (upsert, [(run_id, save.head) for run_id, save in saves.items()]),
        (drop_all, [(run_id,) for run_id, save in saves.items() if save.stored is None]),
        (drop_from, [(run_id, *drop) for run_id, save in saves.items() for drop in save.drops]),
        (insert, [(run_id, *row) for run_id, save in saves.items() for row in save.rows])]
    with connection.cursor() as cursor:
        for sql, params in statements:
            if params:
                cursor.executemany(sql, params)


def _child_row(parent: Run, data: dict[str, Any], runs: dict[str, Run],
               configs: dict[str, dict[str, Any]]) -> Run | None:
    child_id = str(data.get("child_run_id") or "")
    if not child_id or child_id in runs:
        return None  # announced again on resume: the row exists
    packet = data.get("packet") if isinstance(data.get("packet"), dict) else {}
    assert isinstance(packet, dict)
    config = configs.get(parent.pk)
    if config is None:  # a parent's config never changes: read once per writer
        loaded = parent.adapter_config
        config = configs[parent.pk] = loaded if isinstance(loaded, dict) else {}
    label = str(data.get("label") or "")
    child_config = config.get("children", {}).get(label) if parent.adapter_name == "scripted" else None
    return _new_run(
        id=child_id, parent_id=parent.pk, root_id=parent.root_id or parent.pk,
        depth=int(data.get("depth") or parent.depth + 1), owner_id=parent.owner_id,
        packet=packet, input_hash=canonical_hash(packet), label=label,
        goal=str(packet.get("goal") or "")[:2000], subagent_type=str(packet.get("subagent_type") or ""),
        skill=str(packet.get("skill") or ""), agent_id=str(packet.get("agent_id") or parent.agent_id),
        session_key=str(data.get("session_key") or ""), adapter_name=parent.adapter_name,
        adapter_config=child_config if isinstance(child_config, dict) else config,
        capabilities=list(data.get("capabilities") or []), budget=dict(data.get("budget") or {}),
        timeout_s=packet.get("timeout_s"), cleanup=parent.cleanup, attempt=parent.attempt,
        allocated_at=timezone.now(), traceparent=parent.trace.traceparent)


def _apply(run: Run, item: PendingEvent, runs: dict[str, Run], known: dict[str, list[str]],
           stamp: datetime) -> set[str]:
    """Reflect one event on its run row; returns the fields it changed."""
    data = item.data
    if item.type == EventType.STATE:
        return _apply_state(run, data, stamp)
    if item.type == EventType.MODEL_CALL:
        for charged in (run, *(runs[a] for a in _lineage(runs, run.pk, known) if a in runs)):
            usage = dict(charged.usage or {})
            usage["model_calls"] = usage.get("model_calls", 0) + 1
            usage["input_tokens"] = usage.get("input_tokens", 0) + int(data.get("input_tokens") or 0)
            usage["output_tokens"] = usage.get("output_tokens", 0) + int(data.get("output_tokens") or 0)
            usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
            usage["cost_usd"] = usage.get("cost_usd", 0.0) + float(data.get("cost_usd") or 0.0)
            charged.usage = usage
        return {"usage"}
    if item.type == EventType.ERROR and run.error is None and not data.get("call_id"):
        run.error = data
        return {"error"}
    if item.type == EventType.RESULT:
        fields = {"result", "criteria_report", "usage"}
        run.result = data.get("result")
        run.criteria_report = data.get("criteria_report")
        run.usage = {**(run.usage or {}), **(data.get("usage") or {})}
        if "error" in data:
            run.error = data["error"]
            fields.add("error")
        if "findings" in data:
            run.findings = data["findings"]
            fields.add("findings")
        return fields | _apply_state(run, {"state": data.get("state")}, stamp)
    return set()


def _apply_state(run: Run, data: dict[str, Any], stamp: datetime) -> set[str]:
    new = data.get("state")
    fields: set[str] = set()
    if "findings" in data:
        run.findings = data["findings"]
        fields.add("findings")
    skill = data.get("skill")
    if isinstance(skill, str) and skill and skill != run.skill:
        # a child's skill as the runner resolved it: pinned to the version that runs
        run.skill = skill
        run.packet = {**(run.packet or {}), "skill": skill}
        fields |= {"skill", "packet"}
    if not new or new == run.state:
        return fields
    try:
        target = RunState(new)
    except ValueError:
        logger.warning("Run %s: unknown state %r in an event", run.pk, new)
        return fields
    if not can_transition(RunState(run.state), target):
        # e.g. a run failed by the sweeper whose worker turned out to be alive: the first
        # terminal state stays on the row; the event log still records what happened
        logger.warning("Run %s: %s -> %s not applied to the row", run.pk, run.state, target)
        return fields
    try:
        return fields | set(run.transition(target, at=stamp))
    except ProtocolError:
        return fields
