"""The one small interface every model adapter implements.

Messages go in as OpenAI-style dicts::

    {"role": "system" | "user" | "assistant" | "tool", "content": str,
     "tool_calls": [{"id", "name", "arguments": {...}}],   # assistant only
     "tool_call_id": str, "name": str}                     # tool only

Tools go in as ``{"name", "description", "parameters": <JSON Schema>}``; ``yield_control``
may also carry ``output_shapes`` (``criteria.shaping.OutputShapes.as_dict()``): what the
success criteria say each output field may be, for an adapter that can hold decoding to it
or score its labels, which the others ignore. A call returns
one :class:`ModelTurn`; text is streamed through ``on_text`` as it is produced.

``tool_choice`` names the one tool the model must call (the runner's last turn forces
``yield_control`` this way); ``None`` leaves the choice to the model and the adapter's
config. The runner passes it only when it forces a call, so an adapter written before it
existed still works on every other turn.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import ErrorCode, ProtocolError

Message = dict[str, Any]
# Config keys that would hold a secret ("api_key", "auth_token"); not "max_tokens" or "api_key_env".
_SECRET_KEY = re.compile(r"(api_?key|secret|password|passwd|authorization|(^|_)token)$", re.IGNORECASE)
ToolSchema = dict[str, Any]
TextCallback = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(slots=True)
class ModelTurn:
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    model: str = ""
    finish_reason: str = "stop"
    # an adapter that can score its answer's labels: per output field, the value chosen,
    # its probability and the alternatives' ({"value", "probability", "alternatives":
    # [{"value", "probability"}], "calibrated"}); empty when it cannot
    label_scores: dict[str, dict[str, Any]] = field(default_factory=dict)


class ModelAdapter(ABC):
    """Subclass per provider. ``config`` is validated in ``__init__``: a bad config raises
    ProtocolError(ERR_INVALID_ADAPTER_CONFIG) naming the key, before any run starts."""

    name: ClassVar[str]
    # a small model whose answers are constrained to the tool schemas reads a shorter
    # prompt (``runner.prompt.initial_messages``)
    compact_prompt: ClassVar[bool] = False

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.config = dict(config or {})

    @abstractmethod
    async def complete(self, messages: list[Message], tools: list[ToolSchema], *,
                       on_text: TextCallback | None = None,
                       tool_choice: str | None = None) -> ModelTurn:
        """One model call; ``tool_choice`` names a tool in ``tools`` the model must call.
        Provider failures that survive retries raise ProtocolError(ERR_TOOL_FAILURE) with
        the provider's message (never an API key)."""

    def for_child(self, label: str) -> ModelAdapter:
        """The adapter a child spawned with ``label`` uses. Same provider and config by default."""
        return type(self)(self.config)

    @property
    def model_name(self) -> str:
        return str(self.config.get("model", self.name))

    def public_config(self) -> dict[str, Any]:
        """The config as it may be stored and shown: secrets removed."""
        return {k: v for k, v in self.config.items() if not _SECRET_KEY.search(k)}

    def cost_usd(self, input_tokens: int, output_tokens: int) -> float | None:
        """What a call with these token counts cost, when the adapter knows its own prices;
        None (the default) leaves it to the runner's price table."""
        return None

    def export_state(self) -> dict[str, Any]:
        """The adapter's own progress, kept in every checkpoint (a script's position, say).
        Stateless by default: an empty dict."""
        return {}

    def restore_state(self, state: dict[str, Any]) -> None:
        """Continue from what :meth:`export_state` gave, when a run resumes. Nothing to do
        for a stateless adapter."""
        return


def config_error(adapter: str, key: str, problem: str) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_ADAPTER_CONFIG,
                         f"Adapter '{adapter}': config '{key}' {problem}.",
                         details={"adapter": adapter, "key": key})
