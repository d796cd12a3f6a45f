"""The one NinjaAPI: each app adds its router; errors are JSON `{"detail": ...}`."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.db import DataError, connection
from django.http import Http404, HttpRequest, HttpResponse, UnreadablePostError
from django.http.multipartparser import MultiPartParserError
from ninja import Schema, Status
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError

from delegations.accounts import api as accounts_api
from delegations.accounts.auth import WRONG_TOKEN, api_auth, bearer_token
from delegations.accounts.rate_limits import RateLimited
from delegations.composer import api as composer_api
from delegations.inbox import api as inbox_api
from delegations.inbox import rules_api
from delegations.mcp_servers import api as mcp_servers_api
from delegations.models import WorkerHeartbeat
from delegations.protocol.errors import ProtocolError
from delegations.protocol.text_limits import TextLimitError
from delegations.refusals import Refusal
from delegations.remote_agents import api as remote_agents_api
from delegations.runs import api as runs_api
from skills import api as skills_api

from .api_errors import (
    HandoffNinjaAPI,
    JSONBodyParser,
    body_error_of,
    text_limit_error,
    unreadable_body,
)

logger = logging.getLogger(__name__)
CHECK_TIMEOUT_S = 2.0

api = HandoffNinjaAPI(
    title="Handoff API",
    version="1.0",
    description="Skills, delegations, runs and approvals. Authenticate with "
                "`Authorization: Bearer <token>` (create one under Account) or a browser session.",
    auth=api_auth,
    urls_namespace="api",
    parser=JSONBodyParser(),
)

api.add_router("/skills", skills_api.router)
api.add_router("", accounts_api.router)
api.add_router("/delegations", composer_api.router)
api.add_router("/runs", runs_api.router)
api.add_router("/approvals", inbox_api.router)
api.add_router("/approval-rules", rules_api.router)
api.add_router("/mcp-servers", mcp_servers_api.router)
api.add_router("/remote-agents", remote_agents_api.router)
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
            # the default prefix: channels_redis lets one receiver of a process block at a
            # time, on its own key; a "health." channel is another key, so while the run
            # feed blocked (up to 5 s) the probe waited for its turn and timed out
            channel = await layer.new_channel()
            await layer.send(channel, {"type": "health.ping"})
            # bounded: a load balancer's probe must get an answer while Redis is away
            message = await asyncio.wait_for(layer.receive(channel), CHECK_TIMEOUT_S)
            return bool(message.get("type") == "health.ping")
        ok = async_to_sync(roundtrip)()
        return {"ok": ok, "backend": type(layer).__name__}
    except Exception as exc:
        return {"ok": False, "backend": type(layer).__name__, "error": str(exc)}


def _check_task_queue() -> dict[str, Any]:
    """In rq mode the queue lives in Redis: a server that cannot reach it cannot start runs."""
    if settings.HANDOFF_TASK_BACKEND != "rq":
        return {"ok": True, "backend": settings.HANDOFF_TASK_BACKEND}
    import django_rq

    try:
        django_rq.get_connection("default").ping()
        return {"ok": True, "backend": "rq"}
    except Exception as exc:
        return {"ok": False, "backend": "rq", "error": str(exc)}


def _check_workers() -> dict[str, Any]:
    if settings.HANDOFF_TASK_BACKEND not in ("db", "rq"):
        return {"ok": True, "backend": settings.HANDOFF_TASK_BACKEND,
                "note": "workers of this backend report elsewhere"}
    try:
        alive = list(WorkerHeartbeat.alive().values("worker_id", "kind", "last_seen"))
    except Exception as exc:
        return {"ok": False, "error": str(exc)}
    return {"ok": bool(alive), "backend": settings.HANDOFF_TASK_BACKEND, "alive": len(alive),
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


class ReadyOut(Schema):
    ready: bool
    database: dict[str, Any]
    channel_layer: dict[str, Any]
    task_queue: dict[str, Any]


@api.get("/ready", auth=None, response={200: ReadyOut, 503: ReadyOut}, tags=["health"],
         summary="Readiness for a load balancer: 503 unless this server can serve")
def ready(request: HttpRequest) -> Status[ReadyOut]:
    """200 when the database, the channel layer and (in rq mode) the task queue's Redis
    answer; 503 otherwise, so a load balancer takes the server out of rotation. Workers
    are not part of it (see /api/health): a server without workers still serves pages."""
    database, layer, queue = _check_database(), _check_channel_layer(), _check_task_queue()
    ok = bool(database["ok"] and layer["ok"] and queue["ok"])
    return Status(200 if ok else 503, ReadyOut(ready=ok, database=database, channel_layer=layer,
                                              task_queue=queue))


@api.exception_handler(ProtocolError)
def protocol_error(request: HttpRequest, exc: ProtocolError) -> HttpResponse:
    return api.create_response(request, {"detail": exc.message, **exc.as_dict()}, status=422)


@api.exception_handler(Refusal)
def refused(request: HttpRequest, exc: Refusal) -> HttpResponse:
    """Every area's refusal (a run's state, the composer's checks, the inbox's rules)."""
    return exc.with_headers(api.create_response(request, {"detail": exc.message, **exc.details},
                                                status=exc.status))


@api.exception_handler(AuthenticationError)
def unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    if bearer_token(request.headers.get("Authorization", "")) is not None:
        response = api.create_response(request, {"detail": WRONG_TOKEN}, status=401)
        response["WWW-Authenticate"] = 'Bearer error="invalid_token"'
        return response
    response = api.create_response(
        request, {"detail": "Authentication required: send `Authorization: Bearer <token>` "
                            "or log in."}, status=401)
    response["WWW-Authenticate"] = "Bearer"
    return response


@api.exception_handler(PermissionDenied)
def forbidden(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc) or "You are not allowed to do this."},
                               status=403)


@api.exception_handler(Http404)
def not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc) or "Not found."}, status=404)


@api.exception_handler(NinjaValidationError)
def invalid_input(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
    return api.create_response(request, {"detail": _readable_errors(exc.errors)}, status=422)


# where ninja says a value came from (the first part of an error's "loc")
_SOURCES = {"body", "query", "path", "header", "cookie", "form", "file"}
# pydantic's name for one branch of a union, as the last part of "loc" (packet: dict | str)
_UNION_BRANCH = re.compile(r"^(str|int|float|bool|list|dict|none)$|[\[\](),' ]")


def _readable_errors(errors: Any) -> list[dict[str, Any]]:
    """Pydantic's errors, each with ``field`` (the dotted path in the request, as a person
    writes it) and a message that says what to do where its own does not. A union's
    branches are one error: "packet: Input should be a valid dictionary or a valid string",
    not one error per type it could have been."""
    readable: dict[str, dict[str, Any]] = {}
    for error in errors:
        error = _readable(error)
        field = _field(error.get("loc") or ())
        earlier = readable.get(field)
        if earlier is None:
            readable[field] = {**error, "field": field}
        elif error["msg"] not in earlier["msg"]:
            tail = error["msg"].removeprefix("Input should be ")
            joiner = " or " if tail != error["msg"] and earlier["msg"].startswith("Input should be ") else "; "
            earlier["msg"] = f"{earlier['msg']}{joiner}{tail}"
    return list(readable.values())


def _field(loc: Any) -> str:
    parts = list(loc)
    if len(parts) > 1 and parts[0] in _SOURCES:
        parts = parts[2:] if parts[0] == "body" and len(parts) > 2 else parts[1:]   # the body's own name
    while len(parts) > 1 and isinstance(parts[-1], str) and _UNION_BRANCH.search(parts[-1]):
        parts.pop()
    return ".".join(str(part) for part in parts)


def _readable(error: dict[str, Any]) -> dict[str, Any]:
    """Pydantic's error with a message that says what to do where its own does not."""
    if error.get("type") == "extra_forbidden" and error.get("loc"):
        name = error["loc"][-1]
        return {**error, "msg": f"Unknown field {name!r}: check its spelling against the "
                                f"operation's body in /api/docs (nothing was done)."}
    return error


@api.exception_handler(HttpError)
def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if (body_error := body_error_of(exc)) is not None:
        return api.create_response(request, body_error.as_detail(), status=body_error.status)
    return api.create_response(request, {"detail": str(exc)}, status=exc.status_code)


@api.exception_handler(TextLimitError)
def text_past_the_limits(request: HttpRequest, exc: TextLimitError) -> HttpResponse:
    error = text_limit_error(exc)
    return api.create_response(request, error.as_detail(), status=error.status)


@api.exception_handler(MultiPartParserError)
@api.exception_handler(SuspiciousOperation)
def unreadable_request(request: HttpRequest,
                       exc: MultiPartParserError | SuspiciousOperation) -> HttpResponse:
    # Django answers these with 400 on pages; the catch-all below would make them 500s.
    status, message = unreadable_body(exc)
    return api.create_response(request, {"detail": message}, status=status)


@api.exception_handler(RateLimited)
def too_many_attempts(request: HttpRequest, exc: RateLimited) -> HttpResponse:
    response = api.create_response(request, {"detail": exc.message}, status=429)
    response["Retry-After"] = str(exc.retry_after)
    return response


@api.exception_handler(OverflowError)
@api.exception_handler(DataError)
def out_of_range(request: HttpRequest, exc: OverflowError | DataError) -> HttpResponse:
    # A number past what the database stores (an id of 2**70): the client's input, not a
    # server fault. Routes should bound their numbers; this keeps a missed one from a 500.
    logger.warning("Out-of-range value on %s %s: %s", request.method, request.path, exc)
    return api.create_response(request, {"detail": "A number in the request is out of range "
                                                   "(at most 2**63 - 1)."}, status=422)


@api.exception_handler(RecursionError)
def nested_too_deeply(request: HttpRequest, exc: RecursionError) -> HttpResponse:
    # json.loads of "[[[[..." 100 000 deep, in a route that reads its own body
    logger.warning("Input nested too deeply on %s %s", request.method, request.path)
    return api.create_response(request, {"detail": "The request is nested too deeply to read."},
                               status=400)


@api.exception_handler(UnreadablePostError)
def body_cut_off(request: HttpRequest, exc: UnreadablePostError) -> HttpResponse:
    return api.create_response(request, {"detail": f"The request body could not be read: {exc}."},
                               status=400)


@api.exception_handler(Exception)
def server_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.exception("Unhandled API error on %s %s", request.method, request.path)
    return api.create_response(request, {"detail": "Internal server error; it has been logged."},
                               status=500)
