"""What the schema of every API request body shares."""

from __future__ import annotations

from ninja import Schema
from pydantic import ConfigDict


class RequestBody(Schema):
    """A JSON request body, read as written: ``"position": false`` is not 0, ``"decision": 1``
    is not "1" and ``"ids": ["1"]`` is not [1]. Pydantic's lax mode converted them, so the
    API took what its published schema says it refuses."""

    model_config = ConfigDict(strict=True, extra="forbid")   # a misspelt field is refused, not ignored
