"""`manage.py run_delegation PACKET.json`: run one packet in-process to a terminal state
recording the run in the database like any other.

Exit status: 0 when the run ends COMPLETE with SUCCESS or PARTIAL_COMPLETION, 1 for any
other terminal state, 2 for unusable input (the reason on stderr).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from delegations.models import Approval, Run, RunEvent
from delegations.models.runs import TERMINAL
from delegations.protocol.approvals import AutoGate, Decision
from delegations.protocol.errors import ProtocolError
from delegations.protocol.lifecycle import RunState
from delegations.run_pages.failure import failure_headline
from delegations.runs.execution import Execution
from delegations.runs.leases import acquire_lease, new_lease_owner, release_lease
from delegations.runs.workflows import run_cancel, run_create

UNUSABLE = 2
POLL_SECONDS = 1.0


def _read_json(source: str, what: str) -> Any:
    """JSON text, or ``@path`` / a path to a JSON file (``-`` is stdin)."""
    try:
        if source == "-":
            text = sys.stdin.read()
        elif what == "packet" or source.startswith("@"):
            text = Path(source.removeprefix("@") if what != "packet" else source).read_text("utf-8")
        else:
            text = source
    except OSError as exc:
        raise CommandError(f"Cannot read the {what} file: {exc}", returncode=UNUSABLE) from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CommandError(f"The {what} is not valid JSON: {exc}", returncode=UNUSABLE) from None


class Command(BaseCommand):
    help = ("Run a hand-off packet (any dialect Handoff reads) in-process and print its events as they "
            "happen, then the result. Exit 0 = COMPLETE with SUCCESS/PARTIAL_COMPLETION, "
            "1 = another terminal state, 2 = unusable input.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("packet", help="PACKET.json (or - for stdin)")
        parser.add_argument("--adapter", default=None, help="local, openai, anthropic or scripted "
                                                            "(default: HANDOFF_DEFAULT_ADAPTER)")
        parser.add_argument("--adapter-config", default=None, metavar="JSON|@file")
        parser.add_argument("--json", action="store_true", dest="as_json",
                            help="One event per line in the websocket shape; the last line is "
                                 "the result event.")
        decide = parser.add_mutually_exclusive_group()
        decide.add_argument("--auto-approve", action="store_true",
                            help="Approve every approval the run meets (scripts).")
        decide.add_argument("--auto-reject", action="store_true",
                            help="Reject every approval the run meets (scripts).")
        parser.add_argument("--owner", default=None, help="Username to record as the run's owner.")

    def handle(self, *args: Any, packet: str, adapter: str | None, adapter_config: str | None,
               as_json: bool, auto_approve: bool, auto_reject: bool, owner: str | None,
               **options: Any) -> None:
        self.as_json = as_json
        self.labels: dict[str, str] = {}
        data = _read_json(packet, "packet")
        config = _read_json(adapter_config, "adapter config") if adapter_config else None
        if config is not None and not isinstance(config, dict):
            raise CommandError("--adapter-config must be a JSON object.", returncode=UNUSABLE)
        user = None
        if owner:
            user = get_user_model().objects.filter(username=owner).first()
            if user is None:
                raise CommandError(f"No user named '{owner}'.", returncode=UNUSABLE)
        try:
            run = run_create(packet=data, adapter=adapter, config=config, owner=user, start=False)
        except ProtocolError as exc:
            lines = [exc.message, *(f"  {i.field or '(packet)'}: {i.message}" for i in exc.issues)]
            raise CommandError("\n".join(lines), returncode=UNUSABLE) from None
        self.labels[run.pk] = run.label or "root"
        self.print_events([row.as_wire() for row in RunEvent.objects.filter(run=run).order_by("seq")])
        if not run.is_terminal:
            gate = AutoGate(Decision.APPROVE if auto_approve else Decision.REJECT) \
                if (auto_approve or auto_reject) else None
            self.run_tree(run, gate)
        run.refresh_from_db()
        if not self.as_json:
            self.print_summary(run)
        if not run.succeeded:
            sys.exit(1)

    # -- running -------------------------------------------------------------------------
    def run_tree(self, run: Run, gate: AutoGate | None) -> None:
        owner = new_lease_owner()
        leased = acquire_lease(run.pk, owner)
        if leased is None:
            raise CommandError(f"Run {run.pk} is held by another worker.", returncode=1)
        execution = Execution(leased, owner, gate=gate, listener=self.print_events)
        try:
            asyncio.run(self._until_done(execution))
        except KeyboardInterrupt:
            self.stderr.write("Interrupted: the run was cancelled.")
        finally:
            release_lease(run.pk, owner)
            execution.db.close()

    async def _until_done(self, execution: Execution) -> None:
        while True:
            state = await execution.drive()
            if state != RunState.AWAITING_APPROVAL:
                return
            pending = await execution.db.call(_pending_items, execution.root_id)
            for line in pending:
                self.stderr.write(line)
            # hold the lease while a person decides, so that no server worker resumes the
            # run meanwhile: this command resumes it once everything is decided
            waited = 0.0
            while (step := await execution.db.call(_while_parked, execution.root_id,
                                                   execution.owner)) == "wait":
                await asyncio.sleep(POLL_SECONDS)
                waited += POLL_SECONDS
                if waited >= 5:
                    waited = 0.0
                    await execution.renew_lease()
            if step == "over":
                return

    # -- printing ------------------------------------------------------------------------
    def print_events(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            if event["type"] == "child":
                self.labels[event["data"].get("child_run_id", "")] = event["data"].get("label", "child")
            if self.as_json:
                self.stdout.write(json.dumps(event, default=str, ensure_ascii=False))
            else:
                self.stdout.write(self._human(event))
        self.stdout.flush()

    def _human(self, event: dict[str, Any]) -> str:
        who = self.labels.get(event["run_id"], event["run_id"][:8])
        data = event["data"]
        kind = event["type"]
        if kind == "state":
            detail = f"{data.get('previous') or '-'} -> {data.get('state')}"
        elif kind == "text":
            detail = data.get("delta", "")
        elif kind == "tool_call":
            detail = f"{data.get('name')}({json.dumps(data.get('arguments'), ensure_ascii=False)[:200]})"
        elif kind == "tool_result":
            detail = f"{data.get('name')}: {'ok' if data.get('ok') else 'failed'}"
        elif kind == "model_call":
            detail = (f"{data.get('model')} in={data.get('input_tokens')} "
                      f"out={data.get('output_tokens')} {data.get('duration_ms')} ms")
        elif kind in ("error", "log"):
            detail = str(data.get("message") or data)
        elif kind == "child":
            detail = f"spawned {data.get('label')} ({data.get('child_run_id')})"
        elif kind == "approval":
            detail = f"{data.get('kind')}: {data.get('title')}" + (
                f" -> {data['decision']}" if data.get("decision") else "")
        elif kind == "result":
            status = (data.get("result") or {}).get("status")
            detail = f"{data.get('state')}" + (f" ({status})" if status else "")
        else:
            detail = json.dumps(data, ensure_ascii=False, default=str)[:200]
        return f"[{who} #{event['seq']}] {kind}: {detail}"

    def print_summary(self, run: Run) -> None:
        """After the events: why the run did not finish (when it did not), then its state,
        result and error."""
        headline = failure_headline(run.state, run.error, run.result, skill=run.skill,
                                    findings=run.findings or [])
        self.stdout.write("")
        if headline:
            self.stdout.write(headline)
        self.stdout.write(f"Run {run.pk}: {run.state}")
        if run.result:
            self.stdout.write(json.dumps(run.result, indent=2, ensure_ascii=False, default=str))
        if run.error:
            self.stdout.write(f"Error: {run.error.get('code')}: {run.error.get('message')}")


def _pending_items(root_id: str) -> list[str]:
    items = Approval.objects.pending().filter(run__root_id=root_id).order_by("pk")
    return [f"Waiting for a decision on approval {item.pk} ({item.kind}): {item.title} -- decide "
            f"it in the inbox or POST /api/approvals/{item.pk}/decision" for item in items]


def _while_parked(root_id: str, owner: str) -> str:
    """"wait" while a person has not decided, "resume" once everything is decided, "over"
    when the run ended meanwhile (a cancel request is carried out here: nobody executes a
    parked run, so the cancel endpoint only recorded it while this command held the lease)."""
    run = Run.objects.get(pk=root_id)
    if run.is_terminal:
        return "over"
    asked = run.tree().filter(cancel_requested_at__isnull=False).exclude(state__in=TERMINAL)
    first = asked.order_by("depth").first()
    if first is not None:
        release_lease(root_id, owner)
        run_cancel(run=first, reason="Cancelled while waiting for a decision.")
        return "over" if Run.objects.get(pk=root_id).is_terminal else "resume"
    return "wait" if Approval.objects.pending_in_tree(root_id).exists() else "resume"
