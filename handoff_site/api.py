"""The one NinjaAPI: each app adds its router; errors are JSON `{"detail": ...}`."""

from __future__ import annotations

import logging
import time
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError

from delegations.accounts import api as accounts_api
from delegations.accounts.auth import api_auth
from delegations.composer import api as composer_api
from delegations.composer.services import DelegationError
from delegations.inbox import api as inbox_api
from delegations.models import WorkerHeartbeat
from delegations.protocol.errors import ProtocolError
from delegations.runs import api as runs_api
from delegations.runs.workflows import RunError
from skills import api as skills_api

logger = logging.getLogger(__name__)

api = NinjaAPI(
    title="Handoff API",
    version="1.0",
    description="Skills, delegations, runs and approvals. Authenticate with "
                "`Authorization: Bearer <token>` (create one under Account) or a browser session.",
    auth=api_auth,
    urls_namespace="api",
)

api.add_router("/skills", skills_api.router)
api.add_router("", accounts_api.router)
api.add_router("/delegations", composer_api.router)
api.add_router("/runs", runs_api.router)
api.add_router("/approvals", inbox_api.router)
api.add_router("/protocol", runs_api.protocol_router)


class HealthOut(Schema):
    status: str
    database: dict[str, Any]
    channel_layer: dict[str, Any]
    workers: dict[str, Any]
    version: str


def _check_database() -> dict[str, Any]:
    started = time.perf_counter()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return {"ok": True, "vendor": connection.vendor,
                "ms": round((time.perf_counter() - started) * 1000, 2)}
    except Exception as exc:
        return {"ok": False, "vendor": connection.vendor, "error": str(exc)}


def _check_channel_layer() -> dict[str, Any]:
    layer = get_channel_layer()
    if layer is None:
        return {"ok": False, "error": "CHANNEL_LAYERS is not configured"}
    try:
        async def roundtrip() -> bool:
            channel = await layer.new_channel("health.")
            await layer.send(channel, {"type": "health.ping"})
            message = await layer.receive(channel)
            return bool(message.get("type") == "health.ping")
        ok = async_to_sync(roundtrip)()
        return {"ok": ok, "backend": type(layer).__name__}
    except Exception as exc:
        return {"ok": False, "backend": type(layer).__name__, "error": str(exc)}


def _check_workers() -> dict[str, Any]:
    if settings.HANDOFF_TASK_BACKEND != "db":
        return {"ok": True, "backend": settings.HANDOFF_TASK_BACKEND,
                "note": "workers of this backend report elsewhere"}
    try:
        alive = list(WorkerHeartbeat.alive().values("worker_id", "kind", "last_seen"))
    except Exception as exc:
        return {"ok": False, "error": str(exc)}
    return {"ok": bool(alive), "backend": "db", "alive": len(alive),
            "workers": [{**w, "last_seen": w["last_seen"].isoformat()} for w in alive]}


@api.get("/health", auth=None, response=HealthOut, tags=["health"],
         summary="Database, channel layer and worker status")
def health(request: HttpRequest) -> HealthOut:
    database, layer, workers = _check_database(), _check_channel_layer(), _check_workers()
    status = "ok" if database["ok"] and layer["ok"] else "degraded"
    if status == "ok" and not workers["ok"]:
        status = "degraded"
    return HealthOut(status=status, database=database, channel_layer=layer, workers=workers,
                     version=api.version)


@api.exception_handler(ProtocolError)
def protocol_error(request: HttpRequest, exc: ProtocolError) -> HttpResponse:
    return api.create_response(request, {"detail": exc.message, **exc.as_dict()}, status=422)


@api.exception_handler(RunError)
def run_conflict(request: HttpRequest, exc: RunError) -> HttpResponse:
    return api.create_response(request, {"detail": exc.message, **exc.details}, status=exc.status)


@api.exception_handler(DelegationError)
def delegation_refused(request: HttpRequest, exc: DelegationError) -> HttpResponse:
    return api.create_response(request, {"detail": exc.message, **exc.details}, status=exc.status)


@api.exception_handler(AuthenticationError)
def unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return api.create_response(
        request, {"detail": "Authentication required: send `Authorization: Bearer <token>` "
                            "or log in."}, status=401)


@api.exception_handler(PermissionDenied)
def forbidden(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc) or "You are not allowed to do this."},
                               status=403)


@api.exception_handler(Http404)
def not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc) or "Not found."}, status=404)


@api.exception_handler(NinjaValidationError)
def invalid_input(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
    return api.create_response(request, {"detail": exc.errors}, status=422)


@api.exception_handler(HttpError)
def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc)}, status=exc.status_code)


@api.exception_handler(Exception)
def server_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.exception("Unhandled API error on %s %s", request.method, request.path)
    return api.create_response(request, {"detail": "Internal server error; it has been logged."},
                               status=500)
