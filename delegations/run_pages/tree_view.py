"""The run page's delegation tree: each run as a node with its own and its subtree's
figures against its budget, what waits or failed below it, and whether it starts folded;
the nodes a live refresh patches in (a run with new events and its ancestors); and the
waterfall of where the tree's time went."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.utils import timezone

from delegations.models import Run, RunEvent
from delegations.run_pages.display import (
    AXIS_LABELS,
    FAILED_STATES,
    budget_amount,
    format_seconds,
    format_usd,
    run_budget,
    run_usage,
    state_tone,
)
from delegations.runs.rollups import own_figures

TREE_COLLAPSE_ABOVE = 8       # a tree node with more runs under it starts collapsed, unless
                              # something under it waits for a person or failed


def _bar(axis: str, used: float, limit: float | None, shown: str, soft: float) -> dict[str, Any] | None:
    """A small budget bar of a tree node, the soft threshold marked (None: no limit)."""
    if not limit:
        return None
    fraction = used / limit
    tone = "bad" if fraction >= 1 else "warn" if fraction >= soft else "ok"
    return {"axis": axis, "limit": limit, "label": AXIS_LABELS[axis],
            "text": f"{shown} / {budget_amount(axis, limit)}",
            "percent": round(min(fraction, 1.0) * 100, 1), "tone": tone}


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
