"""Approval rules: a simulation on a realistic history, and how long an item waits for its rule.

On a throwaway SQLite database (``throwaway_site``):

1. **Simulation.** 200 items people decided over a working week, as a team's runs ask
   them: price fetches from the price host (approved, but two of them rejected: an admin
   path and a query a person judged too wide), fetches from other hosts (mostly rejected),
   deletes under ``tmp/`` and under ``src/``, budget items, invalid results. The rule
   "price hosts" (``http_get`` to ``prices.example.com``) is simulated on them as the save
   would: counts, and every disagreement with a person.
2. **Latency.** With 100 rules in force (99 that do not match, checked first; the
   deciding rule last), scripted runs are started as the site starts them (``run_create``,
   tasks executed at once); each asks to delete a file under ``tmp/``. Measured per run:
   the item stored -> its rule decision recorded, and the item stored -> the resumed
   run's next event (the runner's decided ``approval`` event). Target: p50 under 50 ms.

    .venv/bin/python tests/benchmarks/bench_rules.py [--runs 50]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.throwaway_site import DATA_DIR  # first: it sets up Django

# isort: split

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import override_settings

from delegations.inbox.rule_decisions import rules_in_force
from delegations.inbox.rule_store import rule_save, rule_simulate
from delegations.inbox.rules import rule_problems
from delegations.models import Approval, ApprovalRule, Run
from delegations.protocol.approvals import Decision
from delegations.runs.workflows import run_create
from tests.conftest import make_user
from tests.delegations import scripts

PRICE_HOSTS = {"kinds": ["capability"], "capabilities": ["network_outbound"], "tools": ["http_get"],
               "arguments": [{"name": "url", "op": "host", "value": "prices.example.com"}]}
TMP_DELETES = {"kinds": ["capability"], "tools": ["delete_file"],
               "arguments": [{"name": "path", "op": "under", "value": "tmp"}]}
TARGET_MS = 50.0


def _history(owner: User, people: list[User]) -> None:
    """200 decided items, oldest first, as a week of a team's runs left them."""
    fetcher = Run.objects.create(owner=owner, adapter_name="scripted", skill="price-check@1.4.0",
                                 capabilities=["network_outbound", "file_delete"], state="COMPLETE")
    plan: list[tuple[str, dict[str, Any], Decision]] = []
    for n in range(90):
        plan.append(("capability", {"tool": "http_get", "capability": "network_outbound",
                                    "arguments": {"url": f"https://prices.example.com/v2/quote/{n}"}},
                     Decision.APPROVE))
    plan.append(("capability", {"tool": "http_get", "capability": "network_outbound",
                                "arguments": {"url": "https://prices.example.com/admin/export"}}, Decision.REJECT))
    plan.append(("capability", {"tool": "http_get", "capability": "network_outbound",
                                "arguments": {"url": "https://prices.example.com/v2/quote/all?limit=100000"}},
                 Decision.REJECT))
    for n in range(30):
        decision = Decision.APPROVE if n % 5 == 0 else Decision.REJECT
        plan.append(("capability", {"tool": "http_get", "capability": "network_outbound",
                                    "arguments": {"url": f"https://mirror{n}.example.net/prices"}}, decision))
    for n in range(40):
        plan.append(("capability", {"tool": "delete_file", "capability": "file_delete",
                                    "arguments": {"path": f"tmp/cache-{n}.json"}}, Decision.APPROVE))
    for n in range(20):
        plan.append(("capability", {"tool": "delete_file", "capability": "file_delete",
                                    "arguments": {"path": f"src/module_{n}.py"}}, Decision.REJECT))
    for n in range(12):
        plan.append(("budget", {"axis": "max_tokens", "limit": 100000, "used": 81000 + n}, Decision.APPROVE))
    for n in range(6):
        plan.append(("invalid_result", {"problems": [f"output_payload.price: expected a number ({n})"]},
                     Decision.REJECT))
    for index, (kind, payload, decision) in enumerate(plan):
        item = Approval.objects.create(run=fetcher, key=f"{fetcher.pk}:{kind}:{index}", kind=kind,
                                       title=f"{kind} #{index}", payload=payload)
        item.record(decision, user=people[index % len(people)],
                    comment="" if decision == Decision.APPROVE else "Not this one.")


def _simulation() -> None:
    draft = ApprovalRule(name="price hosts", match=PRICE_HOSTS, effect="approve")
    started = time.perf_counter()
    result = rule_simulate(rule=draft)
    took = (time.perf_counter() - started) * 1000
    print(f"simulation of rule 'price hosts' on the last {result.window} decisions "
          f"({result.looked_at} looked at, {took:.0f} ms):")
    print(f"  would approve {result.approved}, reject {result.rejected}, two approvers {result.two_approvers}; "
          f"{len(result.disagreements)} disagreements with people"
          f"{' (approves what a person rejected: needs confirmation)' if result.approves_what_a_person_rejected else ''}")
    for disagreement in result.disagreements:
        print(f"    #{disagreement['id']} {disagreement['url']}: rule {disagreement['rule']}, "
              f"{disagreement['decided_by']} decided {disagreement['person']}")


def _rules(author: User, count: int) -> None:
    """``count - 1`` rules that never match a delete under tmp/, then the one that does."""
    for n in range(count - 1):
        match = ({"tools": ["http_get"], "arguments": [{"name": "url", "op": "host", "value": f"h{n}.example.org"}]}
                 if n % 3 == 0 else
                 {"kinds": ["capability"], "skill": {"name": f"skill-{n}", "versions": ">=1,<2"}}
                 if n % 3 == 1 else
                 {"tools": ["delete_file"], "arguments": [{"name": "path", "op": "under", "value": f"keep{n}"}]})
        assert not rule_problems(match=match, effect="approve", comment="", matches_everything=False)
        # stored directly: saving through rule_save simulates each on the history (minutes for 99)
        ApprovalRule.objects.create(name=f"rule {n}", reason="bench", effect="approve", match=match,
                                    owner=author).keep_version(saved_by=author)
    rule_save(rule=None, user=author, confirm_disagreements=True,
              data={"name": "tmp deletes", "reason": "cache files", "effect": "approve", "match": TMP_DELETES})


def _latency(owner: User, runs: int) -> None:
    config = {"script": [{"text": "Clearing the cache.", "tool_calls": [
        {"name": "delete_file", "arguments": {"path": "tmp/cache.json"}}]}, scripts.yield_turn()]}
    decided, next_event = [], []
    for _ in range(runs):
        run = run_create(packet=scripts.approval_packet(), adapter="scripted", config=config, owner=owner)
        item = Approval.objects.select_related("rule_decision").get(run=run)
        assert item.status == "approved" and item.rule_decision.rule_name == "tmp deletes", item.status
        opened = item.requested_at
        decided.append((item.rule_decision.decided_at - opened).total_seconds() * 1000)
        after = run.events.filter(type="approval", data__decision="approve").order_by("seq").first()
        assert after is not None
        next_event.append((after.ts - opened).total_seconds() * 1000)
    for name, figures in (("item stored -> decided by its rule", decided),
                          ("item stored -> resumed run's next event", next_event)):
        figures.sort()
        p95 = figures[max(0, int(len(figures) * 0.95) - 1)]
        print(f"  {name}: p50 {statistics.median(figures):.1f} ms, p95 {p95:.1f} ms "
              f"(target p50 < {TARGET_MS:.0f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    logging.getLogger("django.tasks").setLevel(logging.WARNING)
    owner = make_user(User, "carol", "composers", password=None)
    people = [make_user(User, name, "approvers", password=None) for name in ("alice", "bob", "erin")]
    author = make_user(User, "rita", "approvers", "rule_authors", password=None)
    _history(owner, people)
    _simulation()
    _rules(author, 100)
    print(f"latency with {len(rules_in_force().rules)} rules in force, {args.runs} runs:")
    workspaces = tempfile.mkdtemp(dir=DATA_DIR)
    tasks = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
    with override_settings(TASKS=tasks, HANDOFF_WORKSPACE_ROOT=Path(workspaces)):
        assert tasks == settings.TASKS
        _latency(owner, args.runs)


if __name__ == "__main__":
    main()
