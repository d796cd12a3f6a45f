from __future__ import annotations

from datetime import timedelta

from django.db import models
from django.utils import timezone

ALIVE_WITHIN = timedelta(seconds=30)


class WorkerHeartbeat(models.Model):
    """One row per background worker (embedded thread or separate process), touched while it runs."""

    worker_id = models.CharField(max_length=64, unique=True)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    kind = models.CharField(max_length=20, default="embedded")  # embedded | process
    started_at = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-last_seen"]

    def __str__(self) -> str:
        return f"{self.worker_id} ({self.kind}, pid {self.pid})"

    @classmethod
    def alive(cls) -> models.QuerySet[WorkerHeartbeat]:
        return cls.objects.filter(last_seen__gte=timezone.now() - ALIVE_WITHIN)

    @property
    def is_alive(self) -> bool:
        return self.last_seen >= timezone.now() - ALIVE_WITHIN
