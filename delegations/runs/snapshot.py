"""What a run page shows, read from the event log and the run rows: the timeline, the
streamed text of the tree, budget meters, the delegation tree, edits as diffs, the result.

The live view and its no-JS snapshot render the same data through the same template
fragments (the event log is the source of truth), so both are built here.
Everything returned is plain dicts and lists, ready for the templates.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from delegations.models import Approval, Run, RunEvent, RunMessage
from delegations.protocol.budgets import CONSUMABLE_AXES, Budget, Usage, fraction_used
from delegations.protocol.lifecycle import RunState
from delegations.runs.failure import failure_headline
from delegations.runs.rollups import own_figures
from delegations.runs.timeline_filter import GROUP_OF, TimelineFilter, filter_form
from skills.models import Skill

TIMELINE_LIMIT = 500          # the newest events a snapshot shows; the API serves the rest
STREAM_CHAR_LIMIT = 20_000    # the tail of each run's streamed text a snapshot shows
JSON_CHAR_LIMIT = 8_000       # pretty JSON longer than this is cut (the API has it whole)
OPEN_JSON_CHARS = 240         # tool arguments up to this long are shown unfolded
TURN_BREAK = "\n\n"           # between the texts of two model turns of one run
TREE_COLLAPSE_ABOVE = 8       # a tree node with more runs under it starts collapsed, unless
                              # something under it waits for a person or failed

STATE_TONES: dict[str, str] = {
    RunState.PENDING: "neutral", RunState.ACCEPTED: "neutral", RunState.WORKING: "info",
    RunState.AWAITING_APPROVAL: "warn", RunState.COMPLETE: "ok", RunState.RETURNED: "warn",
    RunState.FAILED: "bad", RunState.TIMEOUT: "bad", RunState.REJECTED: "bad",
    RunState.CANCELLED: "neutral",
}
STATUS_TONES: dict[str, str] = {
    "SUCCESS": "ok", "PARTIAL_COMPLETION": "warn", "FAILURE": "bad",
    "BLOCKED_AWAITING_CLARIFICATION": "info",
}
SEVERITY_TONES: dict[str, str] = {"error": "bad", "warning": "warn", "info": "info"}
LOG_TONES: dict[str, str] = {"error": "bad", "warning": "warn"}
FAILED_STATES = frozenset({RunState.FAILED, RunState.TIMEOUT, RunState.REJECTED})
AXIS_LABELS: dict[str, str] = {   # a budget axis as a person names it
    "max_model_calls": "Model calls", "max_tokens": "Tokens", "max_runtime_s": "Time",
    "max_cost_usd": "Cost",
}


def state_tone(state: str | None) -> str:
    return STATE_TONES.get(str(state or ""), "neutral")


def state_label(state: Any) -> str:
    """AWAITING_APPROVAL -> "awaiting approval"."""
    return str(state or "").replace("_", " ").lower()


def status_tone(status: str | None) -> str:
    return STATUS_TONES.get(str(status or ""), "neutral")


def pretty_json(value: Any, limit: int = JSON_CHAR_LIMIT) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    if len(text) > limit:
        return f"{text[:limit]}\n… ({len(text) - limit:,} more characters; the API has the whole value)"
    return text


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def format_usd(amount: float | None) -> str:
    if amount is None:
        return "—"
    if amount == 0:
        return "$0"
    return f"${amount:.4f}" if amount < 1 else f"${amount:,.2f}"


# -- diffs --------------------------------------------------------------------------------

def diff_lines(diff: str) -> list[dict[str, str]]:
    """A unified diff as lines with a kind for colouring: file, hunk, add, del, ctx."""
    lines = []
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        lines.append({"kind": kind, "text": line})
    return lines


def json_diff(before: Any, after: Any, fromfile: str, tofile: str) -> list[dict[str, str]]:
    """Two JSON values as unified-diff lines of their indented JSON, keys sorted so only
    real changes show (kinds as :func:`diff_lines`); empty when they are equal."""
    old = json.dumps(before, indent=2, ensure_ascii=False, sort_keys=True, default=str).splitlines()
    new = json.dumps(after, indent=2, ensure_ascii=False, sort_keys=True, default=str).splitlines()
    if old == new:
        return []
    return diff_lines("\n".join(difflib.unified_diff(old, new, fromfile, tofile, n=3, lineterm="")))


def edited_files(result: Any) -> list[dict[str, Any]]:
    """The files an apply_edit tool result changed, each with its diff as lines."""
    if not isinstance(result, dict):
        return []
    files = []
    for entry in result.get("files") or []:
        if isinstance(entry, dict):
            diff = str(entry.get("diff") or "")
            files.append({"path": str(entry.get("path") or ""), "created": bool(entry.get("created")),
                          "deleted": bool(entry.get("deleted")), "lines": diff_lines(diff),
                          "added": sum(1 for line in diff.splitlines() if line.startswith("+")
                                       and not line.startswith("+++")),
                          "removed": sum(1 for line in diff.splitlines() if line.startswith("-")
                                         and not line.startswith("---"))})
    return files


# -- the timeline -------------------------------------------------------------------------

@dataclass
class TimelineItem:
    seq: int
    ts: Any
    type: str
    title: str
    event_id: int = 0
    run_id: str = ""
    run_label: str = ""      # the subagent it came from, when not the page's own run
    tone: str = "neutral"
    meta: list[str] = field(default_factory=list)
    body_text: str = ""
    body_json: str = ""
    json_label: str = ""
    json_open: bool = False
    files: list[dict[str, Any]] = field(default_factory=list)
    link_run: str = ""
    link_label: str = ""
    approval_id: int | None = None

    @property
    def group(self) -> str:
        """The type filter's choice that shows this event."""
        return GROUP_OF.get(self.type, "text")

    @property
    def is_error(self) -> bool:
        return self.tone == "bad"


def _state_item(item: TimelineItem, data: dict[str, Any]) -> None:
    state, previous = data.get("state"), data.get("previous")
    item.title = f"{previous} → {state}" if previous else f"Created ({state})"
    item.tone = state_tone(state)
    if data.get("reason"):
        item.body_text = str(data["reason"])
    if data.get("resumed"):
        item.meta.append("resumed")
    findings = data.get("findings")
    if isinstance(findings, list) and findings:
        item.meta.append(f"{len(findings)} lint finding{'s' if len(findings) != 1 else ''}")


def _model_call_item(item: TimelineItem, data: dict[str, Any]) -> None:
    item.title = f"Model call {data.get('iteration', '')}".strip()
    item.tone = "info"
    if data.get("model"):
        item.meta.append(str(data["model"]))
    tokens_in, tokens_out = int(data.get("input_tokens") or 0), int(data.get("output_tokens") or 0)
    item.meta.append(f"{tokens_in:,} in · {tokens_out:,} out tokens")
    item.meta.append(format_usd(float(data.get("cost_usd") or 0.0)))
    if data.get("duration_ms") is not None:
        item.meta.append(f"{float(data['duration_ms']):,.0f} ms")
    calls = int(data.get("tool_calls") or 0)
    if calls:
        item.meta.append(f"{calls} tool call{'s' if calls != 1 else ''}")


def _tool_call_item(item: TimelineItem, data: dict[str, Any]) -> None:
    item.title = f"Tool call: {data.get('name', '?')}"
    item.body_json = pretty_json(data.get("arguments") or {})
    item.json_label = "Arguments"
    item.json_open = len(item.body_json) <= OPEN_JSON_CHARS
    if data.get("id"):
        item.meta.append(str(data["id"]))


def _tool_result_item(item: TimelineItem, data: dict[str, Any]) -> None:
    name = data.get("name", "?")
    if data.get("ok"):
        item.title, item.tone = f"Tool result: {name} ✓", "ok"
        result = data.get("result")
        if name == "apply_edit":
            item.files = edited_files(result)
        if name == "delegate_task" and isinstance(result, dict):
            item.body_text = str(result.get("summary") or "")
            item.link_run = str(result.get("run_id") or "")
            item.link_label = str(result.get("label") or "subagent")
        elif not item.files:
            item.body_json = pretty_json(result)
            item.json_label = "Result"
    else:
        error = data.get("error")
        if not isinstance(error, dict):
            error = {}
        item.title, item.tone = f"Tool result: {name} failed", "bad"
        item.body_text = f"{error.get('code', 'ERROR')}: {error.get('message', '')}"
        if name == "delegate_task" and isinstance(data.get("result"), dict):
            item.link_run = str(data["result"].get("run_id") or "")
            item.link_label = str(data["result"].get("label") or "subagent")
    if data.get("id"):
        item.meta.append(str(data["id"]))


def _child_item(item: TimelineItem, data: dict[str, Any]) -> None:
    label = data.get("label") or "subagent"
    item.title, item.tone = f"Spawned subagent “{label}”", "info"
    item.link_run, item.link_label = str(data.get("child_run_id") or ""), str(label)
    if data.get("session_key"):
        item.meta.append(str(data["session_key"]))
    capabilities = data.get("capabilities") or []
    item.meta.append("capabilities: " + (", ".join(map(str, capabilities)) or "none"))


def _approval_item(item: TimelineItem, data: dict[str, Any], approval_ids: dict[str, int]) -> None:
    item.approval_id = approval_ids.get(str(data.get("key") or ""))
    decision = data.get("decision")
    if decision:
        who = f" by {data['decided_by']}" if data.get("decided_by") else ""
        item.title = f"Approval decided: {decision}{who}"
        item.tone = "ok" if decision in ("approve", "answer", "edit") else "bad"
        item.body_text = str(data.get("comment") or "")
    else:
        item.title, item.tone = f"Approval requested: {data.get('title', '')}", "warn"
        item.meta += [f"kind {data.get('kind', '?')}", f"risk {data.get('risk', '?')}"]
        if data.get("payload"):
            item.body_json, item.json_label = pretty_json(data["payload"]), "What it asks"


def _result_item(item: TimelineItem, data: dict[str, Any]) -> None:
    result = data.get("result")
    status = result.get("status") if isinstance(result, dict) else None
    item.title = f"Finished: {data.get('state')}" + (f" · {status}" if status else "")
    item.tone = state_tone(data.get("state"))


def timeline_item(event: RunEvent | dict[str, Any], approval_ids: dict[str, int]) -> TimelineItem:
    if isinstance(event, RunEvent):
        seq, ts, kind, data = event.seq, event.ts, event.type, event.data
        event_id, run_id = event.pk or 0, event.run_id
    else:
        seq, ts, kind, data = event["seq"], event["ts"], event["type"], event["data"]
        event_id, run_id = int(event.get("id") or 0), str(event.get("run_id") or "")
    data = data if isinstance(data, dict) else {}
    item = TimelineItem(seq=seq, ts=ts, type=kind, title=kind, event_id=event_id, run_id=run_id)
    if kind == "state":
        _state_item(item, data)
    elif kind == "model_call":
        _model_call_item(item, data)
    elif kind == "tool_call":
        _tool_call_item(item, data)
    elif kind == "tool_result":
        _tool_result_item(item, data)
    elif kind == "child":
        _child_item(item, data)
    elif kind == "approval":
        _approval_item(item, data, approval_ids)
    elif kind == "message":
        item.title, item.tone = f"Message from {data.get('from') or 'a person'}", "info"
        item.body_text = str(data.get("text") or "")
    elif kind == "announce":
        item.title = f"Announced: {data.get('status', '?')}"
        item.tone = "ok" if data.get("status") == "success" else "bad"
        item.body_text = str(data.get("summary") or "")
    elif kind == "result":
        _result_item(item, data)
    elif kind == "log":
        item.title = str(data.get("message") or "log")
        item.tone = LOG_TONES.get(str(data.get("level") or ""), "neutral")
    elif kind == "error":
        item.title, item.tone = f"Error {data.get('code', '')}".strip(), "bad"
        item.body_text = str(data.get("message") or "")
    return item


# -- meters, tree, streams ----------------------------------------------------------------

def run_usage(run: Run) -> Usage:
    """What the run has used, its time so far while it runs."""
    stored = run.usage if isinstance(run.usage, dict) else {}
    runtime = float(stored.get("runtime_s") or 0.0)
    if not run.is_terminal or not runtime:
        runtime = run.duration_s or runtime   # a running run: time so far
    return Usage(model_calls=int(stored.get("model_calls") or 0),
                 input_tokens=int(stored.get("input_tokens") or 0),
                 output_tokens=int(stored.get("output_tokens") or 0),
                 cost_usd=float(stored.get("cost_usd") or 0.0), runtime_s=runtime)


def run_budget(run: Run) -> Budget:
    """The run's budget; a stored one that no longer reads counts as no limit."""
    try:
        return Budget.model_validate(run.budget or {})
    except ValueError:
        return Budget()


def budget_amount(axis: str, value: float | None) -> str:
    """A budget figure as a person reads it."""
    if value is None:
        return "no limit"
    if axis == "max_runtime_s":
        return format_seconds(value)
    if axis == "max_cost_usd":
        return format_usd(value)
    return f"{int(value):,}"


def budget_meters(run: Run) -> list[dict[str, Any]]:
    """Per consumable axis: used / limit, the filled share and where the soft threshold
    (HANDOFF_SOFT_BUDGET_THRESHOLD) sits on the meter."""
    budget, usage = run_budget(run), run_usage(run)
    fractions = fraction_used(budget, usage)
    soft = float(settings.HANDOFF_SOFT_BUDGET_THRESHOLD)
    meters = []
    for axis, measure in CONSUMABLE_AXES:
        fraction = fractions[axis]
        used = getattr(usage, measure)
        tone = "ok"
        if fraction is not None and fraction >= 1:
            tone = "bad"
        elif fraction is not None and fraction >= soft:
            tone = "warn"
        meters.append({
            "axis": axis, "label": AXIS_LABELS[axis], "used": budget_amount(axis, used),
            "limit_value": getattr(budget, axis),
            "limit": budget_amount(axis, getattr(budget, axis)), "limited": fraction is not None,
            "percent": round(min(fraction, 1.0) * 100, 1) if fraction is not None else 0,
            "value": round(fraction * 100, 1) if fraction is not None else 0,
            "soft_percent": round(soft * 100, 1), "tone": tone,
        })
    return meters


def _bar(axis: str, used: float, limit: float | None, shown: str, soft: float) -> dict[str, Any] | None:
    """A small budget bar of a tree node, the soft threshold marked (None: no limit)."""
    if not limit:
        return None
    fraction = used / limit
    tone = "bad" if fraction >= 1 else "warn" if fraction >= soft else "ok"
    return {"axis": axis, "limit": limit, "label": AXIS_LABELS[axis],
            "text": f"{shown} / {budget_amount(axis, limit)}",
            "percent": round(min(fraction, 1.0) * 100, 1), "tone": tone,
            "soft_percent": round(soft * 100, 1)}


def tree_nodes(run: Run, members: Iterable[Run], *,
               pending_by_run: dict[str, int] | None = None) -> dict[str, Any]:
    """The run and its descendants as nested dicts (children in the order they were
    spawned), each with its roll-ups: its own figures and its subtree's (tokens, cost and
    time summed over the subtree), budget bars, child and tool-call counts, and how many
    approvals wait and how many runs failed in its subtree. One pass over the rows."""
    members = list(members)
    children_of: dict[str | None, list[Run]] = {}
    for member in members:
        children_of.setdefault(member.parent_id, []).append(member)
    own = own_figures({member.pk: run_usage(member).runtime_s for member in members})
    pending_by_run = pending_by_run or {}
    soft = float(settings.HANDOFF_SOFT_BUDGET_THRESHOLD)

    def node(member: Run, planned: bool = False) -> dict[str, Any]:
        plan = _planned_children(member)
        spawned = children_of.get(member.pk, [])
        started = {child.label for child in spawned}
        children = [node(child, child.label in plan) for child in spawned]
        subtree = own[member.pk].copy()
        pending = pending_by_run.get(member.pk, 0)
        failed = 1 if member.state in FAILED_STATES else 0
        size = 1
        for child in children:
            subtree.add(child["subtree"])
            pending += child["pending"]
            failed += child["failed"]
            size += child["size"]
        below_pending = pending - pending_by_run.get(member.pk, 0)
        failed_below = failed - (1 if member.state in FAILED_STATES else 0)
        budget = run_budget(member)
        bars = [bar for bar in (
            _bar("max_tokens", subtree.tokens, budget.max_tokens, f"{subtree.tokens:,}", soft),
            _bar("max_cost_usd", subtree.cost_usd, budget.max_cost_usd, format_usd(subtree.cost_usd), soft),
            # a run's time limit is its own wall clock (its children run inside it)
            _bar("max_runtime_s", own[member.pk].runtime_s, budget.max_runtime_s,
                 format_seconds(own[member.pk].runtime_s), soft),
        ) if bar is not None]
        return {"run": member, "current": member.pk == run.pk, "tone": state_tone(member.state),
                "planned": planned, "children": children, "own": own[member.pk], "subtree": subtree,
                "tokens": own[member.pk].tokens, "bars": bars, "child_count": len(spawned),
                "size": size, "pending": pending, "failed": failed, "failed_below": failed_below,
                "collapsed": (size - 1 > TREE_COLLAPSE_ABOVE and member.pk != run.pk
                              and not below_pending and not failed_below),
                "running": not member.is_terminal,
                "not_started": [{"label": label, **about} for label, about in plan.items()
                                if label not in started]}

    return node(run)


def tree_changes(tree: dict[str, Any], changed: set[str]) -> list[dict[str, Any]]:
    """The nodes of ``tree`` whose runs are in ``changed``, parents before children, each
    with its parent's run id and its place among its parent's children: what the live
    script patches into the tree it shows (a new run is inserted there)."""
    out: list[dict[str, Any]] = []

    def walk(node: dict[str, Any], parent: str, index: int) -> None:
        if node["run"].pk in changed:
            out.append({"node": node, "parent": parent, "index": index})
        for place, child in enumerate(node["children"]):
            walk(child, node["run"].pk, place)

    walk(tree, "", 0)
    return out


def changed_since(members: list[Run], since: int) -> set[str]:
    """The runs of the tree with events stored after event ``since``, and their
    ancestors (whose roll-ups those events change)."""
    parent_of = {member.pk: member.parent_id for member in members}
    changed: set[str] = set()
    rows = (RunEvent.objects.filter(run_id__in=list(parent_of), id__gt=since).order_by()
            .values_list("run_id", flat=True).distinct())
    for run_id in rows:
        current: str | None = run_id
        while current and current not in changed:
            changed.add(current)
            current = parent_of.get(current)
    return changed


def waterfall(tree: dict[str, Any]) -> dict[str, Any]:
    """Each run's span from start to end on one time axis, in tree order (indented by
    depth): where the tree's time went. A running run's span reaches now."""
    now = timezone.now()
    spans: list[tuple[dict[str, Any], int, Any, Any]] = []

    def walk(node: dict[str, Any], depth: int) -> None:
        member = node["run"]
        if member.started_at:
            spans.append((node, depth, member.started_at, member.finished_at or now))
        for child in node["children"]:
            walk(child, depth + 1)

    walk(tree, 0)
    if not spans:
        return {"rows": [], "total": "", "key": "0"}
    start = min(span[2] for span in spans)
    total = max((max(span[3] for span in spans) - start).total_seconds(), 0.001)
    rows = [{"run": node["run"], "tone": node["tone"], "depth": depth,
             "left": round((began - start).total_seconds() / total * 100, 2),
             "width": max(round((ended - began).total_seconds() / total * 100, 2), 0.3),
             "start_ms": int(began.timestamp() * 1000), "end_ms": int(ended.timestamp() * 1000),
             "duration": format_seconds((ended - began).total_seconds())}
            for node, depth, began, ended in spans]
    # the live page re-draws it when a run starts or ends, not each time a span grows
    key = f"{len(rows)}:{sum(1 for node, *_ in spans if node['run'].finished_at)}"
    return {"rows": rows, "total": format_seconds(total), "key": key,
            "start_ms": int(start.timestamp() * 1000), "total_ms": int(total * 1000)}


def _planned_children(run: Run) -> dict[str, dict[str, str]]:
    """The children a composed delegation planned, by label: role and goal."""
    packet = run.packet if isinstance(run.packet, dict) else {}
    planned = packet.get("planned_children")
    if not isinstance(planned, list):
        return {}
    return {str(child["label"]): {"role": str(child.get("subagent_type") or ""),
                                  "goal": str(child.get("goal") or "")}
            for child in planned if isinstance(child, dict) and child.get("label")}


def streams(members: list[Run], current: Run) -> list[dict[str, Any]]:
    """Each run's streamed model text: its `text` events joined, a blank line between
    model turns (a `model_call` event closes a turn). ``last_seq`` is the last text seq
    included and ``turn_ended`` whether a turn closed after it, so the live script
    appends newer deltas the same way."""
    ids = [member.pk for member in members]
    chunks: dict[str, list[str]] = {}
    last_seq: dict[str, int] = {}
    turn_ended: dict[str, bool] = {}
    rows = (RunEvent.objects.filter(run_id__in=ids, type__in=("text", "model_call"))
            .order_by("run_id", "seq").values_list("run_id", "seq", "type", "data"))
    for run_id, seq, kind, data in rows:
        if kind == "model_call":
            turn_ended[run_id] = True
            continue
        parts = chunks.setdefault(run_id, [])
        if parts and turn_ended.get(run_id):
            parts.append(TURN_BREAK)
        parts.append(str((data or {}).get("delta", "")))
        last_seq[run_id] = seq
        turn_ended[run_id] = False
    out = []
    for member in members:
        if member.pk not in chunks:
            continue
        text = "".join(chunks[member.pk])
        trimmed = len(text) > STREAM_CHAR_LIMIT
        out.append({"run": member, "current": member.pk == current.pk,
                    "text": text[-STREAM_CHAR_LIMIT:] if trimmed else text, "trimmed": trimmed,
                    "last_seq": last_seq[member.pk], "turn_ended": turn_ended.get(member.pk, False)})
    return out


# -- the whole page -----------------------------------------------------------------------

def timeline(run: Run, *, members: list[Run] | None = None, since: int = 0, until: int | None = None,
             approval_ids: dict[str, int] | None = None,
             shown: TimelineFilter | None = None) -> tuple[list[TimelineItem], int, int]:
    """The events of the run's tree stored after event ``since`` (an event id: ids follow
    the order events were stored in, across the runs of a tree) and up to event ``until``
    (a replay's moment), the newest TIMELINE_LIMIT of them, as ``shown`` filters them
    (text is in the output area instead): the items, the last event id they cover, and
    how many were left out."""
    members = members if members is not None else [run]
    shown = shown or TimelineFilter()
    events = RunEvent.objects.filter(run_id__in=shown.run_ids(members), type__in=shown.event_types(),
                                     id__gt=since)
    if until is not None:
        events = events.filter(id__lte=until)
    total = events.count()
    rows = list(events.order_by("-id")[:TIMELINE_LIMIT])[::-1]
    ids = approval_ids if approval_ids is not None else _approval_ids([member.pk for member in members])
    items = [timeline_item(row, ids) for row in rows]
    labels = {member.pk: member.label or member.subagent_type or member.pk[:8] for member in members}
    for item in items:
        if item.run_id != run.pk:
            item.run_label = labels.get(item.run_id, item.run_id[:8])
    left_out = max(0, total - len(rows))
    if shown.errors_only:
        items = [item for item in items if item.is_error]
    last = max([since, *(row.pk for row in rows)])
    return items, last, left_out


def _approval_ids(run_ids: list[str]) -> dict[str, int]:
    return dict(Approval.objects.filter(run_id__in=run_ids).values_list("key", "pk"))


def changes(run: Run) -> list[dict[str, Any]]:
    """Every file the run's own apply_edit calls changed, in order, with diffs."""
    files: list[dict[str, Any]] = []
    rows = RunEvent.objects.filter(run=run, type="tool_result", data__name="apply_edit").order_by("seq")
    for row in rows:
        if isinstance(row.data, dict) and row.data.get("ok"):
            files += edited_files(row.data.get("result"))
    return files


def result_view(run: Run) -> dict[str, Any] | None:
    result = run.result if isinstance(run.result, dict) else None
    if result is None:
        return None
    payload = result.get("output_payload")
    handoff = result.get("handoff") if isinstance(result.get("handoff"), dict) else None
    return {
        **result, "tone": status_tone(result.get("status")),
        "summary_text": result.get("summary") or result.get("log_summary") or "",
        "payload_json": pretty_json(payload) if payload not in (None, {}, []) else "",
        "handoff": handoff,
    }


def findings_view(run: Run) -> list[dict[str, Any]]:
    findings = run.findings if isinstance(run.findings, list) else []
    return [{**finding, "tone": SEVERITY_TONES.get(str(finding.get("severity")), "neutral")}
            for finding in findings if isinstance(finding, dict)]


def skill_view(run: Run) -> dict[str, str] | None:
    """The skill the run executed (``name@version``), with its registry page when the
    registry still has that version (a child that named a skill without a version links
    to the skill's latest page)."""
    if not run.skill:
        return None
    name, _, version = run.skill.partition("@")
    rows = Skill.objects.filter(name=name)
    rows = rows.filter(version=version) if version else rows.filter(is_latest=True)
    if not rows.exists():
        return {"ref": run.skill, "url": ""}
    url = reverse("skills:version", args=[name, version]) if version else reverse("skills:detail", args=[name])
    return {"ref": run.skill, "url": url}


def snapshot(run: Run, *, since: int = 0, with_streams: bool = True, patch_tree: bool = False,
             shown: TimelineFilter | None = None) -> dict[str, Any]:
    """Everything a run page renders. ``since``: only timeline events stored after that
    event id (the live script's refresh); ``with_streams``: include the streamed text (the
    refresh asks for it only when a run it has no output area for starts talking);
    ``patch_tree``: of the tree, only the nodes those events changed (``tree_patch``: the
    script patches them in, so a big tree is not re-rendered per event); ``shown``: the
    timeline's filter (the page reloaded with ``?node=…&types=…``)."""
    members = list(run.tree().select_related("owner").order_by("depth", "created_at", "pk"))
    # cursors first: an event stored while the page renders is shown and then sent again
    # over the websocket, where the page drops it by seq
    cursors = {member.pk: member.last_seq for member in members}
    member_ids = [member.pk for member in members]
    approval_ids = _approval_ids(member_ids)
    shown = shown or TimelineFilter()
    items, last, hidden = timeline(run, members=members, since=since, approval_ids=approval_ids,
                                   shown=shown)
    approvals = list(Approval.objects.filter(run_id__in=member_ids).select_related("run", "decided_by")
                     .order_by("-requested_at", "-pk"))
    approvals.sort(key=lambda approval: not approval.is_pending)
    pending_by_run: dict[str, int] = {}
    for approval in approvals:
        if approval.is_pending:
            pending_by_run[approval.run_id] = pending_by_run.get(approval.run_id, 0) + 1
    tree = tree_nodes(run, members, pending_by_run=pending_by_run)
    return {
        "filters": filter_form(shown, members),
        "run": run, "state_tone": state_tone(run.state), "cursors": cursors,
        "cursors_json": json.dumps(cursors), "timeline": items, "timeline_after": last,
        "timeline_hidden": hidden, "meters": budget_meters(run),
        "tree": tree, "subagent_count": len(members) - 1, "waterfall": waterfall(tree),
        "tree_patch": tree_changes(tree, changed_since(members, since)) if patch_tree else None,
        "streams": streams(members, run) if with_streams else [], "streams_included": with_streams,
        "approvals": approvals, "pending_approvals": [a for a in approvals if a.is_pending],
        "result": result_view(run), "criteria": run.criteria_report if isinstance(run.criteria_report, dict) else None,
        "changes": changes(run), "findings": findings_view(run),
        "error": run.error if isinstance(run.error, dict) else None,
        "headline": failure_headline(run.state, run.error, run.result, skill=run.skill,
                                     findings=run.findings or []),
        "queued_messages": list(RunMessage.objects.filter(run=run, delivered_at__isnull=True)),
        "ancestors": _ancestors(run), "skill": skill_view(run),
        "retries": list(run.retries.only("id", "attempt", "state").order_by("attempt", "created_at")),
    }


def _ancestors(run: Run) -> list[Run]:
    """Root first, down to the parent: the breadcrumb of a child run."""
    ids = run.ancestor_ids()
    if not ids:
        return []
    found = {member.pk: member for member in Run.objects.filter(Q(pk__in=ids)).only("id", "label", "goal", "state")}
    return [found[pk] for pk in reversed(ids) if pk in found]
