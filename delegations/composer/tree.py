"""The tree editor's picture of a delegation and its child delegations.

:func:`load_tree` reads a delegation's subtree (one query per level) and
:func:`build_tree` turns the rows into :class:`TreeNode`s: each linted against its
parent's packet, its budget narrowed down the chain as the runner narrows it, with bars
relative to the parent's and a roll-up of what its children are promised. The rest are
pure functions over those figures, so the editor's rules can be tested without pages.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils.text import slugify

from delegations.models import Delegation
from delegations.protocol.budgets import Budget, narrow, parse_budget
from delegations.protocol.budgets import left_after as budget_left_after
from delegations.protocol.errors import ProtocolError
from delegations.protocol.lint import Severity
from delegations.protocol.packet import parse_packet
from delegations.runs.lint import LintReport, lint_as_run

# the axes the tree draws and caps new children on, with the unit each is counted in
SHOWN_AXES: tuple[tuple[str, str], ...] = (
    ("max_model_calls", "model calls"), ("max_tokens", "tokens"), ("max_cost_usd", "USD"))
DEFAULT_MAX_DEPTH = 3
INLINE_FIELDS = ("name", "goal")   # what a node's own edit form changes; the rest is the composer's

Figure = int | float | None   # None: unlimited on that axis


def _over(wanted: Figure, cap: Figure) -> bool:
    return wanted is not None and cap is not None and wanted > cap


def _share(part: Figure, whole: Figure) -> int | None:
    """``part`` as a whole percentage of ``whole`` (at most 100), or None when ``whole`` is unlimited."""
    if whole is None or part is None:
        return None if whole is None else 100
    if whole == 0:
        return 100
    return min(100, round(100 * part / whole))


@dataclass(frozen=True, slots=True)
class BudgetBar:
    """One axis of a node's budget, drawn against its parent's."""

    axis: str
    unit: str
    asked: Figure       # what the node's packet says (None: whatever the parent has left)
    value: Figure       # what a run of it gets: ``asked`` narrowed to the parent's
    cap: Figure         # the parent's figure (None at the root, or when the parent is unlimited)

    @property
    def over(self) -> bool:
        return _over(self.asked, self.cap)

    @property
    def percent(self) -> int | None:
        return _share(self.value, self.cap)


@dataclass(frozen=True, slots=True)
class RollUp:
    """What a node's children are promised on one axis, against what the node has."""

    axis: str
    unit: str
    promised: int | float   # the sum of the children's figures
    available: Figure
    open_children: int      # children with no figure: they take whatever is left

    @property
    def over(self) -> bool:
        return _over(self.promised, self.available)

    @property
    def excess(self) -> int | float:
        """How much more the children are promised than the node has (0 when they fit)."""
        return _tidy(self.promised - self.available) if self.over and self.available is not None else 0

    @property
    def percent(self) -> int | None:
        return _share(self.promised, self.available)


@dataclass(frozen=True, slots=True)
class Problem:
    """A lint error or warning of one node, with where to fix it."""

    node: TreeNode
    severity: str
    field: str
    message: str
    inline_field: str   # "goal" when the node's own edit form fixes it, else ""


@dataclass(slots=True, eq=False)
class TreeNode:
    delegation: Delegation
    depth: int
    report: LintReport
    budget: Budget          # as the packet asks
    effective: Budget       # narrowed to the parent's effective budget
    bars: list[BudgetBar]
    child_refused: str      # why no child may be added here ("" when one may)
    children: list[TreeNode] = field(default_factory=list)
    rollup: list[RollUp] = field(default_factory=list)
    first: bool = True
    last: bool = True

    @property
    def packet(self) -> dict[str, Any]:
        """The canonical packet (skill merged) when it parses, else the stored one."""
        return self.report.packet if self.report.packet is not None else self.delegation.packet_dict()

    @property
    def label(self) -> str:
        return str(self.packet.get("label") or "")

    @property
    def role(self) -> str:
        return str(self.packet.get("skill") or self.packet.get("subagent_type") or "")

    @property
    def goal(self) -> str:
        return str(self.packet.get("goal") or "")

    @property
    def capabilities(self) -> list[str]:
        return [str(name) for name in self.packet.get("capabilities") or []]

    @property
    def max_depth(self) -> int:
        return int(self.packet.get("max_depth", DEFAULT_MAX_DEPTH))

    @property
    def warnings(self) -> int:
        return sum(finding["severity"] == Severity.WARNING for finding in self.report.findings)

    @property
    def over_budget(self) -> bool:
        return any(bar.over for bar in self.bars) or any(total.over for total in self.rollup)

    @property
    def descendant_count(self) -> int:
        return sum(1 for _ in self.walk()) - 1

    def walk(self) -> Iterator[TreeNode]:
        """This node and every node below it, parents before children, in order."""
        yield self
        for child in self.children:
            yield from child.walk()

    def find(self, pk: int) -> TreeNode | None:
        return next((node for node in self.walk() if node.delegation.pk == pk), None)

    def parent_of(self, pk: int) -> TreeNode | None:
        return next((node for node in self.walk()
                     if any(child.delegation.pk == pk for child in node.children)), None)

    def problems(self) -> list[Problem]:
        """Its lint errors and warnings: what does not parse first, then lint's findings."""
        listed = [Problem(self, Severity.ERROR, problem["field"], problem["message"], "")
                  for problem in self.report.problems]
        listed += [Problem(self, finding["severity"], finding["field"], finding["message"],
                           finding["field"] if finding["field"] in INLINE_FIELDS else "")
                   for finding in self.report.findings if finding["severity"] != Severity.INFO]
        return listed

    def run_refusal(self) -> str:
        """Why this tree cannot run yet, in one sentence ("" when it can): the runner
        rejects a tree with an error in any node."""
        errors = [problem for node in self.walk() for problem in node.problems()
                  if problem.severity == Severity.ERROR]
        if not errors:
            return ""
        first = errors[0]
        more = f" (and {len(errors) - 1} more, under Problems in the tree)" if len(errors) > 1 else ""
        return (f"Fix the tree's errors first: {first.node.delegation.name}, "
                f"{first.field or 'its packet'}: {first.message}{more}")

    def left_for_a_new_child(self) -> dict[str, Figure]:
        return left_after(self.effective, [child.budget for child in self.children])


# -- the rules, as pure functions ---------------------------------------------------------------

def budget_bars(asked: Budget, parent: Budget | None) -> list[BudgetBar]:
    """The shown axes of a node's budget against its parent's effective one (``None`` at the root)."""
    effective = asked if parent is None else narrow(asked, parent)
    return [BudgetBar(axis, unit, getattr(asked, axis), getattr(effective, axis),
                      None if parent is None else getattr(parent, axis))
            for axis, unit in SHOWN_AXES]


def roll_up(available: Budget, children: list[Budget]) -> list[RollUp]:
    """Per shown axis, the children's figures summed against ``available``."""
    totals = []
    for axis, unit in SHOWN_AXES:
        figures = [getattr(child, axis) for child in children]
        promised = sum(figure for figure in figures if figure is not None)
        totals.append(RollUp(axis, unit, _tidy(promised), getattr(available, axis),
                             sum(figure is None for figure in figures)))
    return totals


def left_after(available: Budget, children: list[Budget]) -> dict[str, Figure]:
    """What ``available`` has left per shown axis once ``children`` take their figures
    (never below zero; ``None`` where it is unlimited): the protocol's rule, which lint
    holds each child to, so the add form and the problems list give the same figure."""
    left = budget_left_after(available, children)
    return {axis: getattr(left, axis) for axis, _ in SHOWN_AXES}


def _tidy(amount: int | float) -> int | float:
    # sums of costs pick up float noise (0.1 + 0.2); a cent's millionth is plenty
    return round(amount, 6) if isinstance(amount, float) else amount


def child_refusal(depth: int, max_depth: int, source: str = "the root's max_depth") -> str:
    """Why a node at ``depth`` may not get a child, or "" when it may."""
    if depth + 1 <= max_depth:
        return ""
    return (f"No more children here: a child of this node would be at depth {depth + 1}, beyond "
            f"{source} ({max_depth}). Raise max_depth on the root in the composer, or give this "
            f"work to an existing subagent.")


def unique_label(wanted: str, taken: set[str]) -> str:
    """A label for a new child: ``wanted`` (or a slug of it), numbered if a sibling has it."""
    base = slugify(wanted) or "child"
    label, number = base, 2
    while label in taken:
        label, number = f"{base}-{number}", number + 1
    return label


def child_packet(parent: TreeNode, *, goal: str, role: str, label: str, budget: dict[str, Figure],
                 capabilities: list[str]) -> dict[str, Any]:
    """A new child's packet: one level below ``parent``, sharing its feature name and
    context, with the budget and capabilities given (the caller keeps them within the parent's)."""
    packet: dict[str, Any] = {
        "goal": goal, "label": label, "depth": parent.depth + 1, "max_depth": parent.max_depth,
        "budget": {axis: figure for axis, figure in budget.items() if figure is not None},
        "capabilities": capabilities,
    }
    if role:
        packet["subagent_type"] = role
    for shared in ("feature_name", "context"):
        if parent.packet.get(shared):
            packet[shared] = parent.packet[shared]
    return packet


def _depth_limit(root_report: LintReport) -> tuple[int, str]:
    """The deepest a node of this tree may sit, and whose limit that is."""
    packet = root_report.packet or {}
    own = int(packet.get("max_depth", DEFAULT_MAX_DEPTH))
    server = settings.HANDOFF_MAX_DEPTH
    return (own, "the root's max_depth") if own <= server else (server, "the server's depth limit")


def _budget_of(report: LintReport) -> Budget:
    # a packet that parsed has a valid budget; one that did not counts as asking for none
    return parse_budget((report.packet or {}).get("budget"))


# -- reading the rows ---------------------------------------------------------------------------

def load_tree(root: Delegation) -> TreeNode:
    """The tree below ``root`` as the editor shows it."""
    return build_tree(root, root.descendants())


def children_by_parent(rows: list[Delegation]) -> dict[int | None, list[Delegation]]:
    """``rows`` grouped under their parents' ids, siblings in order."""
    by_parent: dict[int | None, list[Delegation]] = {}
    for row in rows:
        by_parent.setdefault(row.parent_id, []).append(row)
    for siblings in by_parent.values():
        siblings.sort(key=lambda row: (row.position, row.pk))
    return by_parent


def _asked_budget(row: Delegation) -> Budget:
    try:
        return parse_packet(row.packet_dict()).budget
    except ProtocolError:   # lint says why; meanwhile it asks for nothing
        return Budget.unlimited()


def _as_parent(report: LintReport, left: Budget) -> dict[str, Any] | None:
    """A node's packet as a run of the tree gives it to one of its children: with ``left``,
    what that child's siblings leave of its budget, and planning children, which lets it
    delegate (``HandoffPacket.may_delegate``); None when it does not parse."""
    if report.packet is None:
        return None
    return {**report.packet, "budget": left.as_dict(include_unlimited=False), "allow_nested": True}


def build_tree(root: Delegation, rows: list[Delegation]) -> TreeNode:
    """Arrange ``rows`` (every delegation below ``root``) under ``root``, siblings by position,
    each linted as the run of the tree will judge it."""
    by_parent = children_by_parent(rows)
    report = lint_as_run(root.packet_dict())
    limit, source = _depth_limit(report)

    def node(row: Delegation, depth: int, report: LintReport, parent: TreeNode | None,
             left: Budget | None) -> TreeNode:
        budget = _budget_of(report)
        effective = budget if left is None else narrow(budget, left)
        made = TreeNode(row, depth, report, budget, effective,
                        budget_bars(budget, None if parent is None else parent.effective),
                        child_refusal(depth, limit, source))
        below = by_parent.get(row.pk, [])
        asked = [_asked_budget(child) for child in below]
        made.children = []
        for index, row_below in enumerate(below):
            child_left = budget_left_after(effective, asked[:index] + asked[index + 1:])
            # judged as the run places it, one level down (as lint_packet judges a planned child)
            placed = {**row_below.packet_dict(), "depth": depth + 1}
            child_report = lint_as_run(placed, parent=_as_parent(report, child_left))
            made.children.append(node(row_below, depth + 1, child_report, made, child_left))
        for index, child in enumerate(made.children):
            child.first, child.last = index == 0, index == len(made.children) - 1
        made.rollup = roll_up(effective, [child.budget for child in made.children]) if below else []
        return made

    return node(root, 0, report, None, None)


def subtree_snapshot(node: TreeNode) -> dict[str, Any]:
    """What re-creating ``node`` and everything below it needs (JSON, for the session), with
    each row's id and version so what referred to a row can follow it to its re-creation."""
    row = node.delegation
    return {"id": row.pk, "version": row.version, "name": row.name, "packet": row.packet,
            "template": row.template, "children": [subtree_snapshot(child) for child in node.children]}
