"""What the schema of every API request body shares."""

from __future__ import annotations

from django.conf import settings
from ninja import Schema
from pydantic import ConfigDict


class RequestBody(Schema):
    """A JSON request body, read as written: ``"position": false`` is not 0, ``"decision": 1``
    is not "1" and ``"ids": ["1"]`` is not [1]. Pydantic's lax mode converted them, so the
    API took what its published schema says it refuses."""

    model_config = ConfigDict(strict=True, extra="forbid")   # a misspelt field is refused, not ignored


def too_large() -> str:
    """What the REST API, MCP and A2A answer (413) to a body past DATA_UPLOAD_MAX_MEMORY_SIZE."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return (f"The request body is larger than this server accepts "
            f"({limit:,} bytes, DATA_UPLOAD_MAX_MEMORY_SIZE).")
