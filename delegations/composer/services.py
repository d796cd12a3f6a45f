"""Saving, moving, deleting and running delegations: what the composer pages and
``/api/delegations`` both call.

Every save bumps the delegation's version and keeps a copy of it; a save states the
version it was based on and is refused (:class:`StaleSave`) when someone saved in
between, with what they changed. A packet is stored as composed, in any dialect, but it
must parse; lint errors do not block saving a draft, only running it.

Callers pass the user acting; a delegation that user may not edit answers as if it did
not exist (404), and everything needs the composer role.
"""

from __future__ import annotations

import difflib
import enum
import json
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

from delegations.accounts.roles import can_compose
from delegations.composer.tree import children_by_parent, unique_label
from delegations.models import Delegation, DelegationVersion, Run
from delegations.refusals import Refusal
from delegations.runs.lint import LintReport, lint_as_run
from delegations.runs.workflows import run_create

NAME_MAX = 200
POSITION_MAX = 2**31 - 1   # the column's range on every database Handoff supports


class DelegationError(Refusal):
    """A request the composer refuses (400 unless said): ``details`` names the field, or
    carries the packet's problems."""

    default_status = 400


class StaleSave(DelegationError):
    """A save based on a version that is no longer the current one."""

    def __init__(self, *, delegation: Delegation, base_version: int, current: DelegationVersion | None,
                 diff: str) -> None:
        self.current_version = delegation.version
        self.saved_by = current.saved_by.get_username() if current and current.saved_by else ""
        self.saved_at: datetime = current.saved_at if current else delegation.updated_at
        self.diff = diff
        by = f" by {self.saved_by}" if self.saved_by else ""
        super().__init__(
            f"This delegation was saved{by} after version {base_version} you started from; it is "
            f"now at version {self.current_version}. Review their changes and save again on top of them.",
            status=409, details={"current_version": self.current_version, "saved_by": self.saved_by,
                                 "saved_at": self.saved_at.isoformat(), "diff": diff})


class Unchanged(enum.Enum):
    """For ``delegation_update(parent=...)``, where ``None`` already means "make it a root"."""
    KEEP = "keep"


KEEP = Unchanged.KEEP


# -- checks ------------------------------------------------------------------------------------

def _require_composer(user: Any) -> None:
    if not can_compose(user):
        raise DelegationError("Composing delegations needs the composer role.", status=403)


def _require_editor(delegation: Delegation, user: Any) -> None:
    _require_composer(user)
    if not Delegation.objects.visible_to(user).filter(pk=delegation.pk).exists():
        raise DelegationError(f"No delegation {delegation.pk} that you can see.", status=404)


def _clean_name(name: Any) -> str:
    cleaned = name.strip() if isinstance(name, str) else ""
    if not cleaned:
        raise DelegationError("Give the delegation a name.", details={"field": "name"})
    if len(cleaned) > NAME_MAX:
        raise DelegationError(f"The name is {len(cleaned)} characters long; keep it to {NAME_MAX}.",
                              details={"field": "name"})
    return cleaned


def _checked_packet(packet: Any, linted: LintReport | None) -> LintReport:
    """The packet's report as it will run (``linted``, when the caller has it already: read
    once for every check of one save); a packet that does not parse is refused."""
    if not isinstance(packet, dict):
        raise DelegationError(f"The packet must be a JSON object, not {type(packet).__name__}.",
                              status=422, details={"problems": [{"field": "packet",
                                                                 "message": "must be a JSON object"}]})
    report = linted if linted is not None else lint_as_run(packet)
    if report.packet is None:
        raise DelegationError(f"The packet does not parse: {report.blocked_because}", status=422,
                              details={"problems": report.problems})
    return report


def _capabilities(report: LintReport) -> list[str]:
    return [str(name) for name in (report.packet or {}).get("capabilities") or []]


def _check_within_parent(report: LintReport, parent: Delegation | None) -> None:
    """A child never gets a capability its parent lacks."""
    if parent is None:
        return
    has = _capabilities(lint_as_run(parent.packet_dict()))
    beyond = [name for name in _capabilities(report) if name not in has]
    if beyond:
        raise DelegationError(
            f"{', '.join(beyond)} {'is' if len(beyond) == 1 else 'are'} beyond what {parent.name} has "
            f"({', '.join(has) or 'no capabilities'}); a child gets at most its parent's capabilities.",
            status=422, details={"field": "capabilities"})


def _checked_position(position: int) -> int:
    if not 0 <= position <= POSITION_MAX:
        raise DelegationError(f"Position {position} is out of range; use 0 to {POSITION_MAX}.",
                              details={"field": "position"})
    return position


def _check_parent(delegation: Delegation | None, parent: Delegation, owner: Any) -> None:
    if parent.owner_id != getattr(owner, "pk", None):
        raise DelegationError("A child belongs to the same owner as its parent; pick one of your own "
                              "delegations as the parent.", details={"field": "parent"})
    if delegation is not None and (parent.pk == delegation.pk or parent.pk in delegation.descendant_ids()):
        raise DelegationError("A delegation cannot sit under itself or one of its own children; pick "
                              "a parent outside its subtree.", details={"field": "parent"})


def _next_position(owner: Any, parent: Delegation | None) -> int:
    siblings = (Delegation.objects.filter(parent=parent) if parent is not None
                else Delegation.objects.filter(parent__isnull=True, owner=owner))
    last = siblings.aggregate(last=Max("position"))["last"]
    return 0 if last is None else last + 1


# -- saving --------------------------------------------------------------------------------------

def delegation_create(*, owner: Any, name: str, packet: dict[str, Any], parent: Delegation | None = None,
                      template: bool = False, position: int | None = None,
                      copied_from: Delegation | None = None, linted: LintReport | None = None) -> Delegation:
    """A new delegation at version 1 (kept), after its last sibling unless ``position`` says;
    ``copied_from`` is the template it was started from, ``linted`` the packet's
    :func:`lint_as_run` report when the caller has made it."""
    _require_composer(owner)
    name, report = _clean_name(name), _checked_packet(packet, linted)
    if parent is not None:
        _check_parent(None, parent, owner)
        _check_within_parent(report, parent)
    with transaction.atomic():
        delegation = Delegation.objects.create(
            name=name, packet=packet, parent=parent, template=template, owner=owner, updated_by=owner,
            copied_from=copied_from,
            position=_next_position(owner, parent) if position is None else _checked_position(position))
        delegation.keep_version(saved_by=owner)
    return delegation


def delegation_update(*, delegation: Delegation, user: Any, base_version: int, name: str | None = None,
                      packet: dict[str, Any] | None = None, template: bool | None = None,
                      position: int | None = None, parent: Delegation | Unchanged | None = KEEP,
                      linted: LintReport | None = None) -> Delegation:
    """Save changes made on top of ``base_version``; what is left ``None`` stays as it is
    (``parent=None`` moves it to the top level); ``linted`` is the packet's report when the
    caller has made it. Raises :class:`StaleSave` when someone
    saved since: the version only moves on if it is still ``base_version`` in the database,
    so of two saves from the same base exactly one wins."""
    _require_editor(delegation, user)
    changes: dict[str, Any] = {}
    if name is not None:
        changes["name"] = _clean_name(name)
    if packet is not None:
        _check_within_parent(_checked_packet(packet, linted), delegation.parent if parent is KEEP else parent)
        changes["packet"] = packet
    if template is not None:
        changes["template"] = template
    if parent is not KEEP:
        if parent is not None:
            _check_parent(delegation, parent, delegation.owner)
        changes["parent"] = parent
        if position is None:
            position = _next_position(delegation.owner, parent)
    if position is not None:
        changes["position"] = _checked_position(position)
    with transaction.atomic():
        unchanged = _unchanged(delegation, base_version, changes)
        if unchanged is not None:
            return unchanged
        saved = Delegation.objects.filter(pk=delegation.pk, version=base_version).update(
            **changes, version=F("version") + 1, updated_by=user, updated_at=timezone.now())
        if not saved:
            raise _stale(delegation, base_version)
        delegation.refresh_from_db()
        delegation.keep_version(saved_by=user)
    return delegation


def _unchanged(delegation: Delegation, base_version: int, changes: dict[str, Any]) -> Delegation | None:
    """The delegation as it is, when ``changes`` on ``base_version`` would change nothing
    (pressing Save and run again on the same form keeps its version); else None."""
    current = Delegation.objects.filter(pk=delegation.pk, version=base_version).first()
    if current is None:
        return None
    for key, value in changes.items():
        now = current.parent if key == "parent" else getattr(current, key)
        if now != value:
            return None
    return current


def _stale(delegation: Delegation, base_version: int) -> DelegationError:
    current = Delegation.objects.filter(pk=delegation.pk).first()
    if current is None:
        return DelegationError(f"Delegation {delegation.pk} was deleted.", status=404)
    if not 1 <= base_version < current.version:
        return DelegationError(f"Version {base_version} is not one this delegation had; it is at "
                               f"version {current.version}.", details={"current_version": current.version})
    diff = version_diff(current, base_version, current.version)
    return StaleSave(delegation=current, base_version=base_version, diff=diff,
                     current=current.versions.filter(number=current.version).select_related("saved_by").first())


def split_planned(packet: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The packet without its ``planned_children``, and those children."""
    packet = dict(packet)
    planned = packet.pop("planned_children", None) or packet.pop("plannedChildren", None) or []
    return packet, [child for child in planned if isinstance(child, dict)]


def plant_children(*, parent: Delegation, planned: list[dict[str, Any]], user: Any) -> int:
    """Make a packet's ``planned_children`` the parent's child delegations, the nodes the
    tree editor draws: each one updates the child with its label (a kept version when it
    changed), or becomes a new child after the last; their own planned children likewise.
    Children the list does not name stay as they are. Returns how many nodes were
    created or changed."""
    existing = {child.packet_dict().get("label") or child.name: child
                for child in parent.children.order_by("position", "pk")}
    changed = 0
    with transaction.atomic():
        for entry in planned:
            packet, grandchildren = split_planned(entry)
            label = str(packet.get("label") or "").strip() or unique_label(str(packet.get("goal") or "")[:40], set(existing))
            packet["label"] = label
            child = existing.get(label)
            if child is None:
                child = delegation_create(owner=parent.owner, name=label[:NAME_MAX], packet=packet, parent=parent)
                existing[label] = child
                changed += 1
            elif child.packet_dict() != packet:
                child = delegation_update(delegation=child, user=user, base_version=child.version, packet=packet)
                changed += 1
            changed += plant_children(parent=child, planned=grandchildren, user=user)
    return changed


def delegation_delete(*, delegation: Delegation, user: Any, base_version: int | None = None) -> None:
    """Delete the delegation with its whole subtree; runs made from them keep their packets.
    With ``base_version``, only while it is still at that version (else :class:`StaleSave`)."""
    _require_editor(delegation, user)
    with transaction.atomic():
        current = Delegation.objects.select_for_update().filter(pk=delegation.pk).first()
        if current is None:
            return   # deleted meanwhile: what was asked for holds
        if base_version is not None and current.version != base_version:
            raise _stale(current, base_version)
        current.delete()


# -- history -------------------------------------------------------------------------------------

def _canonical(packet: Any) -> list[str]:
    return json.dumps(packet, indent=2, sort_keys=True, ensure_ascii=False).splitlines(keepends=True)


def _packet_at(delegation: Delegation, number: int) -> Any:
    if number == delegation.version:   # the current version is the row itself
        return delegation.packet
    kept = delegation.versions.filter(number=number).values_list("packet", flat=True).first()
    if kept is None:
        raise DelegationError(f"Delegation {delegation.pk} has no version {number}; it is at version "
                              f"{delegation.version}.", status=404)
    return kept


def version_diff(delegation: Delegation, a: int, b: int) -> str:
    """A unified diff of the packet from version ``a`` to version ``b`` ("" when equal)."""
    before, after = _packet_at(delegation, a), _packet_at(delegation, b)
    lines = difflib.unified_diff(_canonical(before), _canonical(after),
                                 fromfile=f"version {a}", tofile=f"version {b}")
    return "".join(line if line.endswith("\n") else f"{line}\n" for line in lines)


# -- running -------------------------------------------------------------------------------------

def delegation_start_run(*, delegation: Delegation, user: Any, adapter: str,
                         config: dict[str, Any] | None = None) -> Run:
    """A run of the delegation's tree as it is now, owned by ``user``: one root run whose
    packet plans the child delegations (:func:`composed_packet`). The runner judges the
    packet: ProtocolError for one it cannot use, a REJECTED run for lint errors."""
    _require_editor(delegation, user)
    return run_create(packet=composed_packet(delegation), adapter=adapter, config=config,
                      owner=user, delegation=delegation)


def composed_packet(delegation: Delegation, below: list[Delegation] | None = None) -> dict[str, Any]:
    """The delegation's packet with its child delegations, in order, as ``planned_children``
    (each labelled by its packet's label, else its name), recursively: the parent's model
    starts each by naming its label. A packet that already plans children keeps its own.
    ``below`` is every delegation under it when the caller has them already."""
    by_parent = children_by_parent(delegation.descendants() if below is None else below)

    def compose(row: Delegation) -> dict[str, Any]:
        packet = row.packet_dict()
        children = by_parent.get(row.pk, [])
        if not children or packet.get("planned_children") or packet.get("plannedChildren"):
            return packet
        return {**packet, "planned_children": [
            {**compose(child), "label": child.packet_dict().get("label") or child.name} for child in children]}

    return compose(delegation)
