"""The tree editor's history: every change the page makes, kept per tree in the session
(bounded), to undo and redo. Each entry says how to reverse the change and how to apply it
again, through the services only, so each step is a kept version with the usual checks,
and a step whose node someone else changed meanwhile is refused and dropped."""

from __future__ import annotations

import copy
from collections.abc import MutableMapping
from typing import Any

from delegations.models import Delegation

from .services import DelegationError, delegation_create, delegation_delete, delegation_update
from .tree import TreeNode, subtree_snapshot


def parent_node(tree: TreeNode, node: TreeNode) -> TreeNode:
    """The node above ``node``; the root has none to be moved or removed under."""
    parent = tree.parent_of(node.delegation.pk)
    if parent is None:
        raise DelegationError("The top of the tree is the delegation itself; delete or move it from "
                              "the delegation list, not from its tree.")
    return parent

HISTORY_LIMIT = 50

Ref = tuple[int, int]   # a delegation's id and the version a history entry expects it at


class TreeHistory:
    """The page's undo and redo stacks for one tree, kept in the session (the last
    :data:`HISTORY_LIMIT` changes). An entry is a JSON dict: its ``kind`` (edit, add, move,
    remove), ``what`` it did in words, and the ``node`` it changed as ``[id, version]``;
    an edit keeps the ``before`` and ``after`` name and goal, a move the places it went ``from`` and ``to``,
    and a node out of the tree the ``parent`` id, ``index`` and ``subtree`` to re-create it.

    Each step is checked against the version its entry expects, so a node saved elsewhere
    meanwhile is not overwritten; the page's own saves carry every entry along (:meth:`moved_on`)."""

    def __init__(self, session: MutableMapping[str, Any], root: Delegation) -> None:
        self.session, self.key = session, f"tree-history-{root.pk}"
        # a copy: a step that fails half-way must leave what the session holds untouched
        kept = copy.deepcopy(session.get(self.key)) or {"undo": [], "redo": []}
        self.undo: list[dict[str, Any]] = kept["undo"]
        self.redo: list[dict[str, Any]] = kept["redo"]

    def record(self, entry: dict[str, Any]) -> None:
        """A new change: on top of the undo stack, and what was undone can no longer be redone."""
        self.undo = [*self.undo, entry][-HISTORY_LIMIT:]
        self.redo = []

    def moved_on(self, old: Ref, new: Ref) -> None:
        """A delegation went from ``old`` to ``new``: saved by this page (same id, next
        version) or re-created (new id). Entries that expected ``old`` now expect ``new``;
        one that expected another version stays behind, and is refused when its turn comes."""
        for entry in (*self.undo, *self.redo):
            if tuple(entry["node"]) == old:
                entry["node"] = list(new)
            if entry.get("parent") == old[0]:
                entry["parent"] = new[0]

    def keep(self) -> None:
        self.session[self.key] = {"undo": self.undo, "redo": self.redo}


def _current(tree: TreeNode, ref: list[int]) -> TreeNode:
    """The node ``ref`` names, refused when it is gone or was saved elsewhere since."""
    node = tree.find(ref[0])
    if node is None:
        raise DelegationError("the delegation it changed is no longer in this tree.", status=409)
    if node.delegation.version != ref[1]:
        raise DelegationError(f"{node.delegation.name} was saved elsewhere since (it is now at version "
                              f"{node.delegation.version}), and this would overwrite that.", status=409)
    return node


def _renumber(rows: list[Delegation], user: Any, history: TreeHistory) -> None:
    """Positions 0, 1, 2… in the order given; only rows whose position changes are saved,
    each as a new version."""
    for position, row in enumerate(rows):
        if row.position != position:
            before = (row.pk, row.version)
            delegation_update(delegation=row, user=user, base_version=row.version, position=position)
            history.moved_on(before, (row.pk, row.version))


def save_fields(node: TreeNode, fields: dict[str, str], user: Any, history: TreeHistory, *,
                 base_version: int) -> Delegation:
    """Save a node's name and goal on top of ``base_version``."""
    before = (node.delegation.pk, node.delegation.version)
    packet = None if fields["goal"] == node.goal else {**node.delegation.packet_dict(), "goal": fields["goal"]}
    saved = delegation_update(delegation=node.delegation, user=user, name=fields["name"],
                              base_version=base_version, packet=packet)
    history.moved_on(before, (saved.pk, saved.version))
    return saved


def sibling_index(tree: TreeNode, node: TreeNode) -> int:
    return parent_node(tree, node).children.index(node)


def move(tree: TreeNode, ref: list[int], to: int, user: Any, history: TreeHistory) -> TreeNode:
    """Put a node at place ``to`` (0 first) among its siblings, the others keeping their order."""
    node = _current(tree, ref)
    siblings = [child.delegation for child in parent_node(tree, node).children]
    index = siblings.index(node.delegation)
    if to == index:
        raise DelegationError(f"{node.delegation.name} is already there: place {to + 1} of {len(siblings)}.")
    if not 0 <= to < len(siblings):
        end = "first" if to < 0 else "last"
        raise DelegationError(f"{node.delegation.name} cannot move there; it is already {end} among its siblings.")
    siblings.insert(to, siblings.pop(index))
    _renumber(siblings, user, history)
    return node


def take_out(tree: TreeNode, ref: list[int], user: Any, history: TreeHistory) -> dict[str, Any]:
    """Delete a node and its subtree; what putting it back needs."""
    node = _current(tree, ref)
    parent = parent_node(tree, node)
    taken = {"parent": parent.delegation.pk, "index": parent.children.index(node),
             "subtree": subtree_snapshot(node)}
    delegation_delete(delegation=node.delegation, user=user)
    _renumber([child.delegation for child in parent.children if child is not node], user, history)
    return taken


def _recreate(subtree: dict[str, Any], *, parent: Delegation, history: TreeHistory,
              position: int | None = None) -> Delegation:
    made = delegation_create(owner=parent.owner, name=subtree["name"], packet=subtree["packet"],
                             template=subtree["template"], parent=parent, position=position)
    history.moved_on((subtree["id"], subtree["version"]), (made.pk, made.version))
    for child in subtree["children"]:
        _recreate(child, parent=made, history=history)
    return made


def _put_back(tree: TreeNode, entry: dict[str, Any], user: Any, history: TreeHistory) -> Delegation:
    """Re-create what :func:`take_out` deleted, where it was."""
    parent = tree.find(entry["parent"])
    if parent is None:
        raise DelegationError(f"the delegation {entry['subtree']['name']} sat under is no longer in this tree.",
                              status=409)
    siblings = [child.delegation for child in parent.children]
    index = min(entry["index"], len(siblings))
    restored = _recreate(entry.pop("subtree"), parent=parent.delegation, history=history, position=index)
    siblings.insert(index, restored)
    _renumber(siblings, user, history)
    return restored


def apply_entry(entry: dict[str, Any], *, forward: bool, tree: TreeNode, user: Any, history: TreeHistory) -> int:
    """Re-apply ``entry`` (``forward``) or reverse it; the id of the node to select after."""
    kind = entry["kind"]
    if kind == "edit":
        node = _current(tree, entry["node"])
        return save_fields(node, entry["after" if forward else "before"], user, history,
                            base_version=entry["node"][1]).pk
    if kind == "move":
        place = entry.get("to" if forward else "from")
        if not isinstance(place, int):
            raise DelegationError("it was recorded by an earlier version of this page.", status=409)
        return move(tree, entry["node"], place, user, history).delegation.pk
    if forward == (kind == "remove"):   # redoing a removal, or undoing an addition
        entry.update(take_out(tree, entry["node"], user, history))
        return int(entry["parent"])
    return _put_back(tree, entry, user, history).pk


