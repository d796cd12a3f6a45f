"""What a person needs in front of them to decide an inbox item, in plain words.

:func:`approval_context` answers, for one item: what is asked and what approving (or
rejecting) it does, which subagent asks and where it sits in the delegation chain (root ->
... -> the asker, with depths), how much budget it and its root have used and have left,
what the run was doing before it parked (its goal, the model's last words, its last tool
calls), the tool call's arguments as a table and as JSON, and the time left to decide.

:func:`approval_contexts` builds the same for a page of items with a fixed number of
queries (parents a level at a time, the recent events of every asking run in one query),
so an inbox page costs the same with 10 or 1,000 items pending.

A payload of an unknown shape never breaks the page: what can't be read is left out and
the raw JSON stays one click away.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.db.models import Count, Q
from django.urls import reverse
from django.utils import timezone

from delegations.inbox.decisions import decide_refusal
from delegations.models import Approval, Run, RunEvent
from delegations.protocol.adapters.label_choice import verbal
from delegations.protocol.approvals import ALWAYS_ALLOW_KINDS, allowed_decisions
from delegations.protocol.budgets import CONSUMABLE_AXES, remaining
from delegations.protocol.capabilities import (
    APPROVAL_REQUIRED_CAPABILITIES,
    CAPABILITY_DESCRIPTIONS,
    CAPABILITY_TOOLS,
)
from delegations.protocol.criteria import percent
from delegations.run_pages.display import (
    AXIS_LABELS,
    budget_amount,
    pretty_json,
    run_budget,
    run_name,
    run_usage,
)
from delegations.run_pages.snapshot import json_diff

RECENT_EVENTS_READ = 40     # the tail of the asking run's log read for "what it was doing"
RECENT_SHOWN = 5            # activity lines shown
TEXT_SHOWN = 400            # characters of the model's last words shown
ARGUMENT_INLINE = 160       # an argument longer than this is shown as a block

KIND_LABELS = {
    "capability": "Tool call needing approval",
    "capability_request": "Capability request",
    "budget": "Budget threshold",
    "clarification": "Question for a person",
    "invalid_result": "Result failed validation",
    "review": "Value to review",
}


def decision_items(user: Any, approvals: Sequence[Approval]) -> list[dict[str, Any]]:
    """Per item, what its decision forms need: the item, its context, the decisions its
    kind allows, and why ``user`` may not decide it (None when they may)."""
    items = []
    for approval, context in zip(approvals, approval_contexts(approvals), strict=True):
        items.append({
            "approval": approval, "context": context,
            "allowed": [str(decision) for decision in allowed_decisions(approval.kind)],
            "refusal": decide_refusal(user, approval) if approval.is_pending else None,
            "always_allow": approval.kind in ALWAYS_ALLOW_KINDS,
        })
    return items


def approval_context(approval: Approval) -> dict[str, Any]:
    """Everything a person needs to decide ``approval`` (see the module's docstring)."""
    return approval_contexts([approval])[0]


def approval_contexts(approvals: Sequence[Approval]) -> list[dict[str, Any]]:
    """:func:`approval_context` for each item, with a fixed number of queries."""
    runs = {approval.run_id: approval.run for approval in approvals}
    known = _with_ancestors(list(runs.values()))
    activity = _recent_activity(list(runs.values()))
    tool_calls = _tool_call_counts(list(runs))
    # the run URL reversed once per page, not per node (700 reverse() calls were about
    # 3 ms of the 1,000-item inbox page in tests/benchmarks/bench_inbox.py)
    template = reverse("delegations:run_detail", args=["RUN-ID"])

    def url_of(run_id: str) -> str:
        return template.replace("RUN-ID", run_id)

    return [_context(approval, known, activity.get(approval.run_id, []), tool_calls.get(approval.run_id, 0),
                     url_of) for approval in approvals]


# -- reading the runs ----------------------------------------------------------------------

def _with_ancestors(runs: list[Run]) -> dict[str, Run]:
    """The runs and all their ancestors by id, read a level of parents at a time (the
    depth limit keeps it to a few queries)."""
    known = {run.pk: run for run in runs}
    missing = {run.parent_id for run in runs if run.parent_id and run.parent_id not in known}
    while missing:
        found = list(Run.objects.filter(pk__in=missing))
        known.update((run.pk, run) for run in found)
        missing = {run.parent_id for run in found if run.parent_id and run.parent_id not in known}
    return known


def _recent_activity(runs: list[Run]) -> dict[str, list[dict[str, str]]]:
    """Per run, the last few things it did (words, tool calls, results, subagents)."""
    if not runs:
        return {}
    window = Q()
    for run in runs:
        window |= Q(run_id=run.pk, seq__gt=max(0, run.last_seq - RECENT_EVENTS_READ))
    events: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for run_id, kind, data in (RunEvent.objects.filter(window).order_by("run_id", "seq")
                               .values_list("run_id", "type", "data")):
        events.setdefault(run_id, []).append((kind, data if isinstance(data, dict) else {}))
    return {run_id: _activity_lines(rows) for run_id, rows in events.items()}


def _activity_lines(events: list[tuple[str, dict[str, Any]]]) -> list[dict[str, str]]:
    lines: list[dict[str, str]] = []
    previous = ""
    for kind, data in events:
        streaming, previous = previous == "text", kind   # a turn's words stream as several events
        if kind == "text":
            if streaming and lines and lines[-1]["kind"] == "text":
                lines[-1]["body"] += str(data.get("delta") or "")
            else:
                lines.append({"kind": "text", "title": "The model said", "body": str(data.get("delta") or "")})
        elif kind == "tool_call":
            lines.append({"kind": "tool_call", "title": f"Called {data.get('name', '?')}",
                          "body": _compact(data.get("arguments"))})
        elif kind == "tool_result":
            lines.append(_tool_result_line(data))
        elif kind == "child":
            lines.append({"kind": "child", "title": f"Spawned subagent “{data.get('label') or 'subagent'}”",
                          "body": ""})
        elif kind == "message":
            lines.append({"kind": "message", "title": f"Message from {data.get('from') or 'a person'}",
                          "body": str(data.get("text") or "")})
    for line in lines:
        body = line["body"].strip()
        line["body"] = body if len(body) <= TEXT_SHOWN else "…" + body[-TEXT_SHOWN:]
    return [line for line in lines if line["body"] or line["kind"] != "text"][-RECENT_SHOWN:]


def _tool_result_line(data: dict[str, Any]) -> dict[str, str]:
    name = data.get("name", "?")
    if data.get("ok"):
        return {"kind": "tool_result", "title": f"{name} succeeded", "body": _compact(data.get("result"))}
    error = data.get("error")
    if not isinstance(error, dict):
        error = {}
    return {"kind": "tool_result", "title": f"{name} failed",
            "body": f"{error.get('code', 'ERROR')}: {error.get('message', '')}"}


def _tool_call_counts(run_ids: list[str]) -> dict[str, int]:
    if not run_ids:
        return {}
    rows = (RunEvent.objects.filter(run_id__in=run_ids, type="tool_call").values("run_id")
            .annotate(calls=Count("id")).values_list("run_id", "calls"))
    return dict(rows)


def _compact(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit - 1] + "…"


# -- one item ------------------------------------------------------------------------------

def _node(run: Run, asker: Run, url_of: Any) -> dict[str, Any]:
    return {"id": run.pk, "name": run_name(run), "role": run.subagent_type, "skill": run.skill,
            "depth": run.depth, "state": run.state, "is_asker": run.pk == asker.pk,
            "url": url_of(run.pk)}


def _lineage(run: Run, known: dict[str, Run]) -> list[Run]:
    """Root first, down to ``run``."""
    chain = [run]
    while chain[-1].parent_id and chain[-1].parent_id in known:
        chain.append(known[chain[-1].parent_id])
    return list(reversed(chain))


def budget_rows(run: Run) -> list[dict[str, Any]]:
    """Per consumable axis: used, limit, left and the share used (for a meter)."""
    budget, usage = run_budget(run), run_usage(run)
    left = remaining(budget, usage)
    rows = []
    for axis, measure in CONSUMABLE_AXES:
        limit, used = getattr(budget, axis), getattr(usage, measure)
        share = min(1.0, used / limit) if limit else (1.0 if limit == 0 else None)
        rows.append({"axis": axis, "label": AXIS_LABELS[axis], "used": budget_amount(axis, used),
                     "limit": budget_amount(axis, limit), "left": budget_amount(axis, getattr(left, axis)),
                     "limited": limit is not None,
                     "percent": round(share * 100) if share is not None else None,
                     "tone": "bad" if share is not None and share >= 1 else
                             "warn" if share is not None and share >= 0.8 else "ok"})
    return rows


def time_left(approval: Approval) -> dict[str, Any] | None:
    """How long a person still has to decide, or None when the item has no deadline."""
    expires_at = approval.expires_at
    if expires_at is None:
        return None
    left: timedelta = expires_at - timezone.now()
    seconds = left.total_seconds()
    if seconds <= 0:
        text = "expired"
    elif seconds < 3600:
        text = f"{max(1, int(seconds // 60))} min left"
    elif seconds < 86400 * 2:
        hours, minutes = divmod(int(seconds // 60), 60)
        text = f"{hours} h {minutes} min left"
    else:
        text = f"{int(seconds // 86400)} days left"
    return {"expires_at": expires_at, "seconds": seconds, "text": text, "urgent": 0 < seconds < 3600}


def argument_rows(arguments: Any) -> list[dict[str, Any]]:
    """A tool call's arguments as table rows; long or nested values as blocks."""
    if not isinstance(arguments, dict):
        return []
    rows = []
    for name, value in arguments.items():
        text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False, default=str)
        rows.append({"name": str(name), "value": text,
                     "block": len(text) > ARGUMENT_INLINE or "\n" in text})
    return rows


def _context(approval: Approval, known: dict[str, Run], activity: list[dict[str, str]],
             tool_calls: int, url_of: Any) -> dict[str, Any]:
    run = approval.run
    chain = _lineage(run, known)
    root = chain[0]
    payload = approval.payload if isinstance(approval.payload, dict) else {}
    who = f"subagent “{run_name(run)}”" if run.depth else f"run “{run_name(run)}”"
    parent = known.get(run.parent_id) if run.parent_id else None
    context: dict[str, Any] = {
        "kind_label": KIND_LABELS.get(approval.kind, approval.kind.replace("_", " ")),
        "asker": _node(run, run, url_of), "who": who,
        "lineage": [_node(member, run, url_of) for member in chain],
        "goal": run.goal, "root_goal": root.goal if root.pk != run.pk else "",
        "budget": budget_rows(run),
        "root_budget": budget_rows(root) if root.pk != run.pk else None, "root_name": run_name(root),
        "tool_calls": tool_calls, "recent": activity, "time_left": time_left(approval),
        "raw_json": pretty_json(approval.payload),
        "readable": isinstance(approval.payload, dict),
        "tool": "", "capability": "", "capability_description": "", "arguments": None,
        "argument_rows": [], "arguments_json": "", "questions": [], "reason": "",
        "grants": [], "rejecting": "", "always_allow": "", "budget_ask": None, "review": None,
    }
    describe = _DESCRIBERS.get(approval.kind, _unknown)
    describe(context, payload, who, parent)
    return context


def _capability(context: dict[str, Any], payload: dict[str, Any], who: str, parent: Run | None) -> None:
    tool, capability = str(payload.get("tool") or "?"), str(payload.get("capability") or "")
    arguments = payload.get("arguments")
    args = arguments if isinstance(arguments, dict) else {}
    context.update({
        "tool": tool, "capability": capability,
        "capability_description": str(payload.get("description") or CAPABILITY_DESCRIPTIONS.get(capability, "")),
        "arguments": arguments, "argument_rows": argument_rows(arguments),
        "arguments_json": json.dumps(arguments if arguments is not None else {}, indent=2, ensure_ascii=False),
    })
    if capability == "network_outbound" and "url" in args:
        grant = f"Lets {who} make one outbound HTTP request to {args['url']}."
    elif capability == "file_delete" and "path" in args:
        grant = f"Lets {who} delete the file {args['path']} from the run's workspace (it can't be undone)."
    elif capability == "financial_tx":
        grant = f"Lets {who} make one payment or purchase through {tool}, with the arguments below."
    else:
        grant = f"Lets {who} call {tool} once, with the arguments below."
    context["grants"] = [grant, f"Only this one call: its next {tool} call asks again."]
    context["always_allow"] = (f"“Always allow” lets this run and its subagents call {tool} without "
                               f"asking again until the run ends.")
    context["rejecting"] = (f"The call is not made: {tool} returns ERR_CONSTRAINT_VIOLATION with your "
                            f"comment, and the subagent carries on without it.")


def _capability_request(context: dict[str, Any], payload: dict[str, Any], who: str,
                        parent: Run | None) -> None:
    capability = str(payload.get("capability") or "?")
    tools = CAPABILITY_TOOLS.get(capability, ())
    context.update({"capability": capability, "reason": str(payload.get("reason") or ""),
                    "capability_description": str(payload.get("description")
                                                  or CAPABILITY_DESCRIPTIONS.get(capability, ""))})
    grants = [f"Adds {capability} to {who}'s capabilities for the rest of its run"
              + (f": it is offered {', '.join(tools)}." if tools else ".")]
    if capability in APPROVAL_REQUIRED_CAPABILITIES:
        grants.append(f"{capability} needs approval on every use: each call still waits here.")
    context["grants"] = grants
    context["rejecting"] = "The capability is not granted; the request returns ERR_CONSTRAINT_VIOLATION with your comment."


def _budget_threshold(context: dict[str, Any], payload: dict[str, Any], who: str, parent: Run | None) -> None:
    axis = str(payload.get("axis") or "")
    label = AXIS_LABELS.get(axis, axis.replace("max_", "").replace("_", " "))
    limit, used = payload.get("limit"), payload.get("used")
    numeric = isinstance(limit, int | float) and isinstance(used, int | float)
    ceiling = None
    if parent is not None and axis in AXIS_LABELS:
        ceiling = getattr(remaining(run_budget(parent), run_usage(parent)), axis)
    context["budget_ask"] = {
        "axis": axis, "label": label, "limit": limit, "used": used,
        "limit_text": budget_amount(axis, limit) if numeric else str(limit),
        "used_text": budget_amount(axis, used) if numeric else str(used),
        "ceiling": ceiling, "ceiling_text": budget_amount(axis, ceiling) if ceiling is not None else "",
        "suggested": _suggested_limit(float(limit), ceiling) if isinstance(limit, int | float) else None,
        "step": "0.01" if axis == "max_cost_usd" else ("0.1" if axis == "max_runtime_s" else "1"),
    }
    grant = f"Lets {who} continue past the soft threshold on {label.lower()}"
    if numeric:
        grant += f": it has used {budget_amount(axis, used)} of {budget_amount(axis, limit)}."
    grants = [grant, "Raise the limit to give it room; without a raise it stops at the hard limit."]
    if ceiling is not None:
        grants.append(f"A raised limit can't be above what its parent has left ({budget_amount(axis, ceiling)} more).")
    context["grants"] = grants
    context["rejecting"] = "The run stops here with ERR_RESOURCE_EXHAUSTED and your comment."


def _suggested_limit(limit: float, ceiling: float | None) -> float | int:
    """Half as much again, within what the parent has left."""
    raised = limit * 1.5 if limit else 1.0
    if ceiling is not None:
        raised = min(raised, limit + ceiling)
    return int(raised) if float(raised).is_integer() else round(raised, 4)


def _clarification(context: dict[str, Any], payload: dict[str, Any], who: str, parent: Run | None) -> None:
    questions = payload.get("questions")
    context["questions"] = [str(q) for q in questions] if isinstance(questions, list) else []
    context["reason"] = str(payload.get("summary") or "")
    context["grants"] = [f"Your answer joins {who}'s conversation and the same run continues with it."]
    context["rejecting"] = "The run fails with ERR_INSUFFICIENT_CONTEXT and your comment."


def _invalid_result(context: dict[str, Any], payload: dict[str, Any], who: str, parent: Run | None) -> None:
    problems = payload.get("problems") or payload.get("errors")
    context["questions"] = [str(p) for p in problems] if isinstance(problems, list) else []
    context["reason"] = str(payload.get("message") or payload.get("summary") or "")
    context["grants"] = [
        f"Accept keeps {who}'s result as a partial completion.",
        "Retry starts it again with a fresh context and the problems as its previous failure.",
    ]
    context["rejecting"] = "Fail ends the run FAILED with ERR_INVALID_RESULT."


def review_view(payload: dict[str, Any]) -> dict[str, Any]:
    """A review item as a person reads it: the input, and per field the value the model
    proposes with its probability, the alternatives with theirs, and the values a
    correction may take (the schema's choices; free text when it has none)."""
    fields = []
    for entry in payload.get("fields") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("field"), str):
            continue
        proposed = entry.get("proposed")
        alternatives = [{"value": verbal(alt.get("value")), "probability": percent(alt.get("probability"), "")}
                        for alt in entry.get("alternatives") or [] if isinstance(alt, dict)]
        choices = [{"value": verbal(choice), "json": json.dumps({entry["field"]: choice}, ensure_ascii=False),
                    "proposed": choice == proposed} for choice in entry.get("choices") or []]
        criteria = [str(item.get("detail") or item.get("criterion") or "")
                    for item in entry.get("criteria") or [] if isinstance(item, dict)]
        fields.append({"name": entry["field"], "proposed": verbal(proposed),
                       "probability": percent(entry.get("probability"), ""),
                       "calibrated": bool(entry.get("calibrated")), "alternatives": alternatives,
                       "choices": choices, "criteria": criteria})
    inputs = payload.get("input") if isinstance(payload.get("input"), dict) else {}
    return {"fields": fields, "input_rows": argument_rows(inputs), "goal": str(payload.get("goal") or "")}


def _review(context: dict[str, Any], payload: dict[str, Any], who: str, parent: Run | None) -> None:
    review = review_view(payload)
    context["review"] = review
    names = ", ".join(field["name"] for field in review["fields"]) or "the value"
    context["grants"] = [
        f"Confirm completes {who} with the value it proposes for {names}.",
        "Correct completes it with the value you choose instead (within the output schema).",
        "Either way the run's result and its criteria report say you decided it.",
    ]
    context["rejecting"] = "Fail ends the run FAILED with ERR_INVALID_RESULT and your comment."


def _unknown(context: dict[str, Any], payload: dict[str, Any], who: str, parent: Run | None) -> None:
    context["readable"] = False
    context["grants"] = [f"Lets {who} go on with what it asks (see the request's JSON below)."]
    context["rejecting"] = "The run is told no, with your comment."


_DESCRIBERS = {"capability": _capability, "capability_request": _capability_request,
               "budget": _budget_threshold, "clarification": _clarification,
               "invalid_result": _invalid_result, "review": _review}


def arguments_diff(original: Any, edited: Any) -> list[dict[str, str]]:
    """Edited tool-call arguments against the original, as unified-diff lines of their
    indented JSON (kinds add / del / ctx / hunk for colouring); empty when nothing changed."""
    return json_diff(original, edited, "original", "edited")
