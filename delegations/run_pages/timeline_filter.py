"""Which events a run page's timeline shows: a run of the tree (or its subtree), some
kinds of event, or errors only. The live script filters the rendered rows the same way
without a reload; this is the server's side, for a page opened with ``?node=…&types=…``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from delegations.models import Run

# what the timeline's type filter offers, and the event types each choice shows (text
# deltas are in the output area, never in the timeline)
EVENT_GROUPS: dict[str, tuple[str, ...]] = {
    "state": ("state", "result"), "model": ("model_call",),
    "tools": ("tool_call", "tool_result", "child"), "approvals": ("approval",),
    "errors": ("error",), "text": ("message", "announce", "log"),
}
GROUP_LABELS: dict[str, str] = {
    "state": "State", "model": "Model calls", "tools": "Tool calls", "approvals": "Approvals",
    "errors": "Errors", "text": "Text",
}
GROUP_OF: dict[str, str] = {kind: group for group, kinds in EVENT_GROUPS.items() for kind in kinds}


@dataclass(frozen=True)
class TimelineFilter:
    """Which events the timeline shows: one node (``node``, a run of the tree) or its
    subtree, some event groups (EVENT_GROUPS; empty: all), or errors only."""

    node: str = ""
    subtree: bool = False
    groups: frozenset[str] = frozenset()
    errors_only: bool = False

    @classmethod
    def from_query(cls, query: Any) -> TimelineFilter:
        """From a page's query string: ``?node=<run id>&subtree=1&types=state,tools&errors=1``
        (``types`` may also repeat, as the filter form sends it)."""
        groups = {name.strip() for value in query.getlist("types") for name in value.split(",")}
        return cls(node=str(query.get("node") or "").strip(), subtree=query.get("subtree") == "1",
                   groups=frozenset(groups & set(EVENT_GROUPS)), errors_only=query.get("errors") == "1")

    @property
    def active(self) -> bool:
        return bool(self.node or self.groups or self.errors_only)

    def run_ids(self, members: list[Run]) -> list[str]:
        """The runs whose events are shown: the whole tree, the node, or its subtree."""
        ids = [member.pk for member in members]
        if not self.node or self.node not in ids:
            return ids
        if not self.subtree:
            return [self.node]
        children_of: dict[str | None, list[str]] = {}
        for member in members:
            children_of.setdefault(member.parent_id, []).append(member.pk)
        chosen, frontier = [self.node], [self.node]
        while frontier:
            frontier = [child for parent in frontier for child in children_of.get(parent, [])]
            chosen += frontier
        return chosen

    def event_types(self) -> list[str]:
        groups = self.groups or set(EVENT_GROUPS)
        return [kind for group in sorted(groups) for kind in EVENT_GROUPS[group]]


def filter_form(shown: TimelineFilter, members: list[Run]) -> dict[str, Any]:
    """The filter form's state: each group with whether it is on, the selected node."""
    node = next((member for member in members if member.pk == shown.node), None)
    return {"groups": [{"name": name, "label": GROUP_LABELS[name],
                        "on": not shown.groups or name in shown.groups} for name in EVENT_GROUPS],
            "node": node, "subtree": shown.subtree, "errors_only": shown.errors_only,
            "active": shown.active}
