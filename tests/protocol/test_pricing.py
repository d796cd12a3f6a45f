"""What model calls cost."""

from __future__ import annotations

import pytest

from delegations.protocol.errors import ErrorCode, ProtocolError
from delegations.protocol.pricing import (
    ModelPrice,
    cost_usd,
    estimate_cost,
    lookup_price,
    normalize_prices,
)


def test_it_prices_input_and_output_tokens_per_million() -> None:
    # gpt-4o-mini: $0.15 in, $0.60 out per million tokens
    assert cost_usd("gpt-4o-mini", 1_000_000, 1_000_000) == pytest.approx(0.75)
    assert cost_usd("claude-haiku-4-5", 2_000, 500) == pytest.approx(0.002 + 0.0025)


@pytest.mark.parametrize(("model", "entry"), [
    ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
    ("gpt-4o-2024-08-06", "gpt-4o"),
    ("openai/gpt-4.1-mini", "gpt-4.1-mini"),
    ("claude-haiku-4-5-20251001", "claude-haiku-4-5"),
    ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
    ("GPT-4O", "gpt-4o"),
])
def test_it_recognizes_dated_and_prefixed_model_names(model: str, entry: str) -> None:
    found = lookup_price(model)

    assert found is not None and found[0] == entry


def test_it_does_not_price_a_newer_version_as_an_older_one() -> None:
    assert lookup_price("claude-opus-4-9") is None
    assert lookup_price("gpt-4o-mini-realtime") is None


def test_an_unknown_model_costs_nothing_but_is_flagged() -> None:
    estimate = estimate_cost("acme-llm-7", 10_000, 10_000)

    assert estimate.cost_usd == 0.0
    assert estimate.known is False
    assert cost_usd("acme-llm-7", 10_000, 10_000) == 0.0


def test_local_models_are_free_and_known() -> None:
    for model in ("local/SmolLM2-135M-Instruct.Q4_1", "llama3.2:1b", "scripted"):
        estimate = estimate_cost(model, 5_000, 5_000)
        assert (estimate.cost_usd, estimate.known) == (0.0, True)


def test_an_override_table_wins_over_the_built_in_prices() -> None:
    prices = {"gpt-4o-mini": {"input": 1.0, "output": 2.0}, "acme-llm-7": (0.5, 0.5)}

    assert cost_usd("gpt-4o-mini", 1_000_000, 0, prices) == pytest.approx(1.0)
    assert cost_usd("acme-llm-7-20250101", 0, 2_000_000, prices) == pytest.approx(1.0)
    assert cost_usd("gpt-4o", 1_000_000, 0, prices) == pytest.approx(2.5)


def test_a_malformed_override_names_the_model() -> None:
    with pytest.raises(ProtocolError) as caught:
        normalize_prices({"acme-llm-7": {"input": 1.0}})

    assert caught.value.code == ErrorCode.INVALID_ADAPTER_CONFIG
    assert caught.value.issues[0].field == "prices.acme-llm-7"
    with pytest.raises(ProtocolError):
        normalize_prices({"acme-llm-7": (-1.0, 1.0)})


def test_a_model_price_computes_its_own_cost() -> None:
    assert ModelPrice(3.0, 15.0).cost(1_000, 1_000) == pytest.approx(0.018)
