"""Checkpoints move from a column of Run to a table of their own (see RunCheckpoint)."""

import django.db.models.deletion
from django.db import migrations, models


def move_checkpoints(apps, schema_editor):
    Run = apps.get_model("delegations", "Run")
    RunCheckpoint = apps.get_model("delegations", "RunCheckpoint")
    saved = Run.objects.exclude(checkpoint__isnull=True).values_list("pk", "checkpoint").iterator()
    RunCheckpoint.objects.bulk_create(
        (RunCheckpoint(run_id=run_id, data=data) for run_id, data in saved if data), batch_size=500)


def move_checkpoints_back(apps, schema_editor):
    Run = apps.get_model("delegations", "Run")
    RunCheckpoint = apps.get_model("delegations", "RunCheckpoint")
    for run_id, data in RunCheckpoint.objects.values_list("run_id", "data").iterator():
        Run.objects.filter(pk=run_id).update(checkpoint=data)


class Migration(migrations.Migration):

    dependencies = [
        ("delegations", "0003_runs"),
    ]

    operations = [
        migrations.CreateModel(
            name="RunCheckpoint",
            fields=[
                ("run", models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True,
                                             related_name="saved_checkpoint", serialize=False,
                                             to="delegations.run")),
                ("data", models.JSONField()),
            ],
        ),
        migrations.RunPython(move_checkpoints, move_checkpoints_back),
        migrations.RemoveField(
            model_name="run",
            name="checkpoint",
        ),
    ]
