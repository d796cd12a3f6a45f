"""Tool schemas and message content as providers accept them, shared by the local, OpenAI
and Anthropic adapters.

Tools may reach an adapter in the hand-off protocol's own spelling (``yield_control``'s
properties straight under ``parameters``, ``required`` beside it, OpenAPI ``nullable``);
providers and llama.cpp's grammar compiler need a plain JSON Schema object, so
:func:`parameters_schema` hands every tool through ``tool_schemas.as_json_schema_tool``
(which the runner's own tool list already went through: then it changes nothing).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from ..tool_schemas import as_json_schema_tool
from ..tools import YIELD_CONTROL
from .base import ToolSchema


@lru_cache(maxsize=256)
def _normalized(tool_json: str) -> str:
    return json.dumps(as_json_schema_tool(json.loads(tool_json))["parameters"])


def parameters_schema(tool: ToolSchema) -> dict[str, Any]:
    """The tool's parameters as a standard JSON Schema object (a fresh dict per call).

    Property order is kept: a constrained model writes properties in the order listed.
    """
    key = json.dumps({"name": tool.get("name", ""), "parameters": tool.get("parameters") or {},
                      "required": tool.get("required")}, default=str)
    return dict(json.loads(_normalized(key)))


def tool_description(tool: ToolSchema) -> str:
    return str(tool.get("description") or "")


def arguments_json(arguments: Any) -> str:
    """Tool-call arguments as the JSON text OpenAI-style histories carry."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)


def content_text(content: Any) -> str:
    """A message's content as text: tool results may arrive as dicts or lists."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False, default=str)


def output_shapes(tools: list[ToolSchema]) -> dict[str, Any]:
    """What the criteria say the answer's fields may be (``yield_control``'s
    ``output_shapes``, from the runner), or {} when it has none or is not offered."""
    return next((dict(tool.get("output_shapes") or {}) for tool in tools if tool["name"] == YIELD_CONTROL), {})
