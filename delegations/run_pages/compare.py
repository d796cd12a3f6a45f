"""Two attempts of a retried run side by side: what the retry changed in the packet
(its previous_failure, the fix instructions), what came back differently, and what each
attempt used.

The attempts of a run are its retry chain: ``Run.retry_of`` back to attempt 1 and the
retries of every attempt forward, so a run retried twice from the same attempt shows all
of them. A page compares two of those the person may see, the older one first, so every
change reads as "what the later attempt did differently".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from delegations.accounts.roles import visible_runs
from delegations.models import Run, RunEvent
from delegations.protocol.criteria import criteria_summary
from delegations.run_pages.display import format_seconds, format_usd, run_usage, state_tone
from delegations.run_pages.failure import failure_headline
from delegations.run_pages.snapshot import json_diff, result_view

MAX_ATTEMPTS = 100   # a chain is cut here: a retry loop gone wrong must not stall the page
ONLY_ONE = "This run has only one attempt: retry it from its page to compare attempts."
MINUS = "\N{MINUS SIGN}"


# -- the chain of attempts ----------------------------------------------------------------

def _first_attempt_id(run: Run) -> str:
    """Follow ``retry_of`` back to the attempt the chain started from."""
    first_id, previous_id = run.pk, run.retry_of_id
    seen = {run.pk}
    while previous_id is not None and previous_id not in seen and len(seen) < MAX_ATTEMPTS:
        seen.add(previous_id)
        first_id = previous_id
        previous_id = Run.objects.filter(pk=previous_id).values_list("retry_of_id", flat=True).first()
    return first_id


def attempts(run: Run) -> list[Run]:
    """Every attempt of the run's chain, oldest first: a query per attempt back to the
    first one (ids only), then one per generation of retries forward."""
    chain: list[Run] = []
    found: set[str] = set()
    generation = list(Run.objects.filter(pk=_first_attempt_id(run)))
    while generation and len(chain) < MAX_ATTEMPTS:
        chain += generation
        found.update(member.pk for member in generation)
        generation = list(Run.objects.filter(retry_of_id__in=[member.pk for member in generation])
                          .exclude(pk__in=found))
    if run.pk not in found:   # its first attempt vanished between the queries
        chain.append(run)
    return sorted(chain, key=lambda member: (member.attempt, member.created_at, member.pk))


# -- what the page compares ---------------------------------------------------------------

def _count(value: float) -> str:
    return f"{int(value):,}"


def _tokens(value: float) -> str:
    return f"{int(value):,} tok"


# (figure, label, how it is shown, decimals a change is rounded to before it counts)
USAGE_ROWS: tuple[tuple[str, str, Callable[[float], str], int], ...] = (
    ("model_calls", "Model calls", _count, 0),
    ("input_tokens", "Input tokens", _tokens, 0),
    ("output_tokens", "Output tokens", _tokens, 0),
    ("cost_usd", "Cost", format_usd, 4),
    ("runtime_s", "Runtime", format_seconds, 1),
    ("tool_calls", "Tool calls", _count, 0),
)


def _delta(difference: float, shown: Callable[[float], str]) -> str:
    """A change with its sign: "+1,200 tok", "−$0.0012"; "same" when there is none."""
    if not difference:
        return "same"
    return ("+" if difference > 0 else MINUS) + shown(abs(difference))


def usage_rows(a: dict[str, float], b: dict[str, float]) -> list[dict[str, str]]:
    """Each usage figure of both attempts, and how much the later one (b) used more or less."""
    rows = []
    for key, label, shown, decimals in USAGE_ROWS:
        difference = round(b[key] - a[key], decimals)
        rows.append({"key": key, "label": label, "a": shown(a[key]), "b": shown(b[key]),
                     "delta": _delta(difference, shown),
                     "change": "more" if difference > 0 else "less" if difference < 0 else "same"})
    return rows


def _tool_calls(runs: list[Run]) -> dict[str, int]:
    """How many tools each run called itself, in one query."""
    rows = (RunEvent.objects.filter(run_id__in=[run.pk for run in runs], type="tool_call").order_by()
            .values("run_id").annotate(count=Count("id")))
    return {row["run_id"]: row["count"] for row in rows}


def _summary(run: Run, result: dict[str, Any] | None) -> str:
    if result and result["summary_text"]:
        return str(result["summary_text"])
    headline = failure_headline(run.state, run.error, run.result, skill=run.skill,
                                findings=run.findings or [])
    if headline:
        return headline
    if not run.is_terminal:
        return "No result yet: this attempt is still going."
    return "This attempt handed back no summary."


def _side(run: Run, tool_calls: int) -> dict[str, Any]:
    result = result_view(run.result)
    usage = run_usage(run)
    report = run.criteria_report if isinstance(run.criteria_report, dict) else {}
    return {
        "run": run, "attempt": run.attempt, "state": run.state, "tone": state_tone(run.state),
        "result": result, "summary": _summary(run, result),
        "criteria_met": report.get("all_met") if report else None,
        "criteria_summary": criteria_summary(report) if report and isinstance(report.get("items"), list) else None,
        "figures": {"model_calls": usage.model_calls, "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens, "cost_usd": usage.cost_usd,
                    "runtime_s": usage.runtime_s, "tool_calls": tool_calls},
        "url": reverse("delegations:run_detail", args=[run.pk]),
    }


def _diff_view(name: str, lines: list[dict[str, str]]) -> dict[str, Any] | None:
    """Diff lines as run pages draw an edited file (see templates/delegations/runs/_diff.html)."""
    if not lines:
        return None
    return {"path": name, "lines": lines,
            "added": sum(1 for line in lines if line["kind"] == "add"),
            "removed": sum(1 for line in lines if line["kind"] == "del")}


def _result_note(a: Run, b: Run, diff: dict[str, Any] | None) -> str:
    """What to say about the results when there is no diff to show."""
    if diff is not None:
        return ""
    if a.result is None and b.result is None:
        return "Neither attempt has handed back a result yet."
    if a.result is None or b.result is None:
        missing = a if a.result is None else b
        return (f"Attempt {missing.attempt} has no result ({missing.state.lower().replace('_', ' ')}), "
                f"so there is nothing to set against the other's; its summary is above.")
    return "Both attempts handed back the same result."


def comparison(a: Run, b: Run) -> dict[str, Any]:
    """Everything the compare page shows of attempts ``a`` (the older) and ``b``."""
    tool_calls = _tool_calls([a, b])
    side_a, side_b = _side(a, tool_calls.get(a.pk, 0)), _side(b, tool_calls.get(b.pk, 0))
    before, after = f"attempt {a.attempt}", f"attempt {b.attempt}"
    packet_diff = _diff_view("packet", json_diff(a.packet, b.packet, before, after))
    result_diff = None
    if a.result is not None and b.result is not None:
        result_diff = _diff_view("result", json_diff(a.result, b.result, before, after))
    return {
        "a": side_a, "b": side_b, "sides": [side_a, side_b], "usage": usage_rows(side_a["figures"], side_b["figures"]),
        "packet_diff": packet_diff,
        "packet_note": "" if packet_diff else "Both attempts ran the same packet.",
        "result_diff": result_diff, "result_note": _result_note(a, b, result_diff),
    }


# -- the page -----------------------------------------------------------------------------

def _choice_label(run: Run) -> str:
    return f"Attempt {run.attempt} · {run.state.lower().replace('_', ' ')} · {run.pk[:8]}"


def _visible_attempts(request: HttpRequest, run: Run) -> list[Run]:
    """The chain's attempts the person may open (a retry belongs to whoever started it)."""
    chain = attempts(run)
    shown = set(visible_runs(request.user).filter(pk__in=[member.pk for member in chain])
                .values_list("pk", flat=True))
    return [member for member in chain if member.pk in shown]


def _refusal(chain: list[Run], asked: str) -> str:
    refused = f"Run “{asked[:64]}” is not an attempt of this run that you can open, so it cannot be compared."
    if len(chain) < 2:
        return f"{refused} {ONLY_ONE}"
    listed = ", ".join(f"attempt {member.attempt} ({member.pk[:8]})" for member in chain)
    return f"{refused} You can compare these attempts: {listed}. Pick two below."


def _default_other(base: Run, chain: list[Run]) -> Run:
    """The attempt ``base`` is compared with unless the person picks one: the attempt it
    retried, else its first retry, else the oldest other attempt."""
    earlier = [member for member in chain if member.pk == base.retry_of_id]
    later = [member for member in chain if member.retry_of_id == base.pk]
    others = [member for member in chain if member.pk != base.pk]
    return (earlier or later or others)[0]


def _pair(run: Run, chain: list[Run], query: Any) -> tuple[Run, Run] | str:
    """The two attempts asked for (``?base=`` and ``?with=``, the picker's two sides; the
    run itself and its previous attempt by default), older first, or why they can't be."""
    by_id = {member.pk: member for member in chain}
    asked_base, asked_with = query.get("base", "").strip(), query.get("with", "").strip()
    for asked in (asked_base, asked_with):
        if asked and asked not in by_id:
            return _refusal(chain, asked)
    base = by_id[asked_base] if asked_base else run
    other = by_id[asked_with] if asked_with else _default_other(base, chain)
    if other.pk == base.pk:
        return "Those are the same attempt: pick two different attempts below to compare them."
    older, newer = sorted((base, other), key=chain.index)
    return older, newer


@require_GET
def run_compare(request: HttpRequest, run_id: str) -> HttpResponse:
    """Two attempts of the run side by side: ``?with=<run id>`` names the other attempt
    (default: the run's previous one), ``?base=<run id>`` replaces the run itself. An
    attempt that can't be compared answers 400 with the ones that can."""
    run = visible_runs(request.user).filter(pk=run_id).first()
    if run is None:
        raise Http404(f"No run {run_id} that you can see.")
    chain = _visible_attempts(request, run)
    context: dict[str, Any] = {
        "run": run, "choices": [{"pk": member.pk, "label": _choice_label(member)} for member in chain],
        "compare_url": reverse("delegations:run_compare", args=[run.pk]),
        "run_url": reverse("delegations:run_detail", args=[run.pk]),
    }
    # any attempt asked for but the run itself, which a chain of one can't be compared with
    asked = next((value for value in (request.GET.get("base", "").strip(),
                                      request.GET.get("with", "").strip()) if value not in ("", run.pk)), "")
    if len(chain) < 2 and not asked:
        context["note"] = ONLY_ONE
        return render(request, "delegations/runs/compare.html", context)
    pair = _pair(run, chain, request.GET) if len(chain) > 1 else _refusal(chain, asked)
    if isinstance(pair, str):
        if len(chain) > 1:
            older, newer = sorted((run, _default_other(run, chain)), key=chain.index)
            context.update(picked_base=older.pk, picked_with=newer.pk)
        context["refusal"] = pair
        return render(request, "delegations/runs/compare.html", context, status=400)
    context.update(comparison(*pair), picked_base=pair[0].pk, picked_with=pair[1].pk)
    return render(request, "delegations/runs/compare.html", context)
