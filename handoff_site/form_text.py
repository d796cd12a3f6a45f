"""The text limits (delegations/protocol/text_limits.py) for query strings and form posts,
on every page and API route: a control character in a field answers 422 naming it, before
a view stores it or a database refuses it (PostgreSQL cannot hold a NUL). Form decoding
already replaced bytes that are not UTF-8, so a field never holds a lone surrogate; JSON
typed into a field is checked where it is read (``text_limits.loads``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict, UnreadablePostError
from django.http.multipartparser import MultiPartParserError

from delegations.protocol.errors import Issue
from delegations.protocol.text_limits import text_issue

FORM_TYPE = "application/x-www-form-urlencoded"
MULTIPART_TYPE = "multipart/form-data"


def _field_issue(fields: QueryDict) -> Issue | None:
    for name, values in fields.lists():
        for text in (name, *values):
            if (issue := text_issue(text, name)) is not None:
                return issue
    return None


def _reads_form(request: HttpRequest) -> bool:
    """A form post this reads before the view. Not the API's multipart bodies: Django
    empties a body whose parsing failed, and the API says why it failed (api_errors.py)."""
    if request.method != "POST":
        return False
    return request.content_type == FORM_TYPE or (
        request.content_type == MULTIPART_TYPE and not request.path.startswith("/api/"))


class FormTextLimits:
    """Refuses a query string or form field holding a control character; async in an async
    chain, so a request crosses no thread here (each crossing cost a thread hand-off on
    every request)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if iscoroutinefunction(self):
            return self.__acall__(request)
        refusal = _refusal(request)
        return refusal if refusal is not None else self.get_response(request)

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        refusal = _refusal(request)
        return refusal if refusal is not None else await self.get_response(request)


def _refusal(request: HttpRequest) -> HttpResponse | None:
    """The answer to a request whose fields break the text limits, or None to go on."""
    try:
        issue = _field_issue(request.GET) or (_field_issue(request.POST) if _reads_form(request) else None)
    except (MultiPartParserError, SuspiciousOperation, UnreadablePostError) as exc:
        if request.content_type == FORM_TYPE:
            return None   # the view meets the same error and says why
        return HttpResponse(f"The form could not be read ({exc}); send it again.", status=400,
                            content_type="text/plain; charset=utf-8")
    if issue is None:
        return None
    message = f"The field '{issue.field}' {issue.message}. Remove it and send the form again."
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": message, "issues": [issue.as_dict()]}, status=422)
    return HttpResponse(message, status=422, content_type="text/plain; charset=utf-8")
