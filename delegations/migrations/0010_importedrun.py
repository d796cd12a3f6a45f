import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('delegations', '0009_approval_decisions_and_deadlines'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='ImportedRun',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('created_at', models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                ('label', models.CharField(blank=True, help_text="The run's label (or the start of its goal) when it was imported.", max_length=200)),
                ('document', models.JSONField(help_text='The run export (format handoff.run-export), as validated.')),
                ('owner', models.ForeignKey(help_text='Who imported it.', on_delete=django.db.models.deletion.CASCADE, related_name='imported_runs', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'imported run',
                'ordering': ['-created_at', '-pk'],
            },
        ),
    ]
