from django.apps import AppConfig


class DelegationsConfig(AppConfig):
    name = "delegations"
    verbose_name = "Delegations and runs"
    default_auto_field = "django.db.models.BigAutoField"
