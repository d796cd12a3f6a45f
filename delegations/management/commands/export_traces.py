"""`manage.py export_traces --run ID`: send a finished run tree to the trace collector again.

Every tree is sent once by itself when it ends (README, Traces); this sends one again: a
tree that ended while the collector was down, or before tracing was switched on. The trace
is written from the stored events, with the same trace and span ids as the first time, so
a viewer that has the trace already shows the same spans.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from delegations.management.commands.subagents import find_run
from delegations.models import Run
from delegations.runs import traces

# how long the command waits for the collector to take the spans: longer than the
# exporter's own timeout and retries for one batch (10 s by default)
SEND_TIMEOUT_S = 30.0


class Command(BaseCommand):
    help = "Send finished run trees to the OpenTelemetry collector (OTEL_EXPORTER_OTLP_ENDPOINT)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--run", action="append", dest="runs", required=True, metavar="ID",
                            help="a run of the tree (id, unique prefix or session key); repeatable")

    def handle(self, *args: Any, **options: Any) -> None:
        if not traces.enabled():
            raise CommandError("Tracing is off: set OTEL_EXPORTER_OTLP_ENDPOINT to the collector's "
                               "OTLP/HTTP address (e.g. http://127.0.0.1:4318) and run this again.")
        roots = [self._finished_root(find_run(ref)) for ref in options["runs"]]
        exporter = traces.exporter()
        before = exporter.losses.total
        written = {root.pk: exporter.export_now(root.pk) for root in dict.fromkeys(roots)}
        if not exporter.flush(SEND_TIMEOUT_S) or exporter.losses.total > before:
            problem = exporter.losses.problem or "no answer in time"
            raise CommandError(f"The collector did not take the spans ({problem}); check "
                               f"OTEL_EXPORTER_OTLP_ENDPOINT and that the collector is up.")
        for root_id, count in written.items():
            root = next(run for run in roots if run.pk == root_id)
            trace_id = traces.trace_id_of(root)
            where = traces.trace_url(trace_id)
            self.stdout.write(f"run {root_id}: {count} spans sent, trace {trace_id}"
                              + (f" ({where})" if where else "")
                              + ("" if count else " (the sampler, OTEL_TRACES_SAMPLER, left it out)"))
        exporter.shutdown()
        if settings.HANDOFF_TRACE_CAPTURE_CONTENT:
            self.stdout.write("Prompts, outputs and tool arguments were included "
                              "(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT).")

    def _finished_root(self, run: Run) -> Run:
        root = Run.objects.get(pk=run.root_run_id)
        if not root.is_terminal:
            raise CommandError(f"Run {run.pk}'s tree has not ended (its root {root.pk} is "
                               f"{root.state}); its trace is sent when it ends.")
        return root
