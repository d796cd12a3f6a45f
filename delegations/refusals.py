"""The one way Handoff refuses a request: :class:`Refusal`.

Every area (runs, the composer, the inbox, the interop servers) raises it, or a subclass
naming the area, for a request it will not carry out: what a person should read, the HTTP
status that says why, what a program needs beyond the message, and when asking again
may succeed. Pages show the message; the API answers with it through one handler
(``handoff_site/api.py``). It lives here, below every area and imported by none of them
upward, so that each can raise and catch the same class.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from django.http import HttpResponseBase

Response = TypeVar("Response", bound=HttpResponseBase)


class Refusal(Exception):
    """A request refused: ``message`` says what to do next, ``status`` is the HTTP one
    (the class's ``default_status`` unless given), ``details`` what a program needs beyond
    the message (e.g. ``{"errors": [...]}``), ``retry_after`` the seconds after which the
    same request may succeed."""

    default_status: ClassVar[int] = 409

    def __init__(self, message: str, *, status: int | None = None, details: dict[str, Any] | None = None,
                 retry_after: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = self.default_status if status is None else status
        self.details = details or {}
        self.retry_after = retry_after

    def with_headers(self, response: Response) -> Response:
        """``response`` (the answer to the refused request) with Retry-After when asking again
        later may succeed."""
        if self.retry_after:
            response["Retry-After"] = str(self.retry_after)
        return response
