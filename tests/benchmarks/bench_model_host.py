"""The local model's host process, measured (issue: the default model runs on every CPU).

Prints, for each shipped model installed:

- **tokens/s with and without weight repacking** (llama.cpp's extra buffer types), and with
  the JSON grammar checked lazily (the host's default at temperature 0) or on the whole
  vocabulary at every step (llama-cpp-python's own way): output tokens / generation time
  of a constrained answer, median of ``--runs``, in this process (no host in between);
- **first-call cost of the host**: starting the host and loading the model through it,
  against loading the same model in this process;
- **per-call overhead of the process boundary**: a one-token answer to a cached prompt
  through the host, against the same call in this process (median difference);
- **resident memory of a host** with the model loaded and after answering.

Run from the project root: ``.venv/bin/python tests/benchmarks/bench_model_host.py``
(``--runs N``, ``--model NAME``). Figures go to stdout, one line each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from delegations.protocol.adapters import model_host as host_program
from delegations.protocol.adapters.local import LocalAdapter, answer_schema, to_chat_messages
from delegations.protocol.adapters.local_host import ModelHost
from delegations.protocol.adapters.local_models import SHIPPED_MODELS, installed, locate
from delegations.protocol.tool_schemas import yield_control_for

AMX_INFO = "CPU : AVX2 = 1 | AMX_INT8 = 1 |"  # makes load_model turn repacking off
OUTPUT = {"type": "object", "properties": {"price": {"type": "number"},
                                           "currency": {"type": "string"}},
          "required": ["price", "currency"]}
MESSAGES = [{"role": "system", "content": "You are a researcher. Answer with yield_control."},
            {"role": "user", "content": "Report the price in this quote as JSON: 'Sony WH-1000XM5 "
                                        "headphones, now 279.99 USD at our store.'"}]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def job(adapter: LocalAdapter, *, lazy: bool, max_tokens: int = 96) -> dict[str, Any]:
    tools = [yield_control_for(OUTPUT)]
    return {"chat": to_chat_messages(MESSAGES, tools), "prompt_budget": 3000, "examples": 0,
            "fold_system": adapter.model is not None and not adapter.model.system_role,
            "schema": answer_schema(tools), "max_tokens": max_tokens, "temperature": 0.0,
            "seed": 1, "lazy_grammar": lazy}


def speeds(loaded: host_program.LoadedModel, request: dict[str, Any],
           runs: int) -> tuple[float, float, int]:
    """Median output tokens/s and prompt evaluation ms (no cached prefix: the context is
    reset first), and the last answer's whole-vocabulary grammar masks."""
    rates, prompt_ms, masks = [], [], 0
    for _ in range(runs):
        first: list[float] = []

        def note_first(piece: str, first: list[float] = first) -> None:
            if not first:
                first.append(time.perf_counter())

        loaded.llama.reset()
        asked = time.perf_counter()
        result = host_program.generate(loaded, request, threading.Event(), note_first)
        started = first[0] if first else time.perf_counter()
        elapsed = time.perf_counter() - started
        prompt_ms.append((started - asked) * 1000)
        if result.output_tokens > 1 and elapsed > 0:
            rates.append((result.output_tokens - 1) / elapsed)
        masks = result.full_grammar_masks
    return median(rates), median(prompt_ms), masks


FIRST_LOAD = """
import json, sys, time
started = time.perf_counter()
sys.path.insert(0, sys.argv[1])
import model_host
model_host.load_model(json.loads(sys.argv[2]), model_host.system_info())
print(time.perf_counter() - started)
"""


def first_load_in_process(spec: dict[str, Any]) -> float:
    """What the first call cost without a host: importing llama_cpp and loading the model,
    timed inside a fresh interpreter (the host's own start is what is left over)."""
    out = subprocess.run([sys.executable, "-c", FIRST_LOAD, str(Path(host_program.__file__).parent),
                          json.dumps(spec)], capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def host_figures(adapter: LocalAdapter, spec: dict[str, Any], runs: int) -> None:
    host_first, own_first = [], []
    for _ in range(runs):  # alternated, so a busy moment hits both sides alike
        host = ModelHost()
        started = time.perf_counter()
        await host.call({"op": "load", "model": spec})
        host_first.append(time.perf_counter() - started)
        host.stop()
        own_first.append(first_load_in_process(spec))
    print(f"  host: first call (start the host, import llama_cpp, load) "
          f"{median(host_first) * 1000:.0f} ms; the same import and load in a fresh process "
          f"{median(own_first) * 1000:.0f} ms -> added by the host "
          f"{(median(host_first) - median(own_first)) * 1000:.0f} ms (medians)")
    host = ModelHost()
    await host.call({"op": "load", "model": spec})
    assert host.pid is not None
    print(f"  host: resident memory with the model loaded {rss_mb(host.pid):.0f} MB")
    one = {**job(adapter, lazy=True, max_tokens=1), "op": "generate", "model": spec}
    here = host_program.load_model(spec, host_program.system_info())
    await host.call(one)  # the prompt is cached from here on, on both sides
    host_program.generate(here, one, threading.Event(), lambda piece: None)
    through_host, in_process = [], []
    for _ in range(runs * 10):  # alternated, so a busy moment hits both sides alike
        started = time.perf_counter()
        await host.call(one)
        through_host.append(time.perf_counter() - started)
        started = time.perf_counter()
        host_program.generate(here, one, threading.Event(), lambda piece: None)
        in_process.append(time.perf_counter() - started)
    print(f"  host: resident memory after answering {rss_mb(host.pid):.0f} MB")
    host.stop()
    here.llama.close()
    print(f"  host: one-token call {median(through_host) * 1000:.1f} ms through the host, "
          f"{median(in_process) * 1000:.1f} ms in process -> overhead "
          f"{(median(through_host) - median(in_process)) * 1000:.1f} ms per call (median)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--model", choices=list(SHIPPED_MODELS))
    args = parser.parse_args()
    info = host_program.system_info()
    print(f"llama.cpp: {info}")
    for name in [args.model] if args.model else list(SHIPPED_MODELS):
        if not installed(name):
            print(f"{name}: not installed, skipped")
            continue
        adapter = LocalAdapter({"model": name})
        spec = {"path": str(locate(name)), "n_ctx": 4096, "n_threads": None,
                "chat_format": SHIPPED_MODELS[name].chat_format}
        print(f"{name}:")
        for repack, load_info in (("on", info), ("off", AMX_INFO)):
            if repack == "on" and not host_program.extra_buffer_types_allowed(info):
                print("  repacking on: not measured (this build has AMX kernels, which crash)")
                continue
            loaded = host_program.load_model(spec, load_info)
            for lazy in (True, False):
                rate, prompt_ms, masks = speeds(loaded, job(adapter, lazy=lazy), args.runs)
                grammar = f"lazy grammar ({masks} full masks)" if lazy else "full grammar"
                print(f"  repacking {repack}, {grammar}: {rate:.1f} tokens/s, prompt "
                      f"{prompt_ms:.0f} ms")
            loaded.llama.close()
        asyncio.run(host_figures(adapter, spec, args.runs))


if __name__ == "__main__":
    main()
