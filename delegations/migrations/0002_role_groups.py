from django.db import migrations

ROLE_GROUPS = ("composers", "approvers")


def create_groups(apps, schema_editor):
    group = apps.get_model("auth", "Group")
    for name in ROLE_GROUPS:
        group.objects.get_or_create(name=name)


class Migration(migrations.Migration):
    dependencies = [("delegations", "0001_initial"), ("auth", "0012_alter_user_first_name_max_length")]
    operations = [migrations.RunPython(create_groups, migrations.RunPython.noop)]
