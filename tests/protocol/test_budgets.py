"""Budgets shrink down the delegation chain and every model call is metered.

Budgets are the resource boundaries of delegation contracts.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from delegations.protocol.budgets import (
    BUDGET_AXES,
    Budget,
    Usage,
    describe_usage,
    exceeds,
    fraction_used,
    hard_limit_hit,
    narrow,
    overshot,
    parse_budget,
    remaining,
    soft_threshold_crossed,
    used,
)
from delegations.protocol.errors import ErrorCode, ProtocolError
from delegations.protocol.number_limits import MAX_COST_USD, MAX_SECONDS

# -- Budget ---------------------------------------------------------------------------------


def test_an_empty_budget_is_unlimited_on_every_axis() -> None:
    budget = Budget()
    assert budget.is_unlimited
    assert all(getattr(budget, axis) is None for axis in BUDGET_AXES)
    assert Budget.unlimited() == budget


def test_it_accepts_the_protocols_camel_case_spellings_and_serializes_snake_case() -> None:
    budget = Budget.model_validate({
        "maxModelCalls": 10, "maxTokens": 5000, "maxRuntimeSeconds": 60,
        "maxCostUsd": 0.5, "maxConcurrency": 2, "maxIterations": 4,
    })
    assert budget.model_dump() == {
        "max_model_calls": 10, "max_tokens": 5000, "max_runtime_s": 60.0,
        "max_cost_usd": 0.5, "max_concurrency": 2, "max_iterations": 4,
    }
    assert Budget.model_validate({"maxRuntimeS": 3}).max_runtime_s == 3.0


def test_it_accepts_snake_case_and_round_trips_through_json() -> None:
    budget = Budget(max_tokens=100, max_cost_usd=1.25)
    assert Budget.model_validate_json(budget.model_dump_json()) == budget
    assert budget.as_dict(include_unlimited=False) == {"max_tokens": 100, "max_cost_usd": 1.25}


@pytest.mark.parametrize("data", [
    {"max_tokens": -1},
    {"max_cost_usd": -0.01},
    {"max_concurrency": 0},
    {"max_model_calls": True},
    {"max_cost_usd": float("inf")},
    {"max_tokens": "lots"},
])
def test_it_rejects_negative_boolean_or_non_numeric_limits(data: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Budget.model_validate(data)


def test_it_rejects_an_unknown_axis_so_typos_do_not_silently_mean_unlimited() -> None:
    with pytest.raises(ValueError, match="max_token"):
        Budget.model_validate({"max_token": 5})


def test_a_budget_is_immutable() -> None:
    budget = Budget(max_tokens=5)
    with pytest.raises(ValueError):
        budget.max_tokens = 10  # type: ignore[misc]


def test_parse_budget_reports_every_bad_axis_as_a_protocol_error() -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_budget({"maxTokens": -1, "max_cost_usd": "x"})
    error = caught.value
    assert error.code == ErrorCode.INVALID_PACKET
    assert [issue.field for issue in error.issues] == ["budget.maxTokens", "budget.max_cost_usd"]
    assert "budget.maxTokens" in error.message


def test_parse_budget_treats_none_as_unlimited_and_passes_budgets_through() -> None:
    assert parse_budget(None).is_unlimited
    budget = Budget(max_tokens=3)
    assert parse_budget(budget) is budget


# -- Usage ----------------------------------------------------------------------------------


def test_charging_a_model_call_adds_one_call_and_its_tokens_cost_and_time() -> None:
    usage = Usage()
    usage.charge(input_tokens=120, output_tokens=30, cost_usd=0.002, runtime_s=0.4)
    usage.charge(input_tokens=10, output_tokens=5)
    assert usage.model_calls == 2
    assert usage.total_tokens == 165
    assert usage.cost_usd == pytest.approx(0.002)
    assert usage.runtime_s == pytest.approx(0.4)


def test_a_childs_usage_is_added_to_its_parents() -> None:
    parent = Usage(model_calls=1, input_tokens=10, output_tokens=10)
    child = Usage(model_calls=2, input_tokens=5, output_tokens=1, cost_usd=0.1, runtime_s=2)
    parent.add(child)
    assert parent == Usage(model_calls=3, input_tokens=15, output_tokens=11, cost_usd=0.1,
                           runtime_s=2)
    assert child.model_calls == 2  # the child's own figures are untouched


def test_adding_usages_with_plus_leaves_both_operands_alone() -> None:
    one, two = Usage(model_calls=1), Usage(model_calls=2)
    assert (one + two).model_calls == 3
    assert (one.model_calls, two.model_calls) == (1, 2)


def test_usage_round_trips_through_its_dict_form() -> None:
    usage = Usage(model_calls=3, input_tokens=7, output_tokens=4, cost_usd=0.25, runtime_s=1.5)
    data = usage.as_dict()
    assert data["total_tokens"] == 11
    assert Usage.from_dict(data) == usage
    assert Usage.from_dict(None) == Usage()
    assert Usage.from_dict({"model_calls": 2}) == Usage(model_calls=2)


# -- remaining / narrow / exceeds -----------------------------------------------------------


def test_remaining_subtracts_usage_and_keeps_unlimited_axes_unlimited() -> None:
    budget = Budget(max_model_calls=10, max_tokens=1000, max_cost_usd=1.0, max_concurrency=3,
                    max_iterations=5)
    usage = Usage(model_calls=4, input_tokens=300, output_tokens=200, cost_usd=0.25)
    left = remaining(budget, usage)
    assert left.max_model_calls == 6
    assert left.max_tokens == 500
    assert left.max_cost_usd == pytest.approx(0.75)
    assert left.max_runtime_s is None
    # per-run caps are not consumed by usage
    assert (left.max_concurrency, left.max_iterations) == (3, 5)


def test_remaining_never_goes_below_zero_when_a_call_overshot() -> None:
    left = remaining(Budget(max_tokens=100, max_runtime_s=1.0),
                     Usage(input_tokens=150, runtime_s=2.5))
    assert left.max_tokens == 0
    assert left.max_runtime_s == 0.0


def test_narrow_takes_the_smaller_figure_on_each_axis() -> None:
    requested = Budget(max_tokens=5000, max_model_calls=3, max_cost_usd=None)
    available = Budget(max_tokens=2000, max_model_calls=10, max_cost_usd=0.5)
    child = narrow(requested, available)
    assert child.max_tokens == 2000
    assert child.max_model_calls == 3
    assert child.max_cost_usd == 0.5  # None in the request means "whatever is available"
    assert child.max_runtime_s is None  # unlimited on both sides


def test_narrow_keeps_a_requested_limit_when_the_parent_has_none() -> None:
    assert narrow(Budget(max_runtime_s=30), Budget()).max_runtime_s == 30


def test_exceeds_names_each_axis_above_the_parent_with_both_figures() -> None:
    issues = exceeds(Budget(max_tokens=5000, max_cost_usd=2, max_model_calls=1),
                     Budget(max_tokens=2000, max_cost_usd=0.5, max_model_calls=4))
    assert [issue.field for issue in issues] == ["budget.max_tokens", "budget.max_cost_usd"]
    assert "5000" in issues[0].message and "2000" in issues[0].message
    assert "2 USD" in issues[1].message and "0.5 USD" in issues[1].message


def test_exceeds_does_not_count_an_unset_request_or_an_unlimited_parent() -> None:
    assert exceeds(Budget(), Budget(max_tokens=10)) == []
    assert exceeds(Budget(max_tokens=10**9), Budget()) == []


limits = st.one_of(st.none(), st.integers(min_value=0, max_value=10**9))
amounts = st.one_of(st.none(), st.floats(min_value=0, max_value=MAX_COST_USD, allow_nan=False))
seconds = st.one_of(st.none(), st.floats(min_value=0, max_value=MAX_SECONDS, allow_nan=False))
budgets = st.builds(
    Budget,
    max_model_calls=limits, max_tokens=limits, max_runtime_s=seconds, max_cost_usd=amounts,
    max_concurrency=st.one_of(st.none(), st.integers(min_value=1, max_value=64)),
    max_iterations=limits,
)


@given(requested=budgets, available=budgets)
def test_narrowing_never_yields_more_than_available_on_any_axis(
        requested: Budget, available: Budget) -> None:
    child = narrow(requested, available)
    for axis in BUDGET_AXES:
        cap, got, wanted = getattr(available, axis), getattr(child, axis), getattr(requested, axis)
        if cap is not None:
            assert got is not None and got <= cap
        if wanted is not None:
            assert got is not None and got <= wanted
    assert exceeds(child, available) == []


@given(requested=budgets, available=budgets)
def test_a_request_exceeds_its_parent_exactly_when_narrowing_changes_it(
        requested: Budget, available: Budget) -> None:
    over = {issue.field.removeprefix("budget.") for issue in exceeds(requested, available)}
    child = narrow(requested, available)
    changed = {axis for axis in BUDGET_AXES
               if getattr(requested, axis) is not None
               and getattr(child, axis) != getattr(requested, axis)}
    assert over == changed


@given(budget=budgets, calls=st.integers(0, 10**6), tokens=st.integers(0, 10**9))
def test_remaining_is_never_negative_nor_above_the_budget(
        budget: Budget, calls: int, tokens: int) -> None:
    left = remaining(budget, Usage(model_calls=calls, input_tokens=tokens))
    for axis in ("max_model_calls", "max_tokens", "max_runtime_s", "max_cost_usd"):
        limit = getattr(budget, axis)
        if limit is None:
            assert getattr(left, axis) is None
        else:
            assert 0 <= getattr(left, axis) <= limit


# -- limits and thresholds ------------------------------------------------------------------


def test_no_hard_limit_is_hit_while_usage_is_below_every_limit() -> None:
    assert hard_limit_hit(Budget(max_tokens=100), Usage(input_tokens=99)) is None
    assert hard_limit_hit(Budget(), Usage(model_calls=10**6)) is None


def test_a_hard_limit_is_hit_once_usage_reaches_it() -> None:
    assert hard_limit_hit(Budget(max_model_calls=3), Usage(model_calls=3)) == "max_model_calls"
    assert hard_limit_hit(Budget(max_tokens=100), Usage(input_tokens=60, output_tokens=41)) \
        == "max_tokens"
    assert hard_limit_hit(Budget(max_cost_usd=0.1), Usage(cost_usd=0.2)) == "max_cost_usd"
    assert hard_limit_hit(Budget(max_runtime_s=5), Usage(runtime_s=5.0)) == "max_runtime_s"


def test_the_soft_threshold_reports_every_axis_at_or_past_eighty_percent() -> None:
    budget = Budget(max_tokens=1000, max_model_calls=10, max_cost_usd=1.0)
    usage = Usage(model_calls=8, input_tokens=500, cost_usd=0.95)
    assert soft_threshold_crossed(budget, usage) == ["max_model_calls", "max_cost_usd"]
    assert soft_threshold_crossed(budget, usage, threshold=0.5) == [
        "max_model_calls", "max_tokens", "max_cost_usd"]
    assert soft_threshold_crossed(Budget(), usage) == []


def test_fraction_used_feeds_meters_and_is_none_for_unlimited_axes() -> None:
    fractions = fraction_used(Budget(max_tokens=200, max_model_calls=0),
                              Usage(input_tokens=50, output_tokens=50))
    assert fractions == {"max_model_calls": 1.0, "max_tokens": 0.5, "max_runtime_s": None,
                         "max_cost_usd": None}


def test_describe_usage_gives_used_limit_and_remaining_per_axis() -> None:
    report = describe_usage(Budget(max_tokens=100), Usage(input_tokens=120))
    assert report["max_tokens"] == {"used": 120, "limit": 100, "remaining": 0}
    assert report["max_cost_usd"]["limit"] is None


def test_used_reads_each_consumable_axis_with_tokens_as_the_total() -> None:
    usage = Usage(model_calls=2, input_tokens=30, output_tokens=12, cost_usd=0.5)
    assert used(usage, "max_tokens") == 42 and used(usage, "max_model_calls") == 2
    assert used(usage, "max_cost_usd") == 0.5


def test_overshot_names_an_axis_only_when_a_call_went_strictly_beyond_it() -> None:
    budget = Budget(max_tokens=40, max_model_calls=2)
    assert overshot(budget, Usage(model_calls=2, input_tokens=30, output_tokens=10)) is None
    assert overshot(budget, Usage(model_calls=2, input_tokens=30, output_tokens=11)) == "max_tokens"
    assert overshot(budget, Usage(model_calls=3)) == "max_model_calls"
    assert overshot(Budget(), Usage(model_calls=99, cost_usd=9.0)) is None
