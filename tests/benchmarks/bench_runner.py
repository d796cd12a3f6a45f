# ruff: noqa: E702, E731  (timed/interleaved/WORKLOADS/emit are the peers' code, kept verbatim)
"""Handoff's runner on the peers' W1/W2 workloads (see /work/shared/bench-peers/README.md).

Copied from bench_plain_asyncio.py with WORKLOADS, interleaved() and emit() unchanged;
build() / runner() run every workload through the real runner: ``Runner.start`` with the
scripted adapter at zero latency, in-process, a MemorySink, a MemoryCheckpointStore and an
AutoGate, everything on (packet validation of every delegate_task call, lint, capability
tokens, output-schema validation and success criteria on every agent, every event, a
checkpoint after every model call and tool call).

Each agent calls its (scripted) model exactly once. A leaf's model emits one
``yield_control`` call whose arguments are JSON text ``{"status": "SUCCESS",
"output_payload": {"answer": 42}}``, parsed by the adapter and then by ``parse_result``. A
parent's model emits one ``delegate_task`` call per child in a single turn marked
``"finish": "children"``: the runner runs the children concurrently and finishes the parent
with their results (``output_payload = {"children": [...]}``) without a second model call.
Every root result is checked: the number of ``answer: 42`` results must equal the number
of leaves.

Run from the project root: ``.venv/bin/python tests/benchmarks/bench_runner.py``
(``--with-trace-context``: also every workload with each tree traced, interleaved with the
untraced runs in the same sitting).
"""
import asyncio
import gc
import json
import math
import platform
import statistics
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from delegations.protocol.adapters.scripted import ScriptedAdapter
from delegations.protocol.approvals import AutoGate
from delegations.protocol.checkpoints import MemoryCheckpointStore
from delegations.protocol.events import MemorySink
from delegations.protocol.lifecycle import RunState
from delegations.protocol.packet import parse_packet
from delegations.protocol.runner import Runner, RunnerSettings, new_run_id
from delegations.protocol.trace_context import TraceContext, run_span_id

FRAMEWORK, PACKAGES = "handoff", ("pydantic", "jsonschema")
VARIANT = "runner+memory_sink"
YIELD_ARGS = json.dumps({"status": "SUCCESS", "output_payload": {"answer": 42}})
LEAF_SCHEMA = {"answer": "integer"}
PARENT_SCHEMA = {"children": "array"}


def child_args(name, leaf):
    """delegate_task arguments for one child (the hand-off protocol's fields plus contract
    parts)."""
    return {"subagent_type": "researcher", "label": name,
            "instruction_set": "Do the task and hand the answer back with yield_control.",
            "goal": "Answer the question", "input_data": {"input": "do the task"},
            "expected_output": LEAF_SCHEMA if leaf else PARENT_SCHEMA,
            "success_criteria": ["JSON is schema-valid"], "timeout_s": 60}


def build(depth, branching, name="root"):
    """The scripted adapter config of an agent and its subtree."""
    if depth == 0:
        return {"script": [{"tool_calls": [{"name": "yield_control", "arguments": YIELD_ARGS}]}]}
    kids = [f"{name}_{i}" for i in range(branching)]
    return {"script": [{"tool_calls": [{"name": "delegate_task", "arguments": child_args(k, depth == 1)}
                                       for k in kids], "finish": "children"}],
            "children": {k: build(depth - 1, branching, k) for k in kids}}


def runner(depth, branching, traced=False):
    adapter = ScriptedAdapter(build(depth, branching))   # config checked once; replayed per run
    packet = parse_packet({
        "goal": "Coordinate the subagents and gather their answers",
        "instruction_set": "You coordinate subagents.", "subagent_type": "researcher",
        "input_data": {"input": "solve"}, "timeout_s": 60, "allow_nested": depth > 1,
        "budget": {"max_model_calls": 1000, "max_tokens": 1_000_000},
        "expected_output": PARENT_SCHEMA, "success_criteria": ["JSON is schema-valid"]})
    workspace = Path(tempfile.gettempdir()) / "handoff-bench"
    handoff = Runner(sink=MemorySink(), gate=AutoGate(), checkpoints=MemoryCheckpointStore(),
                     settings=RunnerSettings(token_key=b"bench-token-key-0123", workspace_root=workspace))

    async def run_one():
        run_id = new_run_id()
        # --with-trace-context: each tree traced, as a server with a collector runs it (its
        # calls carry the trace context; the export itself is the event log's, not the runner's)
        trace = TraceContext(run_id, run_span_id(run_id)) if traced else None
        outcome = await handoff.start(packet, adapter=adapter.replay(), run_id=run_id, trace=trace)
        assert outcome.state is RunState.COMPLETE, outcome.error
        got = count_answers(outcome.result.output_payload)
        assert got == branching ** depth, got
    return run_one


def count_answers(x):
    if isinstance(x, dict):
        if x.get("status") == "SUCCESS" and x.get("output_payload") == {"answer": 42}:
            return 1
        return sum(count_answers(y) for y in x.values())
    return sum(count_answers(y) for y in x) if isinstance(x, list) else 0


async def timed(run_one, lat, k):
    for _ in range(k):
        t = time.perf_counter(); await run_one(); lat.append(time.perf_counter() - t)


async def interleaved(variants, total, workers, rounds, warmup):
    """variants {name: (setup, run_one)}: untimed warm-up, then `total` timed calls per variant
    in `rounds` chunks, variants alternating chunk by chunk (noisy machine), `workers`
    concurrent asyncio loops per chunk. Returns {name: (latencies_s, wall_s)}."""
    for setup, run_one in variants.values():
        setup(); await asyncio.gather(*(timed(run_one, [], max(1, warmup // workers)) for _ in range(workers)))
    out = {name: ([], 0.0) for name in variants}
    for _ in range(rounds):
        for name, (setup, run_one) in variants.items():
            setup(); gc.collect(); lat, wall = out[name]; t0 = time.perf_counter()
            await asyncio.gather(*(timed(run_one, lat, total // rounds // workers) for _ in range(workers)))
            out[name] = (lat, wall + time.perf_counter() - t0)
    return out


# workload: (depth, branching, unit, timed calls per variant, concurrency, rounds, warm-up calls)
WORKLOADS = {"W1_sequential": (1, 1, "handoff", 1000, 1, 10, 50),
             "W1_concurrent100": (1, 1, "handoff", 2000, 100, 4, 100),
             "W2_tree_d3_b3": (3, 3, "tree", 20, 1, 20, 3)}


def emit(variant, workload, lat, wall):
    depth, branching, unit, _, workers, *_ = WORKLOADS[workload]
    q = lambda p: statistics.median(lat) if p == 50 else sorted(lat)[math.ceil(p / 100 * len(lat)) - 1]
    print(json.dumps({
        "framework": FRAMEWORK, "variant": variant, "workload": workload, "unit": unit,
        "n": len(lat), "median_ms": round(q(50) * 1e3, 4), "p99_ms": round(q(99) * 1e3, 4),
        "per_second": round(len(lat) / wall, 1), "wall_s": round(wall, 3), "concurrency": workers,
        "agents": sum(branching ** i for i in range(depth + 1)),
        "handoffs_per_unit": sum(branching ** i for i in range(1, depth + 1)),
        "python": platform.python_version(), "versions": {p: version(p) for p in PACKAGES}}), flush=True)


async def main():
    for workload, (depth, branching, *_) in WORKLOADS.items():
        variants = {VARIANT: (lambda: None, runner(depth, branching))}
        if "--with-trace-context" in sys.argv:
            variants[VARIANT + "+trace_context"] = (lambda: None, runner(depth, branching, traced=True))
        for variant, (lat, wall) in (await interleaved(variants, *WORKLOADS[workload][3:])).items():
            emit(variant, workload, lat, wall)


if __name__ == "__main__":
    asyncio.run(main())
