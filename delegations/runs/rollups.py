"""Roll-ups of a run tree: what each run used itself and what its whole subtree used,
counted from the event log in one query for the tree (no query per run).

The event log is what happened: every model call is one ``model_call`` event, stored in
the same transaction as the checkpoint that follows it. A run's own figures (the runner's
usage, a run row's, a checkpoint's) are only what its process had counted when it last
wrote them, which after a crash predates its descendants' work."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, FloatField, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce

from delegations.models import Run, RunEvent
from delegations.protocol.budgets import Usage


@dataclass(slots=True)
class Figures(Usage):
    """What a node of the tree used (by its own model and tool calls, or by its whole
    subtree): the protocol's usage, and how many tools it called."""

    tool_calls: int = 0

    @property
    def tokens(self) -> int:
        return self.total_tokens

    def add(self, other: Usage) -> Figures:
        Usage.add(self, other)   # (a slots dataclass: no zero-argument super())
        self.tool_calls += getattr(other, "tool_calls", 0)
        return self

    def copy(self) -> Figures:
        return Figures(self.model_calls, self.input_tokens, self.output_tokens, self.cost_usd,
                       self.runtime_s, self.tool_calls)


def own_figures(runtimes: dict[str, float]) -> dict[str, Figures]:
    """Each run's own usage (``runtimes``: each run of the tree and the time it has run),
    summed from its model_call and tool_call events in one grouped query for the whole
    tree: a run row's stored usage already includes its descendants' (and lags behind
    them while the tree runs), so it cannot say what the run itself used."""
    ids = list(runtimes)
    figures = {run_id: Figures(runtime_s=runtime) for run_id, runtime in runtimes.items()}

    def number(key: str) -> Any:
        # cast to a float even for token counts: PostgreSQL refuses "12.0"::integer
        return Coalesce(Sum(Cast(KT(f"data__{key}"), FloatField())), 0.0)

    rows = (RunEvent.objects.filter(run_id__in=ids, type__in=("model_call", "tool_call")).order_by()
            .values("run_id", "type")
            .annotate(count=Count("id"), tokens_in=number("input_tokens"),
                      tokens_out=number("output_tokens"), cost=number("cost_usd")))
    for row in rows:
        own = figures[row["run_id"]]
        if row["type"] == "tool_call":
            own.tool_calls = row["count"]
        else:
            own.model_calls = row["count"]
            own.input_tokens, own.output_tokens = int(row["tokens_in"] or 0), int(row["tokens_out"] or 0)
            own.cost_usd = float(row["cost"] or 0.0)
    return figures


def subtree_usages(root_id: str) -> dict[str, dict[str, int | float]]:
    """For every run of the tree, what it and all its descendants used by their model
    calls, from the event log, as a run's usage holds it (calls, tokens, cost; not
    ``runtime_s``, which is each run's own clock, its children running inside it). Two
    queries for the whole tree."""
    parent_of: dict[str, str | None] = dict(
        Run.objects.filter(root_id=root_id).values_list("pk", "parent_id"))
    own = own_figures(dict.fromkeys(parent_of, 0.0))
    totals = {run_id: figures.copy() for run_id, figures in own.items()}
    for run_id, figures in own.items():
        ancestor = parent_of.get(run_id)
        while ancestor is not None and ancestor in totals:
            totals[ancestor].add(figures)
            ancestor = parent_of.get(ancestor)
    return {run_id: _metered(figures) for run_id, figures in totals.items()}


def subtree_usage(run_id: str, root_id: str) -> dict[str, int | float]:
    """What the run and all its descendants used by their model calls (see subtree_usages)."""
    return subtree_usages(root_id).get(run_id) or _metered(Figures())


def _metered(figures: Figures) -> dict[str, int | float]:
    metered = figures.as_dict()
    del metered["runtime_s"]
    return metered
