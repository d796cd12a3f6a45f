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

import functools
import json
from html.parser import HTMLParser
from typing import Any

from ..criteria import readable_criteria
from ..criteria.grounding import FETCHED_PAGES, strings
from ..tools import YIELD_CONTROL
from .state import ActiveRun

HTTP_GET = "http_get"


def fetched_pages(messages: list[dict[str, Any]]) -> str:
    """The pages fetched with ``http_get``, in order (an HTML page's text), read from the
    run's tool messages, which its checkpoint keeps: an answer given after a resume is
    judged on the same pages."""
    return "\n\n".join(body for body in map(_page_body, _fetches(messages)) if body is not None)


def _page_body(message: dict[str, Any]) -> str | None:
    """The page a fetch brought (an HTML page's text), or None when it brought none: it
    failed, or the server answered with an error status. An error page is not the page a
    person named (a small model that garbled the URL got a 404 page, and "404" was then a
    quote of it)."""
    if message.get("failure"):
        return None
    try:
        page = json.loads(message.get("content") or "")
    except ValueError:
        return None
    if not isinstance(page, dict) or not isinstance(page.get("body"), str):
        return None
    status = page.get("status")
    if isinstance(status, int) and status >= 400:
        return None
    html = "html" in str(page.get("content_type", "")).lower()
    return page_text(page["body"]) if html else page["body"]


@functools.lru_cache(maxsize=16)   # read again for every model call and judgment of a run
def page_text(html: str) -> str:
    """The text an HTML page shows, a line per block: what the page says, not its markup
    (Gemma 3 270M answered "1" about a page's opening hours, and "1" was in its ``<h1>``).
    Markup the standard library's parser gives up on (``<![foo bar>``) leaves the page as
    it came."""
    reader = _PageText()
    try:
        reader.feed(html)
        reader.close()
    except AssertionError:   # _markupbase's "unknown status keyword ... in marked section"
        return html
    lines = (" ".join(line.split()) for line in "".join(reader.parts).splitlines())
    return "\n".join(line for line in lines if line)


class _PageText(HTMLParser):
    """Collects a page's text: scripts, styles and templates left out, a line ended at each
    block element."""

    HIDDEN = frozenset({"script", "style", "template"})
    BLOCKS = frozenset({"address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt",
                        "figcaption", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header",
                        "hr", "li", "main", "nav", "ol", "p", "pre", "section", "table", "td", "th",
                        "title", "tr", "ul"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.HIDDEN:
            self.hidden += 1
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.HIDDEN:
            self.hidden = max(0, self.hidden - 1)
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.parts.append(data)


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


def offered_for(run: ActiveRun, tools: list[dict[str, Any]], step: str) -> list[dict[str, Any]]:
    """The tool of ``step`` (:func:`step_for`) as the model is offered it: ``http_get`` with
    its ``url`` held to the URLs the run's input names, when it names any, so the fetch is
    of the page a person named (Gemma 3 270M, asked for http://127.0.0.1:8799/hours.html,
    wrote .../http_gtt.html). A person approving the fetch may still change the URL."""
    offered = [tool for tool in tools if tool["name"] == step]
    packet = run.scope.packet
    urls = named_urls(packet.input_data) if step == HTTP_GET and packet is not None else []
    if not urls:
        return offered
    return [{**tool, "parameters": {**tool["parameters"], "properties": {
        **tool["parameters"]["properties"], "url": {"type": "string", "enum": urls}}}}
        for tool in offered]


def named_urls(input_data: Any) -> list[str]:
    """The http(s) URLs among the input's values (a value that is a URL and nothing else,
    at any depth), in order, each once."""
    texts = (text.strip() for text in strings(input_data))
    return list(dict.fromkeys(text for text in texts
                              if text.startswith(("http://", "https://")) and len(text.split()) == 1))


def _fetches(messages: list[dict[str, Any]]) -> Any:
    return (message for message in messages
            if message.get("role") == "tool" and message.get("name") == HTTP_GET and not message.get("example"))
