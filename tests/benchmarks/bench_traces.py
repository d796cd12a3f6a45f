"""What exporting traces costs end to end: ``bench_runs.py --only w1`` (W1 hand-offs through
the HTTP API, SQLite, the embedded worker) with no collector named, and with
``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at a real OTLP/HTTP receiver on loopback (the
tests' receiver, decoding every request), alternated in one sitting on this noisy machine;
medians of each figure side by side, and how many spans the receiver decoded.

Run from the project root: ``.venv/bin/python tests/benchmarks/bench_traces.py [--rounds N] [--quick]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.otlp_receiver import otlp_receiver  # noqa: E402

FIGURES = ("W1_sequential_end_to_end", "W1_burst_end_to_end")


def bench_runs(extra_env: dict[str, str], quick: bool) -> dict[str, dict[str, Any]]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    env.update(extra_env)
    command = [sys.executable, "tests/benchmarks/bench_runs.py", "--only", "w1", "--json"]
    done = subprocess.run(command + (["--quick"] if quick else []), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800, check=True)
    figures = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {figure["figure"]: figure for figure in figures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="off/on pairs, alternated")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    results: dict[str, list[dict[str, dict[str, Any]]]] = {"off": [], "on": []}
    with otlp_receiver() as receiver:
        for _ in range(args.rounds):
            results["off"].append(bench_runs({}, args.quick))
            results["on"].append(bench_runs({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}, args.quick))
        spans = len(receiver.spans)
        trees = len({span.trace_id for span in receiver.spans})
    for figure in FIGURES:
        row: dict[str, Any] = {"figure": figure, "rounds": args.rounds}
        for mode in ("off", "on"):
            for measure in ("median_ms", "p99_ms", "per_second"):
                row[f"{mode}_{measure}"] = round(statistics.median(
                    run[figure][measure] for run in results[mode]), 1)
        for mode in ("off", "on"):   # each round's median, to see the machine's noise
            row[f"{mode}_rounds_median_ms"] = [run[figure]["median_ms"] for run in results[mode]]
        row["median_change_pct"] = round(100 * (row["on_median_ms"] / row["off_median_ms"] - 1), 1)
        row["per_second_change_pct"] = round(100 * (row["on_per_second"] / row["off_per_second"] - 1), 1)
        print(json.dumps(row), flush=True)
    print(json.dumps({"receiver_spans": spans, "receiver_traces": trees}), flush=True)


if __name__ == "__main__":
    main()
