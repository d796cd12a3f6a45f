"""What the API answers to requests it cannot read, and how its errors are documented.

Every error is JSON ``{"detail": ...}`` with a 4xx status that says what is wrong; a
malformed body or ``Content-Type`` is the client's mistake, never a 500. The OpenAPI
schema lists these errors on every operation, so clients (and schemathesis) know them.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import HttpRequest
from django.http.multipartparser import MultiPartParserError
from ninja import NinjaAPI
from ninja.errors import HttpError
from ninja.openapi.schema import OpenAPISchema
from ninja.parser import Parser
from ninja.types import DictStrAny

from delegations.protocol import text_limits
from delegations.protocol.errors import Issue
from delegations.protocol.text_limits import TextLimitError
from delegations.request_bodies import too_large

JSON_TYPES = ("application/json",)


class BodyError(Exception):
    """A request body the API cannot read; ``status`` is 400, 413, 415, or 422 for text
    past the limits (``issues`` then names the field)."""

    def __init__(self, status: int, message: str, issues: list[Issue] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.issues = issues or []

    def as_detail(self) -> dict[str, Any]:
        """The response body: ``{"detail": ...}``, with ``issues`` as a ProtocolError's."""
        return {"detail": self.message, **({"issues": [issue.as_dict() for issue in self.issues]}
                                           if self.issues else {})}


def text_limit_error(exc: TextLimitError) -> BodyError:
    """Text or nesting past delegations/protocol/text_limits.py's limits, as a 422."""
    return BodyError(422, f"{exc}.", [exc.issue])


def _is_json(content_type: str) -> bool:
    return content_type in JSON_TYPES or (content_type.startswith("application/")
                                          and content_type.endswith("+json"))


class JSONBodyParser(Parser):
    """ninja's JSON parser, with a reason when the body is not JSON, and the text limits
    (422 naming the field). A JSON body sent with another (or no) ``Content-Type`` is
    still read, as ``curl -d`` sends it."""

    def parse_body(self, request: HttpRequest) -> DictStrAny:
        content_type = request.content_type or ""
        try:
            data = text_limits.loads(request.body, "body")
        except text_limits.TextLimitError as exc:
            raise text_limit_error(exc) from exc
        except UnicodeDecodeError as exc:
            raise BodyError(400, f"The body is not UTF-8 text (byte {exc.start}); send JSON.") from exc
        except ValueError as exc:
            if content_type and not _is_json(content_type):
                raise BodyError(415, f"This operation reads application/json; the body was sent as "
                                     f"{content_type!r} and is not JSON.") from exc
            raise BodyError(400, f"The body is not valid JSON: {exc}.") from exc
        if not isinstance(data, dict):  # every operation's body is an object (ninja took [] as {})
            raise BodyError(422, f"The body must be a JSON object ({{...}}), not {_json_kind(data)}.")
        return data


def _json_kind(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    kinds = {list: "an array", str: "a string", int: "a number", float: "a number"}
    return kinds.get(type(value), type(value).__name__)


def body_error_of(exc: HttpError) -> BodyError | None:
    """The :class:`BodyError` ninja wrapped in its generic "Cannot parse request body"."""
    cause = exc.__cause__
    return cause if isinstance(cause, BodyError) else None


def unreadable_body(exc: MultiPartParserError | SuspiciousOperation) -> tuple[int, str]:
    """Status and message for a form or multipart body Django refused to parse."""
    if isinstance(exc, RequestDataTooBig):
        return 413, too_large()
    if isinstance(exc, MultiPartParserError):
        return 400, (f"The multipart/form-data body cannot be read ({exc}); send a multipart body "
                     "with a boundary in its Content-Type, or JSON as application/json.")
    return 400, f"The request cannot be read: {exc}."


# --- the errors in the OpenAPI schema ---------------------------------------------------

ERROR_SCHEMA: dict[str, Any] = {
    "title": "Error",
    "type": "object",
    "properties": {"detail": {"title": "Detail",
                              "description": "What is wrong: a message, or a list of the "
                                             "invalid fields"}},
    "required": ["detail"],
}
ERROR_STATUSES = {   # int keys, as ninja writes an operation's own: "403" beside 403 was a key twice
    400: "The request cannot be read (malformed body or form)",
    401: "Authentication required",
    403: "Not allowed for this user",
    404: "Not found",
    409: "Conflicts with the current state",
    413: "Request body too large",
    415: "Unsupported Content-Type",
    422: "Invalid input",
    429: "Too many attempts, or too many runs waiting to start; wait for Retry-After seconds",
}


class HandoffNinjaAPI(NinjaAPI):
    """The NinjaAPI whose schema documents the ``{"detail": ...}`` errors of every operation."""

    def get_openapi_schema(self, *, path_prefix: str | None = None,
                           path_params: DictStrAny | None = None) -> OpenAPISchema:
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        schema.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
        error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                responses = operation.setdefault("responses", {})
                for status, description in ERROR_STATUSES.items():
                    responses.setdefault(status, {"description": description, **error})
        return schema
