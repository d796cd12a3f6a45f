from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class Delegation(models.Model):
    """A saved, editable delegation contract (a hand-off packet in any dialect Handoff reads).

    Delegations form a tree (a coordinator's contract and its children's); running one
    snapshots its packet into a :class:`~delegations.models.Run`, so later edits never
    change what a run was given.
    """

    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    packet = models.JSONField(default=dict, help_text="The hand-off packet, as composed.")
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE,
                               related_name="children")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                              on_delete=models.SET_NULL, related_name="delegations")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return self.name

    def packet_dict(self) -> dict[str, Any]:
        """The stored packet as a dict (a JSON column can hold any JSON value)."""
        return self.packet if isinstance(self.packet, dict) else {}
