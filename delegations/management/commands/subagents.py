"""`manage.py subagents list|stop|log|info|send` (OpenClaw's /subagents command).

A run is named by its id, a unique prefix of it (at least 6 characters), or its session
key (``agent:<agentId>:subagent:<uuid>``).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Q
from django.utils import timezone

from delegations.models import Run, RunEvent
from delegations.protocol.events import EventType
from delegations.runs.workflows import RunError, run_cancel, run_send_message

MIN_PREFIX = 6


def find_run(ref: str) -> Run:
    """The run named by an id, a unique id prefix, or a session key."""
    run = Run.objects.filter(Q(pk=ref) | Q(session_key=ref)).first()
    if run is not None:
        return run
    if len(ref) >= MIN_PREFIX:
        matches = list(Run.objects.filter(pk__startswith=ref)[:2])
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise CommandError(f"'{ref}' matches several runs; give more of the id.")
    raise CommandError(f"No run '{ref}' (give a run id, a unique prefix of {MIN_PREFIX}+ "
                       f"characters, or a session key; `subagents list --all` shows them).")


def _age(run: Run) -> str:
    seconds = run.duration_s
    return "-" if seconds is None else f"{seconds:.1f}s"


class Command(BaseCommand):
    help = "Manage sub-agent runs: list, stop, log, info, send (as OpenClaw's /subagents)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        listing = actions.add_parser("list", help="Active runs (all runs with --all).")
        listing.add_argument("--all", action="store_true", dest="show_all")
        listing.add_argument("--owner", default=None)
        listing.add_argument("--limit", type=int, default=50)
        stop = actions.add_parser("stop", help="Cancel a run and its descendants, or 'all'.")
        stop.add_argument("ref", help="run id / prefix / session key, or 'all'")
        stop.add_argument("--owner", default=None, help="with 'all': only this user's runs")
        log = actions.add_parser("log", help="A run's events.")
        log.add_argument("ref")
        log.add_argument("--type", action="append", dest="types", default=None,
                         choices=[t.value for t in EventType], help="Only these types (repeatable).")
        log.add_argument("--after", type=int, default=0, help="Events after this seq.")
        log.add_argument("--limit", type=int, default=200)
        log.add_argument("--tree", action="store_true", help="Include the descendants' events.")
        log.add_argument("--json", action="store_true", dest="as_json")
        info = actions.add_parser("info", help="Run metadata and session details.")
        info.add_argument("ref")
        info.add_argument("--json", action="store_true", dest="as_json")
        send = actions.add_parser("send", help="Send a message to a running sub-agent.")
        send.add_argument("ref")
        send.add_argument("text")

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        getattr(self, f"do_{action}")(**options)

    def do_list(self, *, show_all: bool, owner: str | None, limit: int, **_: Any) -> None:
        runs = Run.objects.select_related("owner").order_by("-created_at")
        if not show_all:
            runs = runs.active()
        if owner:
            runs = runs.filter(owner__username=owner)
        rows = list(runs[:max(1, limit)])
        if not rows:
            self.stdout.write("No active runs." if not show_all else "No runs.")
            return
        self.stdout.write(f"{'ID':<32}  {'STATE':<17}  {'DEPTH':>5}  {'TIME':>8}  {'TOKENS':>7}  "
                          f"LABEL / SESSION")
        for run in rows:
            tokens = (run.usage or {}).get("total_tokens", 0)
            self.stdout.write(f"{run.pk:<32}  {run.state:<17}  {run.depth:>5}  {_age(run):>8}  "
                              f"{tokens:>7}  {run.label or run.goal[:30]}  {run.session_key}")

    def do_stop(self, *, ref: str, owner: str | None, **_: Any) -> None:
        if ref == "all":
            targets = Run.objects.roots().active()
            if owner:
                targets = targets.filter(owner__username=owner)
        else:
            targets = Run.objects.filter(pk=find_run(ref).pk)
        stopped = 0
        for run in targets:
            try:
                after = run_cancel(run=run, reason="Stopped from the command line.")
            except RunError as exc:
                if ref != "all":
                    raise CommandError(exc.message) from None
                continue
            stopped += 1
            state = after.state if after.is_terminal else "cancel requested (its worker stops it)"
            self.stdout.write(f"{run.pk}: {state}")
        if ref == "all":
            self.stdout.write(f"Stopped {stopped} run(s).")

    def do_log(self, *, ref: str, types: list[str] | None, after: int, limit: int, tree: bool,
               as_json: bool, **_: Any) -> None:
        run = find_run(ref)
        events = RunEvent.objects.filter(run_id__in=run.tree().values("pk")) if tree else \
            RunEvent.objects.filter(run=run, seq__gt=after)
        if types:
            events = events.filter(type__in=types)
        rows = list(events.order_by("pk")[:max(1, limit)])
        for row in rows:
            if as_json:
                self.stdout.write(json.dumps(row.as_wire(), ensure_ascii=False, default=str))
                continue
            stamp = timezone.localtime(row.ts).strftime("%H:%M:%S.%f")[:-3]
            data = json.dumps(row.data, ensure_ascii=False, default=str)
            self.stdout.write(f"{stamp} {row.run_id[:8]} #{row.seq:<4} {row.type:<11} {data[:300]}")
        if not rows:
            self.stdout.write("No events.")

    def do_info(self, *, ref: str, as_json: bool, **_: Any) -> None:
        run = find_run(ref)
        info = {
            "id": run.pk, "session_key": run.session_key, "label": run.label, "goal": run.goal,
            "state": run.state, "owner": run.owner.get_username() if run.owner else None,
            "parent": run.parent_id, "root": run.root_run_id, "depth": run.depth,
            "children": list(run.children.values_list("pk", flat=True)),
            "skill": run.skill, "subagent_type": run.subagent_type,
            "adapter": {"name": run.adapter_name, "config": run.adapter_config},
            "input_hash": run.input_hash, "capabilities": run.capabilities, "budget": run.budget,
            "usage": run.usage, "timeout_s": run.timeout_s, "cleanup": run.cleanup,
            "attempt": run.attempt, "created_at": run.created_at, "allocated_at": run.allocated_at,
            "started_at": run.started_at, "finished_at": run.finished_at,
            "archived_at": run.archived_at, "lease_owner": run.lease_owner or None,
            "result_status": (run.result or {}).get("status"),
            "summary": (run.result or {}).get("summary"), "error": run.error,
            "events": run.last_seq,
        }
        if as_json:
            self.stdout.write(json.dumps(info, ensure_ascii=False, default=str, indent=2))
            return
        for key, value in info.items():
            shown = json.dumps(value, ensure_ascii=False, default=str) if isinstance(value, dict | list) \
                else ("-" if value in (None, "") else value)
            self.stdout.write(f"{key:>14}: {shown}")

    def do_send(self, *, ref: str, text: str, **_: Any) -> None:
        run = find_run(ref)
        try:
            message = run_send_message(run=run, text=text)
        except RunError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"Message {message.pk} queued for {run.pk}; it reaches the sub-agent "
                          f"at its next turn.")
