"""What a run page shows, read from the event log and the run rows: the timeline, the
streamed text of the tree, budget meters, edits as diffs, the result, and the delegation
tree (:mod:`.tree_view`), in the words of :mod:`.display`.

The live view and its no-JS snapshot render the same data through the same template
fragments (the event log is the source of truth), so both are built here.
Everything returned is plain dicts and lists, ready for the templates.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models import Max, Q
from django.urls import reverse

from delegations.models import Approval, Run, RunEvent, RunMessage
from delegations.protocol.approvals import ApprovalKind, decided_as
from delegations.protocol.budgets import CONSUMABLE_AXES, fraction_used
from delegations.protocol.criteria import criteria_summary, report_lists
from delegations.run_pages.display import (
    AXIS_LABELS,
    budget_amount,
    format_usd,
    pretty_json,
    run_budget,
    run_usage,
    state_tone,
    status_tone,
)
from delegations.run_pages.failure import failure_headline
from delegations.run_pages.timeline_filter import GROUP_OF, TimelineFilter, filter_form
from delegations.run_pages.tree_view import changed_since, tree_changes, tree_nodes, waterfall
from skills.models import Skill

TIMELINE_LIMIT = 500          # the newest events a snapshot shows; the API serves the rest
STREAM_CHAR_LIMIT = 20_000    # the tail of each run's streamed text a snapshot shows
STREAM_RUNS = 12              # the runs whose output a page shows: it and the latest talkers
OPEN_JSON_CHARS = 240         # tool arguments up to this long are shown unfolded
TURN_BREAK = "\n\n"           # between the texts of two model turns of one run

SEVERITY_TONES: dict[str, str] = {"error": "bad", "warning": "warn", "info": "info"}
LOG_TONES: dict[str, str] = {"error": "bad", "warning": "warn"}


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
        kind = str(data.get("kind") or "")
        item.title = (f"Review decided: {decided_as(kind, decision)}{who}" if kind == ApprovalKind.REVIEW
                      else f"Approval decided: {decision}{who}")
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


def talking_runs(members: list[Run], current: Run) -> tuple[list[str], int]:
    """The runs whose output the page shows: the current one and the STREAM_RUNS - 1
    subagents that wrote most recently; and how many more wrote something."""
    rows = (RunEvent.objects.filter(run_id__in=[member.pk for member in members], type="text").order_by()
            .values("run_id").annotate(last=Max("id")).order_by("-last").values_list("run_id", flat=True))
    talking = list(rows)
    others = [run_id for run_id in talking if run_id != current.pk]
    shown = ([current.pk] if current.pk in talking else []) + others[:STREAM_RUNS - 1]
    return shown, len(others) - len(others[:STREAM_RUNS - 1])


def streams(members: list[Run], current: Run, ids: list[str]) -> list[dict[str, Any]]:
    """The streamed model text of the runs ``ids`` (in tree order): each run's `text`
    events joined, a blank line between model turns (a `model_call` event closes a turn).
    ``last_seq`` is the last text seq included and ``turn_ended`` whether a turn closed
    after it, so the live script appends newer deltas the same way."""
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


# the parts of a result the page lists; an imported record may hold something else there
RESULT_LISTS = ("evidence", "files_modified", "files_deleted", "key_decisions", "open_questions",
                "blockers", "needs_followup", "deliverables", "warnings")


def _as_list(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    return [] if value in (None, "") else [value]


def result_view(result: Any) -> dict[str, Any] | None:
    """A run's result (a ResponsePackage as stored) as the page shows it: its tone, the
    summary, the payload as JSON, every listed part a list."""
    if not isinstance(result, dict):
        return None
    payload = result.get("output_payload")
    handoff = result.get("handoff") if isinstance(result.get("handoff"), dict) else None
    return {
        **result, **{key: _as_list(result.get(key)) for key in RESULT_LISTS},
        "tone": status_tone(result.get("status")),
        "summary_text": result.get("summary") or result.get("log_summary") or "",
        "payload_json": pretty_json(payload) if payload not in (None, {}, []) else "",
        "handoff": handoff,
    }


def criteria_view(report: Any) -> dict[str, Any] | None:
    """A criteria report with its items (those that read as items), its unchecked fields
    and its one-line summary (worded again for a report stored before it had one)."""
    if not isinstance(report, dict) or not isinstance(report.get("items"), list):
        return None
    items, unchecked = report_lists(report)
    return {**report, "items": items, "fields_unchecked": unchecked, "summary": criteria_summary(report)}


def findings_view(run: Run) -> list[dict[str, Any]]:
    findings = run.findings if isinstance(run.findings, list) else []
    return [{**finding, "tone": SEVERITY_TONES.get(str(finding.get("severity")), "neutral")}
            for finding in findings if isinstance(finding, dict)]


def skill_view(run: Run) -> dict[str, str] | None:
    """The skill the run executed (``name@version``), with its registry page when the
    registry still has that version (a child that named a skill without a version links
    to the skill's latest page). A remote agent's skill has no page here."""
    if not run.skill:
        return None
    if run.remote_agent:
        return {"ref": run.skill, "url": ""}
    name, _, version = run.skill.partition("@")
    rows = Skill.objects.filter(name=name)
    rows = rows.filter(version=version) if version else rows.filter(is_latest=True)
    if not rows.exists():
        return {"ref": run.skill, "url": ""}
    url = reverse("skills:version", args=[name, version]) if version else reverse("skills:detail", args=[name])
    return {"ref": run.skill, "url": url}


def remote_view(run: Run) -> dict[str, str] | None:
    """For a run of a remote agent's skill: the agent, and the id of its task there, which
    the runner logs the moment the agent names it ("" until then)."""
    if not run.remote_agent:
        return None
    logged = (RunEvent.objects.filter(run=run, type="log", data__has_key="remote_task_id")
              .order_by("seq").values_list("data", flat=True).first())
    task_id = logged.get("remote_task_id") if isinstance(logged, dict) else ""
    return {"agent": run.remote_agent, "task_id": str(task_id or "")}


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
    # ...and the newest event id with them: the page's socket resumes from it (a cursor per
    # run would not fit in its URL for a big tree)
    event_since = RunEvent.objects.filter(run_id__in=member_ids).aggregate(newest=Max("id"))["newest"] or 0
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
        "cursors_json": json.dumps(cursors), "event_since": event_since, "timeline": items, "timeline_after": last,
        "timeline_hidden": hidden, "meters": budget_meters(run),
        "tree": tree, "subagent_count": len(members) - 1,
        "soft_percent": float(settings.HANDOFF_SOFT_BUDGET_THRESHOLD) * 100, "waterfall": waterfall(tree),
        "tree_patch": tree_changes(tree, changed_since(members, since)) if patch_tree else None,
        "streams_included": with_streams, **_streams_context(members, run, with_streams),
        "approvals": approvals, "pending_approvals": [a for a in approvals if a.is_pending],
        "result": result_view(run.result), "criteria": criteria_view(run.criteria_report),
        "changes": changes(run), "findings": findings_view(run),
        "error": run.error if isinstance(run.error, dict) else None,
        "headline": failure_headline(run.state, run.error, run.result, skill=run.skill,
                                     findings=run.findings or []),
        "queued_messages": list(RunMessage.objects.filter(run=run, delivered_at__isnull=True)),
        "ancestors": _ancestors(run), "skill": skill_view(run), "remote": remote_view(run),
        "retries": list(run.retries.only("id", "attempt", "state").order_by("attempt", "created_at")),
    }


def _streams_context(members: list[Run], run: Run, wanted: bool) -> dict[str, Any]:
    if not wanted:
        return {"streams": [], "streams_more": 0}
    ids, more = talking_runs(members, run)
    return {"streams": streams(members, run, ids), "streams_more": more}


def _ancestors(run: Run) -> list[Run]:
    """Root first, down to the parent: the breadcrumb of a child run."""
    ids = run.ancestor_ids()
    if not ids:
        return []
    found = {member.pk: member for member in Run.objects.filter(Q(pk__in=ids)).only("id", "label", "goal", "state")}
    return [found[pk] for pk in reversed(ids) if pk in found]
