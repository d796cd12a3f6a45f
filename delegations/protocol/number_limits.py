"""The numbers a packet holds: JSON numbers, each within a bound.

pydantic's lax mode reads ``true`` as 1 and the text ``"120"`` as 120, so ``timeout_s: true``
was a one-second timeout; a packet's numbers are JSON numbers, never true/false or text.
The seeds give these fields a type (number, integer) but no range; the bounds below are
far past any real delegation and keep a slip (``1e308``, ``10**30``) away from the runner's
arithmetic, the database's integer columns and the pages that draw the figures.
docs/protocol.md lists each next to its field. Each field keeps its own lower bound.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field

MAX_SECONDS = 86_400           # timeout_s and budget.max_runtime_s (the timeout without one): a day
MAX_COUNT = 10**9              # model calls, tokens, iterations, attempts; metadata.priority either way
MAX_COST_USD = 1_000_000
MAX_CONCURRENCY = 1_000        # children running at once (the runner's default is 8)
MAX_DEPTH = 100                # depth and max_depth (the hand-off protocol advises 3)


def _json_number(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("must be a number, not true/false")
    if isinstance(value, str):
        raise ValueError("must be a number written without quotes, not text")
    return value


# The bound comes before the check so that pydantic writes it into the JSON schema as
# "maximum" (after it, the schema says "le", which JSON Schema does not know).
_JSON_NUMBER = BeforeValidator(_json_number)
Count = Annotated[int, Field(le=MAX_COUNT), _JSON_NUMBER]
Seconds = Annotated[float, Field(le=MAX_SECONDS), _JSON_NUMBER]
Dollars = Annotated[float, Field(le=MAX_COST_USD), _JSON_NUMBER]
Concurrency = Annotated[int, Field(le=MAX_CONCURRENCY), _JSON_NUMBER]
Depth = Annotated[int, Field(le=MAX_DEPTH), _JSON_NUMBER]
Number = Annotated[int | float, Field(ge=-MAX_COUNT, le=MAX_COUNT), _JSON_NUMBER]
