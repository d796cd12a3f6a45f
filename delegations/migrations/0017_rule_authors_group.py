from django.db import migrations


def create_group(apps, schema_editor):
    # the third role (approval rules) came after 0002 made the first two groups: without it a
    # fresh installation's admin had no "rule_authors" group to add a person to
    apps.get_model("auth", "Group").objects.get_or_create(name="rule_authors")


class Migration(migrations.Migration):
    dependencies = [("delegations", "0016_approval_kind_review")]
    operations = [migrations.RunPython(create_group, migrations.RunPython.noop)]
