"""What a run fetched: the pages it read with ``http_get``.

Success criteria may check an answer against them (the ``fetched_pages`` source: "`evidence`
is quoted from `fetched_pages`"), so that an answer about a page a person named by its URL
is held to what the page said, not to the model's memory. Such a run fetches before it
answers: until it has asked for a page, its model is offered only ``http_get`` (a small
model otherwise answers from its examples at once, and fails every such criterion). The
request still waits for a person when ``network_outbound`` needs approval, and they see the
URL before anything is fetched. Once a fetch was tried (fetched, refused or failed) the
model is free again.
"""

from __future__ import annotations

import json
from typing import Any

from ..criteria import readable_criteria
from ..criteria.grounding import FETCHED_PAGES
from ..tools import YIELD_CONTROL
from .state import ActiveRun

HTTP_GET = "http_get"


def fetched_pages(messages: list[dict[str, Any]]) -> str:
    """The bodies of the pages fetched with ``http_get``, in order, read from the run's tool
    messages, which its checkpoint keeps: an answer given after a resume is judged on the
    same pages."""
    return "\n\n".join(body for body in map(_page_body, _fetches(messages)) if body is not None)


def _page_body(message: dict[str, Any]) -> str | None:
    """The page a fetch brought, or None when it brought none: it failed, or the server
    answered with an error status. An error page is not the page a person named (a small
    model that garbled the URL got a 404 page, and "404" was then a quote of it)."""
    if message.get("failure"):
        return None
    try:
        page = json.loads(message.get("content") or "")
    except ValueError:
        return None
    if not isinstance(page, dict) or not isinstance(page.get("body"), str):
        return None
    status = page.get("status")
    return page["body"] if not isinstance(status, int) or status < 400 else None


def grounding_sources(input_data: dict[str, Any], fetched: str) -> dict[str, Any]:
    """What grounding criteria read: the run's input, and the pages it fetched (if any)."""
    return {**input_data, FETCHED_PAGES: fetched} if fetched else input_data


def judged_on_fetched_pages(criteria: list[str | dict[str, Any]]) -> bool:
    """Whether any criterion checks the answer against ``fetched_pages``."""
    return any(FETCHED_PAGES in (criterion.params.get("source"), criterion.params.get("words_of"))
               for criterion in readable_criteria(criteria))


def step_for(run: ActiveRun) -> str | None:
    """The one tool a run judged on fetched pages must call next, if any: ``http_get`` until
    it has tried a fetch; then, for a small model (an adapter with ``compact_prompt``, which
    otherwise fetches the same page again and again), ``yield_control`` once a page came
    (not an error page: then it may fetch another URL, or say it found none)."""
    packet = run.scope.packet
    if packet is None or not any(tool["name"] == HTTP_GET for tool in run.scope.tools):
        return None
    if not judged_on_fetched_pages(packet.success_criteria):
        return None
    tried = list(_fetches(run.chat.messages))
    if not tried:
        return HTTP_GET
    if run.adapter.compact_prompt and any(_page_body(message) is not None for message in tried):
        return YIELD_CONTROL
    return None


def _fetches(messages: list[dict[str, Any]]) -> Any:
    return (message for message in messages
            if message.get("role") == "tool" and message.get("name") == HTTP_GET and not message.get("example"))
