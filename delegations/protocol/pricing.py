"""What a model call costs: a per-model price table in USD per million tokens.

Every model call is metered; the runner turns the tokens an adapter reports
into dollars with :func:`cost_usd`. Prices are list prices for standard (non-batch,
uncached) input and output tokens; local models cost nothing.

Model names are matched forgivingly, because providers return dated or prefixed names:

- case is ignored, and a ``provider/`` prefix is dropped (``openai/gpt-4o`` -> ``gpt-4o``);
- an exact entry wins; otherwise the longest entry that the name extends by a date or
  release tag only is used (``gpt-4o-mini-2024-07-18`` -> ``gpt-4o-mini``,
  ``claude-sonnet-4-5-20250929`` -> ``claude-sonnet-4-5``, ``claude-3-5-haiku-latest``).
  A newer version is *not* priced as an older one (``claude-opus-4-6`` does not match
  ``claude-opus-4``): prices change between versions, so it stays unknown until listed;
- local model families (SmolLM, Llama, Qwen, ... as served by llama.cpp or Ollama) are
  free under any tag (``llama3.2:1b``, ``SmolLM2-135M-Instruct.Q4_1``).

An unknown model costs ``0.0``: a missing price must never stop a run. Because a zero
could hide real spend, :func:`estimate_cost` also says whether the price was known
(``CostEstimate.known``), and :func:`lookup_price` returns ``None`` for unknown models,
so callers can warn ("no price for model X: cost not counted") instead of guessing.

A deployment overrides or extends the table by passing ``prices`` (RunnerSettings does):
a mapping of model name to a :class:`ModelPrice`, an ``(input, output)`` pair or
``{"input": ..., "output": ...}``. Overrides are consulted before the built-in table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from .errors import ErrorCode, Issue, ProtocolError

_PER_MILLION = 1_000_000


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """USD per million input tokens and per million output tokens."""

    input_per_million: float
    output_per_million: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_million
                + output_tokens * self.output_per_million) / _PER_MILLION


@dataclass(frozen=True, slots=True)
class CostEstimate:
    cost_usd: float
    known: bool            # False: the model has no price, cost_usd is 0.0 and undercounts
    priced_as: str | None  # the table entry used, e.g. "gpt-4o-mini" for a dated name


PriceSpec = ModelPrice | tuple[float, float] | Mapping[str, float]
PriceTable = Mapping[str, PriceSpec]

FREE = ModelPrice(0.0, 0.0)

PRICES: dict[str, ModelPrice] = {
    # OpenAI (standard tier list prices)
    "gpt-5": ModelPrice(1.25, 10.00),
    "gpt-5-pro": ModelPrice(15.00, 120.00),
    "gpt-5-mini": ModelPrice(0.25, 2.00),
    "gpt-5-nano": ModelPrice(0.05, 0.40),
    "gpt-4.1": ModelPrice(2.00, 8.00),
    "gpt-4.1-mini": ModelPrice(0.40, 1.60),
    "gpt-4.1-nano": ModelPrice(0.10, 0.40),
    "gpt-4o": ModelPrice(2.50, 10.00),
    "gpt-4o-mini": ModelPrice(0.15, 0.60),
    "gpt-4-turbo": ModelPrice(10.00, 30.00),
    "gpt-4": ModelPrice(30.00, 60.00),
    "gpt-4.5": ModelPrice(75.00, 150.00),
    "gpt-3.5-turbo": ModelPrice(0.50, 1.50),
    "o1": ModelPrice(15.00, 60.00),
    "o1-mini": ModelPrice(1.10, 4.40),
    "o1-preview": ModelPrice(15.00, 60.00),
    "o1-pro": ModelPrice(150.00, 600.00),
    "o3": ModelPrice(2.00, 8.00),
    "o3-mini": ModelPrice(1.10, 4.40),
    "o3-pro": ModelPrice(20.00, 80.00),
    "o4-mini": ModelPrice(1.10, 4.40),
    # Anthropic
    "claude-opus-4-6": ModelPrice(5.00, 25.00),
    "claude-opus-4-5": ModelPrice(5.00, 25.00),
    "claude-opus-4-1": ModelPrice(15.00, 75.00),
    "claude-opus-4": ModelPrice(15.00, 75.00),
    "claude-sonnet-4-6": ModelPrice(3.00, 15.00),
    "claude-sonnet-4-5": ModelPrice(3.00, 15.00),
    "claude-sonnet-4": ModelPrice(3.00, 15.00),
    "claude-haiku-4-5": ModelPrice(1.00, 5.00),
    "claude-3-7-sonnet": ModelPrice(3.00, 15.00),
    "claude-3-5-sonnet": ModelPrice(3.00, 15.00),
    "claude-3-5-haiku": ModelPrice(0.80, 4.00),
    "claude-3-opus": ModelPrice(15.00, 75.00),
    "claude-3-sonnet": ModelPrice(3.00, 15.00),
    "claude-3-haiku": ModelPrice(0.25, 1.25),
    # Our own adapters: the local model runs on this machine, scripted replays cost nothing.
    "local": FREE,
    "scripted": FREE,
}


# Open-weight families usually served locally (llama.cpp, Ollama, vLLM on own hardware):
# free under any size or quantization tag. A paid host serving them is priced by override.
FREE_FAMILIES: tuple[str, ...] = ("smollm", "llama", "qwen", "mistral", "gemma", "phi",
                                  "deepseek-r1:", "tinyllama")

# What may follow a priced name and still be the same model: a release date
# (-2024-08-06, -20241022, -0613) or a moving tag (-latest).
_VERSION_TAG = re.compile(r"^(-\d{4}-\d{2}-\d{2}|-\d{8}|-\d{4}|-latest)$")


def _normalize_name(model: str) -> str:
    name = model.strip().lower()
    # "openai/gpt-4o", "anthropic/claude-3-5-haiku": the provider prefix is not part of the price.
    return name.rsplit("/", 1)[-1]


def _as_price(model: str, spec: PriceSpec) -> ModelPrice:
    if isinstance(spec, ModelPrice):
        return spec
    try:
        if isinstance(spec, Mapping):
            price = ModelPrice(float(spec["input"]), float(spec["output"]))
        else:
            input_price, output_price = spec
            price = ModelPrice(float(input_price), float(output_price))
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(
            ErrorCode.INVALID_ADAPTER_CONFIG,
            f"Price for model '{model}' must be {{'input': USD, 'output': USD}} per million "
            f"tokens or an (input, output) pair; got {spec!r}.",
            issues=[Issue(f"prices.{model}", "expected input and output prices")]) from exc
    if price.input_per_million < 0 or price.output_per_million < 0:
        raise ProtocolError(
            ErrorCode.INVALID_ADAPTER_CONFIG,
            f"Price for model '{model}' must not be negative.",
            issues=[Issue(f"prices.{model}", "prices must be >= 0")])
    return price


def _match(name: str, table: Mapping[str, ModelPrice]) -> str | None:
    if name in table:
        return name
    best: str | None = None
    for entry in table:
        if (name.startswith(entry) and _VERSION_TAG.match(name[len(entry):])
                and (best is None or len(entry) > len(best))):
            best = entry
    return best


@lru_cache(maxsize=512)
def _builtin_match(name: str) -> str | None:
    # The built-in table never changes, so its (prefix-scanning) lookups are cached.
    return _match(name, PRICES)


def normalize_prices(prices: PriceTable) -> dict[str, ModelPrice]:
    """An override table in canonical form (lower-case names, ModelPrice values); raises
    ProtocolError naming the model whose price is malformed. Call it once at settings load."""
    return {_normalize_name(model): _as_price(model, spec) for model, spec in prices.items()}


def lookup_price(model: str, prices: PriceTable | None = None) -> tuple[str, ModelPrice] | None:
    """The table entry (name, price) used for ``model``, overrides first; None when unknown."""
    if model.strip().lower().startswith(("local/", "local:")):
        # The local adapter names its model "local/<file>": whatever the file, it is ours.
        return "local", PRICES["local"]
    name = _normalize_name(model)
    if prices:
        overrides = normalize_prices(prices)
        entry = _match(name, overrides)
        if entry is not None:
            return entry, overrides[entry]
    builtin = _builtin_match(name)
    if builtin is not None:
        return builtin, PRICES[builtin]
    family = next((family for family in FREE_FAMILIES if name.startswith(family)), None)
    if family is not None:
        return family, FREE
    return None


def estimate_cost(model: str, input_tokens: int, output_tokens: int,
                  prices: PriceTable | None = None) -> CostEstimate:
    found = lookup_price(model, prices)
    if found is None:
        return CostEstimate(0.0, known=False, priced_as=None)
    entry, price = found
    return CostEstimate(price.cost(max(0, input_tokens), max(0, output_tokens)),
                        known=True, priced_as=entry)


def cost_usd(model: str, input_tokens: int, output_tokens: int,
             prices: PriceTable | None = None) -> float:
    """Dollars for one call; 0.0 for an unknown model (see :func:`estimate_cost` for the flag)."""
    return estimate_cost(model, input_tokens, output_tokens, prices).cost_usd
