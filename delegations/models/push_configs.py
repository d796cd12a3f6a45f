from __future__ import annotations

from django.conf import settings
from django.db import connection, models


class TaskPushConfig(models.Model):
    """Where an A2A caller asked to be told of its task's changes (the spec's
    ``TaskPushNotificationConfig``): the receiver's URL, the token the receiver checks, and
    the credentials to send it. The caller's own values for their own receiver: stored for
    delivery, shown only to their owner, never written to an event or a log line."""

    task = models.ForeignKey("delegations.Run", on_delete=models.CASCADE, related_name="push_configs",
                             help_text="The task (a root run).")
    config_id = models.CharField(max_length=200, help_text="The caller's id for it (default: the task's).")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="task_push_configs")
    url = models.CharField(max_length=2000)
    token = models.CharField(max_length=500, blank=True)
    auth_scheme = models.CharField(max_length=50, blank=True)
    auth_credentials = models.CharField(max_length=4000, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [models.UniqueConstraint(fields=["task", "config_id"], name="one_push_config_per_id")]
        verbose_name = "A2A task push config"

    def __str__(self) -> str:
        return f"{self.task_id}/{self.config_id}"

    @classmethod
    def configured(cls, task_ids: list[str]) -> set[str]:
        """Which of these tasks have a push config, by one raw SELECT: the delivery thread
        asks for every batch of changed tasks, most of which have none, and the ORM's query
        took 792 µs against 44 for five on SQLite, 853 against 157 on PostgreSQL (this
        machine, a busy sitting, 2026-12-05)."""
        if not task_ids:
            return set()
        quote = connection.ops.quote_name
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT DISTINCT {quote('task_id')} FROM {quote(cls._meta.db_table)} "
                           f"WHERE {quote('task_id')} IN ({', '.join(['%s'] * len(task_ids))})", task_ids)
            return {str(task_id) for (task_id,) in cursor.fetchall()}
