"""The tools a model call is offered, with what the criteria say the answer may be.

``yield_control`` carries the run's ``output_shapes`` (:mod:`..criteria.shaping`): an
adapter that decodes under a grammar (the local model) holds quotes, choices and numbers
to them and scores the labels; the others ignore them, and the criteria check every answer
afterwards either way. Built once per run and per set of fetched pages.
"""

from __future__ import annotations

from typing import Any

from ..criteria.shaping import output_shapes
from ..tools import YIELD_CONTROL
from .fetched import fetched_pages, grounding_sources
from .state import ActiveRun


def shaped_tools(run: ActiveRun, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``tools`` with ``yield_control`` carrying the run's output shapes (``tools`` as given
    when nothing shapes the answer)."""
    packet = run.scope.packet
    if packet is None or not any(tool["name"] == YIELD_CONTROL for tool in tools):
        return tools
    fetched = fetched_pages(run.chat.messages)
    key = (id(tools), len(tools), len(fetched))
    cached = run.scope.shaped
    if cached is not None and cached[0] == key:
        return cached[1]
    shapes = output_shapes(packet.success_criteria, packet.expected_output_schema,
                           grounding_sources(packet.input_data, fetched),
                           run.scope.examples)
    shaped = tools
    if shapes:
        shaped_dict = shapes.as_dict()
        shaped = [{**tool, "output_shapes": shaped_dict} if tool["name"] == YIELD_CONTROL else tool
                  for tool in tools]
    run.scope.shaped = (key, shaped)
    return shaped
