"""``make eval``: the reference delegations on every shipped local model, as a table.

    .venv/bin/python -m tests.evals                       # every installed shipped model
    .venv/bin/python -m tests.evals --models gemma3-270m  # one model
    .venv/bin/python -m tests.evals --cases price-usd,review-mixed --verbose
    .venv/bin/python -m tests.evals --paths composer      # only the composer's packets
    .venv/bin/python -m tests.evals --threads 1           # on a machine shared with other work

Every case runs on both paths (its minimal packet, and the packet the composer makes of
it), each with sampling seed = its number, so a run can be repeated. A model whose
package is not installed is listed with what to install instead of a score.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "handoff_site.settings")
django.setup()   # the composer path fills the composer's own form

from delegations.protocol.adapters.local import CALIBRATION_WEIGHT, LocalAdapter  # noqa: E402
from delegations.protocol.adapters.local_models import (  # noqa: E402
    DEFAULT_LOCAL_MODEL,
    installed,
    shipped_models,
)
from tests.evals.harness import (  # noqa: E402
    PATHS,
    RIGHT,
    VISIBLE,
    WRONG_ALL_MET,
    CaseResult,
    ModelReport,
    calibration_table,
    case_table,
    evaluate,
    load_cases,
    summary_table,
)

_MARKS = {RIGHT: "right", WRONG_ALL_MET: "WRONG", VISIBLE: "shown"}


def _print_result(result: CaseResult) -> None:
    mark = "review" if result.reviewed else _MARKS[result.verdict]
    line = f"  {mark:<6} {result.path:<8} {result.case.id:<24} {result.wall_seconds:5.2f} s  {result.state}"
    if result.payload is not None:
        line += f"  {json.dumps(result.payload, ensure_ascii=False)[:120]}"
    if not result.passed:
        line += f"  ({result.why})"
    print(line, flush=True)


async def _evaluate(model: str, cases: list, verbose: bool, paths: list[str],
                    threads: int | None = None) -> list[ModelReport]:
    config = {"model": model, **({"n_threads": threads} if threads else {})}
    warm = LocalAdapter(config)
    load_seconds = await warm.load()
    print(f"llama.cpp on this CPU: {warm.system_info}", flush=True)  # which kernels ran
    print(f"{model}: loaded in {load_seconds:.1f} s, {len(cases)} cases on {', '.join(paths)}", flush=True)
    reports = []
    for path in paths:
        report = await evaluate(model, lambda seed: LocalAdapter({**config, "seed": seed}),
                                cases, path=path, on_result=_print_result if verbose else None)
        report.load_seconds = load_seconds
        reports.append(report)
    return reports


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated shipped model names (default: all)")
    parser.add_argument("--cases", help="comma-separated case ids (default: all)")
    parser.add_argument("--paths", help=f"comma-separated paths (default: {','.join(PATHS)})")
    parser.add_argument("--verbose", "-v", action="store_true", help="one line per case")
    parser.add_argument("--json", action="store_true", help="the reports as JSON lines too")
    parser.add_argument("--threads", type=int, help="the local adapter's n_threads (default: every core; "
                                                    "1 on a machine shared with other work)")
    args = parser.parse_args()
    names = args.models.split(",") if args.models else [m.name for m in shipped_models()]
    cases = load_cases(only=args.cases.split(",") if args.cases else ())
    paths = args.paths.split(",") if args.paths else list(PATHS)
    if unknown := [path for path in paths if path not in PATHS]:
        parser.error(f"no path named {', '.join(unknown)}; choose from {', '.join(PATHS)}")
    reports: list[ModelReport] = []
    for name in names:
        model = next((m for m in shipped_models() if m.name == name), None)
        if model is None:
            parser.error(f"no shipped model named {name!r}; "
                         f"choose from {', '.join(m.name for m in shipped_models())}")
        if not installed(name):
            print(f"{name}: not installed ({model.install}); skipped", flush=True)
            continue
        reports.extend(asyncio.run(_evaluate(name, cases, args.verbose, paths, args.threads)))
    if not reports:
        print("No shipped model is installed: pip install 'handoff[local]'.")
        return 1
    print()
    print(summary_table(reports))
    print()
    print(case_table(reports))
    print(f"\n(default for the local adapter: {DEFAULT_LOCAL_MODEL}; ✓ right, ✗ wrong but shown as "
          "all met, ? sent for review, · visibly failed)")
    print("\nLabels chosen right by calibration weight (the local adapter uses "
          f"{CALIBRATION_WEIGHT:g}):\n")
    print(calibration_table(reports))
    if args.json:
        for report in reports:
            print(json.dumps({"model": report.model, "path": report.path, "passed": report.passed,
                              "right_original": report.count(RIGHT, fresh=False),
                              "right_fresh": report.count(RIGHT, fresh=True),
                              "wrong_shown_all_met": report.count(WRONG_ALL_MET),
                              "visible": report.count(VISIBLE), "reviewed": report.reviewed,
                              "schema_valid": report.schema_valid, "cases": len(report.results),
                              "tokens_per_s": round(report.tokens_per_second, 1),
                              "median_wall_s": round(report.median_wall_seconds, 3),
                              "load_s": report.load_seconds,
                              "failed": [r.case.id for r in report.results if not r.passed]}))
            for one in report.results:
                print(json.dumps({"model": report.model, "path": report.path, "case": one.case.id,
                                  "verdict": one.verdict, "reviewed": one.reviewed,
                                  "seconds": round(one.wall_seconds, 3), "payload": one.payload,
                                  "labels": one.labels}, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
