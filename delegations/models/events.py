"""The event log: every event of every run, numbered gaplessly per run. Append-only; it is
the source of truth for the live views (clients refill gaps with ``?after=N``)."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.utils import timezone

from delegations.protocol.events import EventType

from .runs import Run


class RunEvent(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=20, choices=[(t.value, t.value) for t in EventType])
    data = models.JSONField(default=dict)
    ts = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="run_event_seq_unique")]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.type}"

    def as_wire(self) -> dict[str, Any]:
        """The websocket / API shape; ``ts`` in epoch seconds."""
        return {"run_id": self.run_id, "seq": self.seq, "type": self.type,
                "ts": self.ts.timestamp(), "data": self.data}
