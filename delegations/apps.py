from django.apps import AppConfig


class DelegationsConfig(AppConfig):
    name = "delegations"
    verbose_name = "Delegations and runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # the inbox hears of the items runs open (the gate lives below it and cannot call it)
        from delegations.inbox import webhook

        webhook.listen()
