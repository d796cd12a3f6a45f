"""A checkpoint's conversation and adapter config move to rows of their own
(RunCheckpointPart), so a save writes only what changed."""

import django.db.models.deletion
from django.db import migrations, models

LIST_PARTS, WHOLE_PARTS = ("messages",), ("adapter_config",)


def split_checkpoints(apps, schema_editor):
    RunCheckpoint = apps.get_model("delegations", "RunCheckpoint")
    RunCheckpointPart = apps.get_model("delegations", "RunCheckpointPart")
    for checkpoint in RunCheckpoint.objects.iterator():
        data = dict(checkpoint.data)
        parts = [RunCheckpointPart(run_id=checkpoint.run_id, field=name, position=position, data=item)
                 for name in LIST_PARTS for position, item in enumerate(data.pop(name, None) or [])]
        parts += [RunCheckpointPart(run_id=checkpoint.run_id, field=name, data=data.pop(name))
                  for name in WHOLE_PARTS if name in data]
        if parts:
            RunCheckpointPart.objects.bulk_create(parts, batch_size=500)
            RunCheckpoint.objects.filter(pk=checkpoint.pk).update(data=data)


def join_checkpoints(apps, schema_editor):
    RunCheckpoint = apps.get_model("delegations", "RunCheckpoint")
    RunCheckpointPart = apps.get_model("delegations", "RunCheckpointPart")
    for checkpoint in RunCheckpoint.objects.iterator():
        data = dict(checkpoint.data)
        lists: dict[str, list] = {}
        parts = RunCheckpointPart.objects.filter(run_id=checkpoint.run_id).order_by("field", "position")
        for name, item in parts.values_list("field", "data"):
            if name in LIST_PARTS:
                lists.setdefault(name, []).append(item)
            else:
                data[name] = item
        data.update(lists)
        RunCheckpoint.objects.filter(pk=checkpoint.pk).update(data=data)


class Migration(migrations.Migration):

    dependencies = [
        ("delegations", "0004_run_checkpoints"),
    ]

    operations = [
        migrations.CreateModel(
            name="RunCheckpointPart",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("field", models.CharField(max_length=40)),
                ("position", models.PositiveIntegerField(default=0)),
                ("data", models.JSONField(null=True)),
                ("run", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="+",
                                          to="delegations.run")),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("run", "field", "position"),
                                                        name="run_checkpoint_part_unique")],
            },
        ),
        migrations.RunPython(split_checkpoints, join_checkpoints),
    ]
