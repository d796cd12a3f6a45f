"""A run imported from another Handoff instance: its export document, kept to be read.

Nothing here runs or changes: the document is what the other instance exported (see
:mod:`delegations.runs.export`), validated before it was stored, and shown read-only to
the person who imported it (and staff).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone


class ImportedRunQuerySet(models.QuerySet["ImportedRun"]):
    def visible_to(self, user: Any) -> ImportedRunQuerySet:
        """Only the importer sees an imported run; staff see all."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        if user.is_staff or user.is_superuser:
            return self
        return self.filter(owner=user)


class ImportedRun(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="imported_runs", help_text="Who imported it.")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    label = models.CharField(max_length=200, blank=True,
                             help_text="The run's label (or the start of its goal) when it was imported.")
    document = models.JSONField(help_text="The run export (format handoff.run-export), as validated.")

    objects = ImportedRunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name = "imported run"

    def __str__(self) -> str:
        return f"{self.label or 'imported run'} (imported #{self.pk})"

    def get_absolute_url(self) -> str:
        return reverse("delegations:run_imported", args=[self.pk])

    @property
    def source_run_id(self) -> str:
        """The run's id on the instance it came from."""
        run = self.document.get("run") if isinstance(self.document, dict) else None
        return str(run.get("id") or "") if isinstance(run, dict) else ""
