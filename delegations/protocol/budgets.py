"""Budgets and metered usage (delegation contracts: budgets shrink down the delegation chain).

A :class:`Budget` caps a run; ``None`` on an axis means unlimited. :class:`Usage` is what
a run (and, charged upwards, its descendants) has consumed so far. The functions below
sit on the runner's hot path (after every model call), so they do plain arithmetic and
build their results without re-validating.

Consumable axes (``max_model_calls``, ``max_tokens``, ``max_runtime_s``, ``max_cost_usd``)
are compared against usage. ``max_concurrency`` and ``max_iterations`` are per-run caps:
they shrink when narrowed but nothing "uses them up", so :func:`remaining` passes them on
unchanged and the runner enforces them where it schedules children and loop turns.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from .errors import ErrorCode, Issue, ProtocolError
from .number_limits import Concurrency, Count, Dollars, Seconds

# (budget axis, Usage attribute it is measured by); the order is the order axes are reported.
CONSUMABLE_AXES: tuple[tuple[str, str], ...] = (
    ("max_model_calls", "model_calls"),
    ("max_tokens", "total_tokens"),
    ("max_runtime_s", "runtime_s"),
    ("max_cost_usd", "cost_usd"),
)
_MEASURE: dict[str, str] = dict(CONSUMABLE_AXES)
BUDGET_AXES: tuple[str, ...] = (
    "max_model_calls", "max_tokens", "max_runtime_s", "max_cost_usd",
    "max_concurrency", "max_iterations",
)
_UNITS: dict[str, str] = {
    "max_model_calls": " model calls", "max_tokens": " tokens", "max_runtime_s": " s",
    "max_cost_usd": " USD", "max_concurrency": " concurrent children",
    "max_iterations": " iterations",
}


class Budget(BaseModel):
    """Resource boundaries of one run. ``None`` on an axis means unlimited.

    Accepts snake_case and the camelCase spellings of the hand-off protocol and delegation
    contracts; always serializes snake_case.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_model_calls: Count | None = Field(
        default=None, ge=0, validation_alias=AliasChoices("max_model_calls", "maxModelCalls"))
    max_tokens: Count | None = Field(
        default=None, ge=0,
        validation_alias=AliasChoices("max_tokens", "maxTokens", "maxTotalTokens"))
    max_runtime_s: Seconds | None = Field(
        default=None, ge=0, allow_inf_nan=False,
        validation_alias=AliasChoices("max_runtime_s", "maxRuntimeSeconds", "maxRuntimeS",
                                      "max_runtime_seconds"))
    max_cost_usd: Dollars | None = Field(
        default=None, ge=0, allow_inf_nan=False,
        validation_alias=AliasChoices("max_cost_usd", "maxCostUsd", "maxCostUSD"))
    max_concurrency: Concurrency | None = Field(
        default=None, ge=1, validation_alias=AliasChoices("max_concurrency", "maxConcurrency"))
    max_iterations: Count | None = Field(
        default=None, ge=0, validation_alias=AliasChoices("max_iterations", "maxIterations"))

    @classmethod
    def unlimited(cls) -> Budget:
        return _UNLIMITED

    @property
    def is_unlimited(self) -> bool:
        return all(getattr(self, axis) is None for axis in BUDGET_AXES)

    def as_dict(self, *, include_unlimited: bool = True) -> dict[str, Any]:
        """Snake_case dict; ``include_unlimited=False`` drops the ``None`` axes."""
        out = {axis: getattr(self, axis) for axis in BUDGET_AXES}
        if include_unlimited:
            return out
        return {axis: value for axis, value in out.items() if value is not None}


_UNLIMITED = Budget.model_construct()


_new_object = object.__new__
_set_attribute = object.__setattr__


def _budget(values: dict[str, Any]) -> Budget:
    """Build a Budget from figures that came from validated Budgets and arithmetic on them.

    Skips validation, like ``model_construct``, by setting pydantic's private attributes
    directly: ``model_construct`` walks each field's validation aliases (the camelCase
    spellings) and took 20 to 30 times as long per Budget (pydantic 2.14). It runs when a
    child is spawned (``remaining``, ``narrow``) and when lint weighs planned children. On
    tests/benchmarks/bench_runner.py's W1, with three such calls per hand-off,
    ``model_construct`` made a hand-off execute 3.7% more instructions (callgrind, 205
    hand-offs) and its median 3-5% slower (timed, alternating, 2 cores); two calls are left
    per hand-off now. ``values`` must hold every axis.
    """
    budget = _new_object(Budget)
    _set_attribute(budget, "__dict__", values)
    _set_attribute(budget, "__pydantic_fields_set__",
                   {axis for axis, value in values.items() if value is not None})
    _set_attribute(budget, "__pydantic_extra__", None)
    _set_attribute(budget, "__pydantic_private__", None)
    return budget


@dataclass(slots=True)
class Usage:
    """What a run has consumed. Mutable: the runner charges it after every model call."""

    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    runtime_s: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def charge(self, *, model_calls: int = 1, input_tokens: int = 0, output_tokens: int = 0,
               cost_usd: float = 0.0, runtime_s: float = 0.0) -> Usage:
        """Add one metered model call (by default) in place; returns self for chaining."""
        self.model_calls += model_calls
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.cost_usd += cost_usd
        self.runtime_s += runtime_s
        return self

    def add(self, other: Usage) -> Usage:
        """Add another usage in place (a child's usage charged to its parent); returns self."""
        self.model_calls += other.model_calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cost_usd += other.cost_usd
        self.runtime_s += other.runtime_s
        return self

    def __add__(self, other: Usage) -> Usage:
        return self.copy().add(other)

    def copy(self) -> Usage:
        return Usage(self.model_calls, self.input_tokens, self.output_tokens,
                     self.cost_usd, self.runtime_s)

    def as_dict(self) -> dict[str, int | float]:
        return {
            "model_calls": self.model_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "cost_usd": self.cost_usd,
            "runtime_s": self.runtime_s,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Usage:
        """Inverse of :meth:`as_dict`; missing keys are zero, ``total_tokens`` is derived."""
        if not data:
            return cls()
        return cls(
            model_calls=int(data.get("model_calls", 0) or 0),
            input_tokens=int(data.get("input_tokens", 0) or 0),
            output_tokens=int(data.get("output_tokens", 0) or 0),
            cost_usd=float(data.get("cost_usd", 0.0) or 0.0),
            runtime_s=float(data.get("runtime_s", 0.0) or 0.0),
        )


def remaining(budget: Budget, usage: Usage) -> Budget:
    """What is left of ``budget`` after ``usage`` (never below zero; unlimited stays unlimited)."""
    values: dict[str, Any] = {}
    for axis in BUDGET_AXES:
        limit = getattr(budget, axis)
        measure = _MEASURE.get(axis)
        if limit is None or measure is None:
            values[axis] = limit  # unlimited, or a per-run cap that usage does not consume
        else:
            left = limit - getattr(usage, measure)
            values[axis] = left if left > 0 else type(limit)(0)
    return _budget(values)


def narrow(requested: Budget, available: Budget) -> Budget:
    """The child's effective budget: the smaller figure on every axis.

    ``None`` in ``requested`` means "whatever is available"; ``None`` in ``available``
    means no cap from above. The result never exceeds ``available`` on any axis.
    """
    values: dict[str, Any] = {}
    for axis in BUDGET_AXES:
        wanted = getattr(requested, axis)
        cap = getattr(available, axis)
        if wanted is None:
            values[axis] = cap
        elif cap is None:
            values[axis] = wanted
        else:
            values[axis] = wanted if wanted <= cap else cap
    return _budget(values)


# the axes a parent's children share out between them: model calls, tokens and money add
# up across siblings; runtime does not (they run at once), nor do the per-run caps
SHARED_AXES: tuple[str, ...] = ("max_model_calls", "max_tokens", "max_cost_usd")


def left_after(available: Budget, taken: Iterable[Budget]) -> Budget:
    """What ``available`` has left for one more child once its other children (``taken``)
    have their figures on :data:`SHARED_AXES`: never below zero, unlimited stays unlimited,
    and a child without a figure on an axis takes nothing there (it gets whatever is left).

    The one rule for "what may this child ask for": the tree editor's add form offers it
    and lint holds each planned child to it."""
    taken = list(taken)
    values = dict(available.__dict__)
    for axis in SHARED_AXES:
        cap = values[axis]
        if cap is None:
            continue
        promised = sum(figure for child in taken if (figure := getattr(child, axis)) is not None)
        left = max(cap - promised, 0)
        # sums of costs pick up float noise (0.1 + 0.2); a millionth of a dollar is plenty
        values[axis] = round(left, 6) if isinstance(left, float) else left
    return _budget(values)


def _figure(axis: str, value: float | int | None) -> str:
    if value is None:
        return "unlimited"
    if axis == "max_cost_usd":
        return f"{value:g} USD"
    return f"{value:g}{_UNITS[axis]}"


def exceeds(requested: Budget, available: Budget) -> list[Issue]:
    """One issue per axis where ``requested`` asks for more than ``available`` allows.

    ``None`` in ``requested`` is not an excess (it means "whatever is available").
    """
    issues: list[Issue] = []
    wanted_by_axis, cap_by_axis = requested.__dict__, available.__dict__   # the axes' values
    for axis in BUDGET_AXES:
        wanted = wanted_by_axis[axis]
        cap = cap_by_axis[axis]
        if wanted is not None and cap is not None and wanted > cap:
            issues.append(Issue(
                f"budget.{axis}",
                f"{axis} asks for {_figure(axis, wanted)} but the parent allows at most "
                f"{_figure(axis, cap)}; lower it to {cap:g} or less, or leave it empty to "
                f"take whatever the parent has left.",
            ))
    return issues


def used(usage: Usage, axis: str) -> int | float:
    """How much of consumable ``axis`` ``usage`` has used (``max_tokens``: the total tokens)."""
    value: int | float = getattr(usage, _MEASURE[axis])
    return value


def overshot(budget: Budget, usage: Usage) -> str | None:
    """An axis a model call went strictly beyond (tokens and cost are known only once it
    is made; runtime is the hard timeout's business), else ``None``. Runs after every call."""
    if budget.max_tokens is not None and usage.total_tokens > budget.max_tokens:
        return "max_tokens"
    if budget.max_cost_usd is not None and usage.cost_usd > budget.max_cost_usd:
        return "max_cost_usd"
    if budget.max_model_calls is not None and usage.model_calls > budget.max_model_calls:
        return "max_model_calls"
    return None


def hard_limit_hit(budget: Budget, usage: Usage) -> str | None:
    """The first consumable axis whose limit is used up (usage >= limit), else ``None``.

    "Used up" includes exactly at the limit: no further model call fits.
    """
    for axis, measure in CONSUMABLE_AXES:
        limit = getattr(budget, axis)
        if limit is not None and getattr(usage, measure) >= limit:
            return axis
    return None


def fraction_used(budget: Budget, usage: Usage) -> dict[str, float | None]:
    """Per consumable axis, the share of the limit used (``None`` when unlimited).

    For meters in the UI; may exceed 1.0 when a call overshot. A zero limit reads as 1.0.
    """
    out: dict[str, float | None] = {}
    for axis, measure in CONSUMABLE_AXES:
        limit = getattr(budget, axis)
        if limit is None:
            out[axis] = None
        elif limit == 0:
            out[axis] = 1.0
        else:
            out[axis] = getattr(usage, measure) / limit
    return out


def soft_threshold_crossed(budget: Budget, usage: Usage, threshold: float = 0.8) -> list[str]:
    """Consumable axes whose usage reached ``threshold`` (a fraction) of their limit."""
    crossed: list[str] = []
    for axis, measure in CONSUMABLE_AXES:
        limit = getattr(budget, axis)
        if limit is not None and getattr(usage, measure) >= threshold * limit:
            crossed.append(axis)
    return crossed


def describe_usage(budget: Budget, usage: Usage) -> dict[str, dict[str, float | int | None]]:
    """Per consumable axis: used, limit and remaining figures, e.g. for a budget inbox item."""
    out: dict[str, dict[str, float | int | None]] = {}
    for axis, measure in CONSUMABLE_AXES:
        limit = getattr(budget, axis)
        used = getattr(usage, measure)
        out[axis] = {
            "used": used,
            "limit": limit,
            "remaining": None if limit is None else max(limit - used, 0),
        }
    return out


def parse_budget(data: Budget | dict[str, Any] | None, *, field: str = "budget") -> Budget:
    """Validate a budget dict (either spelling) into a :class:`Budget`.

    Raises ``ProtocolError(ERR_INVALID_PACKET)`` listing every bad axis as ``budget.<axis>``.
    """
    if data is None:
        return _UNLIMITED
    if isinstance(data, Budget):
        return data
    try:
        return Budget.model_validate(data)
    except ValidationError as exc:
        issues = [
            Issue(".".join([field, *(str(part) for part in error["loc"])]),
                  "unknown budget axis" if error["type"] == "extra_forbidden" else error["msg"])
            for error in exc.errors()
        ]
        raise ProtocolError(
            ErrorCode.INVALID_PACKET,
            f"The budget is not valid: {issues[0].field}: {issues[0].message}. The axes are "
            f"{', '.join(BUDGET_AXES)}; each is a non-negative number, or null for unlimited.",
            issues=issues,
        ) from None
