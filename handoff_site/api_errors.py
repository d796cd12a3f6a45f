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

JSON_TYPES = ("application/json",)


class BodyError(Exception):
    """A request body the API cannot read; ``status`` is 400, 413 or 415."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _is_json(content_type: str) -> bool:
    return content_type in JSON_TYPES or (content_type.startswith("application/")
                                          and content_type.endswith("+json"))


class JSONBodyParser(Parser):
    """ninja's JSON parser, with a reason when the body is not JSON. A JSON body sent
    with another (or no) ``Content-Type`` is still read, as ``curl -d`` sends it."""

    def parse_body(self, request: HttpRequest) -> DictStrAny:
        content_type = request.content_type or ""
        try:
            data = json.loads(request.body)
        except UnicodeDecodeError as exc:
            raise BodyError(400, f"The body is not UTF-8 text (byte {exc.start}); send JSON.") from exc
        except ValueError as exc:
            if content_type and not _is_json(content_type):
                raise BodyError(415, f"This operation reads application/json; the body was sent as "
                                     f"{content_type!r} and is not JSON.") from exc
            raise BodyError(400, f"The body is not valid JSON: {exc}.") from exc
        except RecursionError as exc:
            raise BodyError(400, "The body is JSON nested too deeply.") from exc
        return data  # type: ignore[no-any-return]


def body_error_of(exc: HttpError) -> BodyError | None:
    """The :class:`BodyError` ninja wrapped in its generic "Cannot parse request body"."""
    cause = exc.__cause__
    return cause if isinstance(cause, BodyError) else None


def unreadable_body(exc: MultiPartParserError | SuspiciousOperation) -> tuple[int, str]:
    """Status and message for a form or multipart body Django refused to parse."""
    if isinstance(exc, RequestDataTooBig):
        return 413, f"The request body is too large: {exc}."
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
ERROR_STATUSES = {
    "400": "The request cannot be read (malformed body or form)",
    "401": "Authentication required",
    "403": "Not allowed for this user",
    "404": "Not found",
    "409": "Conflicts with the current state",
    "413": "Request body too large",
    "415": "Unsupported Content-Type",
    "422": "Invalid input",
    "429": "Too many attempts, or too many runs waiting to start; wait for Retry-After seconds",
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
