"""Protocol throughput: packet validation, lint and parse_result.

Run: `.venv/bin/python tests/benchmarks/bench_protocol.py` (or `make bench`). Pinned to
one core; each case runs in alternating chunks so machine noise hits all alike; prints
median / p95 per call and calls per second, then one JSON line per case.
Targets: validate+lint of the agloop executor packet < 200 µs median; parse_result
of a RESULT block < 100 µs median.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from delegations.protocol import lint_packet, parse_packet, parse_result
from tests.protocol.protocol_examples import (
    AGLOOP_EXECUTOR,
    AGLOOP_RESULT_BLOCK,
    HANDOFF_SUCCESS_RESPONSE,
    RESULT_ENVELOPE,
)

CHUNKS, PER_CHUNK = 20, 250
TARGETS_US = {"validate+lint agloop executor": 200.0, "parse_result RESULT block": 100.0}


def cases() -> dict[str, Callable[[], object]]:
    packet = parse_packet(AGLOOP_EXECUTOR)
    envelope_text = json.dumps(RESULT_ENVELOPE)
    return {
        "validate agloop executor": lambda: parse_packet(AGLOOP_EXECUTOR),
        "lint agloop executor": lambda: lint_packet(packet),
        "validate+lint agloop executor": lambda: lint_packet(parse_packet(AGLOOP_EXECUTOR)),
        "parse_result RESULT block": lambda: parse_result(AGLOOP_RESULT_BLOCK),
        "parse_result yield_control dict": lambda: parse_result(HANDOFF_SUCCESS_RESPONSE),
        "parse_result envelope text": lambda: parse_result(envelope_text),
    }


def measure(funcs: dict[str, Callable[[], object]]) -> dict[str, list[float]]:
    for func in funcs.values():  # warm caches
        for _ in range(200):
            func()
    samples: dict[str, list[float]] = {name: [] for name in funcs}
    for _ in range(CHUNKS):
        for name, func in funcs.items():
            gc.collect()
            for _ in range(PER_CHUNK):
                started = time.perf_counter()
                func()
                samples[name].append(time.perf_counter() - started)
    return samples


def main() -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    samples = measure(cases())
    print(f"{'case':36} {'median µs':>10} {'p95 µs':>9} {'per second':>11}  target")
    lines = []
    for name, values in samples.items():
        values.sort()
        median = statistics.median(values) * 1e6
        p95 = values[int(len(values) * 0.95)] * 1e6
        target = TARGETS_US.get(name)
        verdict = "" if target is None else (f"< {target:.0f} µs " + ("met" if median < target else "MISSED"))
        print(f"{name:36} {median:10.1f} {p95:9.1f} {1e6 / median:11.0f}  {verdict}")
        lines.append({"framework": "handoff", "variant": "protocol", "workload": name, "unit": "call",
                      "n": len(values), "median_us": round(median, 2), "p95_us": round(p95, 2),
                      "per_second": round(1e6 / median), "python": sys.version.split()[0]})
    for line in lines:
        print(json.dumps(line))


if __name__ == "__main__":
    main()
