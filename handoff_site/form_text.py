"""The text limits (delegations/protocol/text_limits.py) for query strings and form posts,
on every page and API route: a control character in a field answers 422 naming it, before
a view stores it or a database refuses it (PostgreSQL cannot hold a NUL). Form decoding
already replaced bytes that are not UTF-8, so a field never holds a lone surrogate; JSON
typed into a field is checked where it is read (``text_limits.loads``)."""

from __future__ import annotations

from collections.abc import Callable

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
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            issue = _field_issue(request.GET) or (_field_issue(request.POST) if _reads_form(request) else None)
        except (MultiPartParserError, SuspiciousOperation, UnreadablePostError) as exc:
            if request.content_type == FORM_TYPE:
                return self.get_response(request)   # the view meets the same error and says why
            return HttpResponse(f"The form could not be read ({exc}); send it again.", status=400,
                                content_type="text/plain; charset=utf-8")
        if issue is None:
            return self.get_response(request)
        message = f"The field '{issue.field}' {issue.message}. Remove it and send the form again."
        if request.path.startswith("/api/"):
            return JsonResponse({"detail": message, "issues": [issue.as_dict()]}, status=422)
        return HttpResponse(message, status=422, content_type="text/plain; charset=utf-8")
