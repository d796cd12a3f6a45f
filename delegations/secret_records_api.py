"""What the APIs of the records that decide where a secret goes (MCP servers, remote A2A
agents) share: superusers only, a record or 404, and a save refused with every problem."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import models
from django.http import Http404, HttpRequest
from ninja import Schema, Status


def require_superuser(request: HttpRequest, what: str) -> None:
    """PermissionDenied unless a superuser asks: ``what`` (e.g. "MCP servers") decides which
    host receives a secret."""
    if not request.user.is_superuser:
        raise PermissionDenied(f"Only superusers manage {what}: such a record decides which host "
                               f"receives a secret.")


def record_or_404[Record: models.Model](request: HttpRequest, model: type[Record], pk: int, what: str,
                                        label: str) -> Record:
    require_superuser(request, what)
    record = model._default_manager.filter(pk=pk).first()
    if record is None:
        raise Http404(f"No {label} {pk}.")
    return record


def saved_or_422(record: models.Model, error_out: type[Schema]) -> Status[Any] | None:
    """Save ``record`` when it is valid; else the 422 answer (``error_out``, the router's
    error schema) listing every problem by field."""
    try:
        record.full_clean()
    except ValidationError as exc:
        return Status(422, error_out(detail=exc.message_dict))
    record.save()
    return None
