from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class DelegationQuerySet(models.QuerySet["Delegation"]):
    def visible_to(self, user: Any) -> DelegationQuerySet:
        """Owners see (and edit) their delegations; superusers see all. Anyone else's
        are not revealed, not even as forbidden."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        if user.is_superuser:
            return self
        return self.filter(owner=user)


class Delegation(models.Model):
    """A saved, editable delegation contract (a hand-off packet in any dialect Handoff reads).

    Delegations form a tree (a coordinator's contract and its children's); running one
    snapshots its packet into a :class:`~delegations.models.Run`, so later edits never
    change what a run was given. Every save is kept as a :class:`DelegationVersion`, so a
    save based on an old version can be refused with what changed since.
    """

    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    packet = models.JSONField(default=dict, help_text="The hand-off packet, as composed.")
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE,
                               related_name="children")
    position = models.PositiveIntegerField(default=0, help_text="Order among its siblings.")
    template = models.BooleanField(default=False,
                                   help_text="A starting point to copy rather than to run as is.")
    copied_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="copies", help_text="The template it was started from.")
    version = models.PositiveIntegerField(default=1, help_text="Goes up by one with every save.")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                              on_delete=models.SET_NULL, related_name="delegations")
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = DelegationQuerySet.as_manager()

    class Meta:
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return self.name

    def packet_dict(self) -> dict[str, Any]:
        """The stored packet as a dict (a JSON column can hold any JSON value)."""
        return self.packet if isinstance(self.packet, dict) else {}

    def descendants(self) -> list[Delegation]:
        """Every delegation below this one, one query per level of the tree."""
        found: list[Delegation] = []
        seen: set[int] = {self.pk}
        level = [self.pk]
        while level:
            rows = [row for row in Delegation.objects.filter(parent__in=level) if row.pk not in seen]
            found += rows
            seen.update(row.pk for row in rows)
            level = [row.pk for row in rows]
        return found

    def descendant_ids(self) -> set[int]:
        return {row.pk for row in self.descendants()}

    def keep_version(self, saved_by: Any) -> DelegationVersion:
        """Record the delegation as it is now under its current version number."""
        return DelegationVersion.objects.create(delegation=self, number=self.version, name=self.name,
                                                packet=self.packet, saved_by=saved_by)


class DelegationVersion(models.Model):
    """A delegation as one save left it; any two can be diffed."""

    delegation = models.ForeignKey(Delegation, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    name = models.CharField(max_length=200)
    packet = models.JSONField(default=dict)
    saved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                 on_delete=models.SET_NULL, related_name="+")
    saved_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["number"]
        constraints = [models.UniqueConstraint(fields=["delegation", "number"],
                                               name="delegation_version_number_unique")]

    def __str__(self) -> str:
        return f"{self.delegation_id} v{self.number}"
