"""`make bench`: every benchmark, one after the other, each printing its own table.

The runner benchmark runs in the same rounds as the peer frameworks (LangGraph, OpenAI
Agents SDK, a no-framework floor) from ../shared/bench-peers when their virtualenv exists
(PEER_PY, default ~/.peervenv/bin/python; see that folder's README to create it);
otherwise ours runs alone and the reference figures in that README are the comparison.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PEERS = Path(os.environ.get("PEERS_DIR", ROOT.parent / "shared" / "bench-peers"))
PEER_PY = Path(os.environ.get("PEER_PY", Path.home() / ".peervenv" / "bin" / "python"))
ROUNDS = os.environ.get("BENCH_ROUNDS", "3")


def section(title: str) -> None:
    print(f"\n=== {title} ===", flush=True)


def run(args: list[str], **kwargs: object) -> None:
    subprocess.run(args, check=True, cwd=ROOT, **kwargs)  # type: ignore[call-overload]


def main() -> None:
    python = sys.executable
    section("protocol: validation, lint, parse_result (µs per call, one core)")
    run([python, str(HERE / "bench_protocol.py")])

    section("runner: W1/W2 hand-off overhead beside the peers (scripted zero-latency model)")
    ours = f"cd {ROOT} && {python} {HERE / 'bench_runner.py'}"
    if PEER_PY.exists() and (PEERS / "run_all.sh").exists():
        out_dir = Path(os.environ.get("BENCH_OUT", ROOT / "var" / "bench"))
        run(["bash", str(PEERS / "run_all.sh"), ROUNDS, str(out_dir)],
            env={**os.environ, "PY": str(PEER_PY), "EXTRA_CMD": ours})
    else:
        print(f"(peers not installed at {PEER_PY}: running ours alone; see {PEERS}/README.md)")
        run(["bash", "-c", ours])

    section("load probe: one-turn runs through the API at 1, 8 and 32 clients (embedded, as make run)")
    run([python, str(HERE / "load_probe.py")])
    postgres = os.environ.get("HANDOFF_TEST_POSTGRES_URL")
    if postgres:
        section("load probe, scale-out: PostgreSQL + Redis + 1, 2 and 4 RQ workers, 32 clients")
        run([python, str(HERE / "load_probe.py"), "--mode", "scaleout", "--clients", "32",
             "--database-url", postgres])
    else:
        print("(scale-out load probe skipped: set HANDOFF_TEST_POSTGRES_URL to a PostgreSQL on loopback; "
              ".ci/run shows how to start one)")
    section("load probe, a 500 ms model: runs in flight on one worker")
    # 30 s: with 200 in flight an answer takes about 6 s, so a 10 s window barely saw any end
    run([python, str(HERE / "load_probe.py"), "--mode", "slow", "--in-flight", "200", "--seconds", "30"])

    for script, title in (("bench_catalog.py", "skill catalog search over 10,000 skills"),
                          ("bench_runs.py", "runs end to end: API -> worker -> result; websocket delivery"),
                          ("bench_mcp.py", "the MCP layer: start_run through /mcp against POST /api/runs"),
                          ("bench_decision.py", "the inbox: a decision -> the run's next event on its websocket"),
                          ("bench_local.py", "the local model: load, tokens/s, the runner's share of wall time"),
                          ("bench_composer.py", "the composer's live lint: server time, keystroke to findings"),
                          ("bench_tree.py", "the tree editor: a 100-node tree's page"),
                          ("bench_inbox.py", "the approval inbox: a page with 1,000 pending items")):
        if (HERE / script).exists():
            section(title)
            run([python, str(HERE / script)])


if __name__ == "__main__":
    main()
