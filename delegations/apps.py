from django.apps import AppConfig


class DelegationsConfig(AppConfig):
    name = "delegations"
    verbose_name = "Delegations and runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # the lost-run sweeper and the archiver run on every background worker's heartbeat
        from .tasks import register_periodic_jobs

        register_periodic_jobs()
