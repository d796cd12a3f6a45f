from django.apps import AppConfig
from django.conf import settings


class DelegationsConfig(AppConfig):
    name = "delegations"
    verbose_name = "Delegations and runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # the inbox hears of the items runs open (the gate lives below it and cannot call it):
        # approval rules decide first, so the webhook calls a person only for what is left
        from delegations.inbox import rule_decisions, webhook
        from delegations.interop.a2a import push_delivery
        from delegations.protocol.adapters.endpoints import use_endpoints
        from delegations.runs.approval_gate import on_approval_opened

        on_approval_opened(rule_decisions.decide_on_open)
        webhook.listen()
        # A2A callers hear of their tasks' state changes, which the event log tells of
        push_delivery.listen()
        # the hosted adapters call the operator's endpoints only (read at each construction,
        # so a test's override_settings is seen)
        use_endpoints(lambda: settings.HANDOFF_MODEL_ENDPOINTS)
        # run trees go to the trace collector as they end; with no collector named, nothing
        # of the exporter (or of OpenTelemetry's SDK) is even imported
        if settings.HANDOFF_TRACES_ENABLED:
            from delegations.runs import traces

            traces.listen()
