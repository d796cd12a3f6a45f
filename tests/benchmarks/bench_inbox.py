"""The approval inbox with 1,000 pending items: server time for its page.

Run: `.venv/bin/python tests/benchmarks/bench_inbox.py [--items N] [--rounds N]`.
It builds a throwaway SQLite database in a temporary folder (HANDOFF_DATA_DIR) holding N
pending items (default 1,000) raised by 100 run trees (a root, a subagent at depth 1 and
one at depth 2 under it; each run with a few dozen events: streamed text, tool calls and
results), then GETs the inbox's first page as an approver who owns none of the runs,
through Django's test client: the whole middleware stack, sessions, the ORM, each item's
context (lineage, budget left, recent activity, refusal, allowed decisions) and rendering,
everything but the network. Prints median, p95 and the query count, then one JSON line.
Target: under 100 ms.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.throwaway_site import time_page  # first: it sets up Django

# isort: split

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from delegations.accounts.roles import APPROVERS, COMPOSERS
from delegations.models import Approval, Run
from delegations.runs.record import append_events

TARGET_MS = 100.0
TREES = 100


def make_run(owner: Any, label: str, parent: Run | None = None) -> Run:
    run = Run(owner=owner, label=label, goal=f"Research {label} and answer with JSON", subagent_type="researcher",
              packet={}, input_hash="0" * 64, adapter_name="scripted", state="AWAITING_APPROVAL",
              budget={"max_model_calls": 20, "max_tokens": 50_000, "max_cost_usd": 1.0},
              usage={"model_calls": 5, "input_tokens": 9_000, "output_tokens": 2_000, "cost_usd": 0.2},
              parent=parent, depth=parent.depth + 1 if parent else 0, started_at=timezone.now())
    run.root_id = parent.root_run_id if parent else run.pk
    run.save()
    events: list[tuple[Run, str, dict[str, Any]]] = []
    for turn in range(8):
        events += [(run, "text", {"delta": f"Turn {turn}: reading "}), (run, "text", {"delta": "the sources."}),
                   (run, "tool_call", {"id": f"c{turn}", "name": "read_file", "arguments": {"path": f"{turn}.md"}}),
                   (run, "tool_result", {"id": f"c{turn}", "name": "read_file", "ok": True, "result": {"size": 10}})]
    append_events(events)
    return run


def build(owner: Any, items: int) -> None:
    askers: list[Run] = []
    for tree in range(TREES):
        root = make_run(owner, f"root-{tree}")
        middle = make_run(owner, f"middle-{tree}", root)
        askers += [root, middle, make_run(owner, f"leaf-{tree}", middle)]
    now = timezone.now()
    Approval.objects.bulk_create([
        Approval(run=askers[number % len(askers)], key=f"bench:{number}", kind="capability",
                 title=f"Run wants to http_get (network_outbound) #{number}", risk="medium",
                 payload={"tool": "http_get", "capability": "network_outbound", "call_id": f"c{number}",
                          "arguments": {"url": f"https://example.com/prices/{number}.json"}},
                 requested_at=now - timedelta(seconds=items - number), expires_at=now + timedelta(hours=24))
        for number in range(items)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()

    call_command("migrate", verbosity=0)
    users = get_user_model().objects
    owner = users.create_user("owner", password="bench-password-123")
    owner.groups.add(Group.objects.get_or_create(name=COMPOSERS)[0])
    approver = users.create_user("approver", password="bench-password-123")
    approver.groups.add(Group.objects.get_or_create(name=APPROVERS)[0])
    build(owner, args.items)
    client = Client()
    client.force_login(approver)
    url = "/inbox/"

    first = client.get(url)   # warm: templates compiled
    assert first.status_code == 200, first.status_code
    html = first.content.decode()
    assert f'data-count="{args.items}"' in html and html.count('class="approval inbox-item') == 20
    median, p95, queries = time_page(client, url, args.rounds)
    verdict = "meets" if median < TARGET_MS else "MISSES"
    print(f"inbox page, {args.items} pending: median {median:.1f} ms, p95 {p95:.1f} ms over {args.rounds} "
          f"GETs, {queries} queries, {len(first.content) // 1024} KB; {verdict} the {TARGET_MS:.0f} ms target")
    print(json.dumps({"case": "inbox_page", "items": args.items, "median_ms": round(median, 1),
                      "p95_ms": round(p95, 1), "queries": queries, "target_ms": TARGET_MS}))


if __name__ == "__main__":
    main()
