"""The tree editor on a 100-node tree: server time for its page.

Run: `.venv/bin/python tests/benchmarks/bench_tree.py [--nodes N] [--rounds N]`.
It builds a throwaway SQLite database in a temporary folder (HANDOFF_DATA_DIR), stores a
tree of N delegations (default 100: a root, 9 children, each with up to 10 grandchildren
and a great-grandchild under some) through the composer's services, then GETs the tree
page through Django's test client: the whole middleware stack, sessions, the ORM, linting
every node against its parent and rendering, everything but the network. Prints median,
p95 and the query count, then one JSON line. Target: the page is ready in under 300 ms.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.throwaway_site import time_page  # first: it sets up Django

# isort: split

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.test import Client

from delegations.accounts.roles import COMPOSERS
from delegations.composer.services import delegation_create
from delegations.models import Delegation

TARGET_MS = 300.0


def node_packet(label: str, depth: int, calls: int) -> dict[str, Any]:
    """A delegation that lints as a real one would: every contract part, its depth set."""
    return {
        "goal": f"Research part {label} of the caching comparison and answer with JSON",
        "subagent_type": "researcher", "label": label, "depth": depth, "allow_nested": depth < 2,
        "instruction_set": "Compare the options; return JSON with your answer.",
        "input_data": {"options": ["a", "b", "c"]}, "allowed_inputs": ["options"],
        "expected_output_schema": {"answer": "integer"}, "success_criteria": ["JSON is schema-valid"],
        "timeout_s": 60, "feature_name": "caching", "capabilities": ["web_search"],
        "budget": {"max_model_calls": calls, "max_tokens": calls * 5000, "max_cost_usd": calls / 100},
    }


def build_tree(owner: Any, nodes: int) -> Delegation:
    root = delegation_create(owner=owner, name="bench root", packet=node_packet("root", 0, 1000))
    made, frontier = 1, [(root, 0, 1000)]
    while made < nodes:
        parent, depth, calls = frontier.pop(0)
        for index in range(10):
            if made >= nodes:
                break
            share = calls // 12
            child = delegation_create(owner=owner, name=f"{parent.name} / {index}", parent=parent,
                                      packet=node_packet(f"part-{made}", depth + 1, share))
            made += 1
            if depth + 1 < 3:
                frontier.append((child, depth + 1, share))
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("bench", password="bench-password-123")
    user.groups.add(Group.objects.get_or_create(name=COMPOSERS)[0])
    root = build_tree(user, args.nodes)
    client = Client()
    client.force_login(user)
    url = f"/delegations/{root.pk}/tree/"

    first = client.get(url)   # warm: templates compiled, skill lookups cached
    assert first.status_code == 200, first.status_code
    assert first.content.decode().count('role="treeitem"') == args.nodes
    median, p95, queries = time_page(client, url, args.rounds)
    verdict = "meets" if median < TARGET_MS else "MISSES"
    print(f"tree page, {args.nodes} nodes: median {median:.1f} ms, p95 {p95:.1f} ms over {args.rounds} "
          f"GETs, {queries} queries, {len(first.content) // 1024} KB; {verdict} the {TARGET_MS:.0f} ms target")
    print(json.dumps({"case": "tree_page", "nodes": args.nodes, "median_ms": round(median, 1),
                      "p95_ms": round(p95, 1), "queries": queries, "target_ms": TARGET_MS}))


if __name__ == "__main__":
    main()
