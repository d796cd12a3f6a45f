"""``/mcp``: the MCP server with its tools, plus what django-mcpz does not serve: resources
(each published skill's manifest, a run's record as JSON), wait_for_run's wait, with
progress notifications when asked (waiting.py), and a protocol error, not Django's 400 page, for a body
past the upload limit or a form post.

What is answered here passes the same checks as django-mcpz's own calls first (token,
protocol headers and ``_meta``); django-mcpz's dispatch answers everything else.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.http.request import RawPostDataException
from django.views.decorators.csrf import csrf_exempt
from django_mcpz.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    MessageError,
    decode_message,
    error_response,
)
from django_mcpz.legacy import is_legacy_request, legacy_dispatch
from django_mcpz.server import _validate_name_header

from delegations.accounts.roles import visible_runs
from delegations.interop.mcp import run_tools, skill_run_tools, skill_tools
from delegations.interop.mcp.server import server
from delegations.interop.mcp.waiting import progress_token, wait_seconds, wait_then_answer
from delegations.request_bodies import too_large
from skills.models import Skill

RESOURCE_METHODS = ("resources/list", "resources/templates/list", "resources/read")
SKILL_SCHEME = "handoff://skills/"
RUN_SCHEME = "handoff://runs/"
LISTED_SKILLS = 200
JSON = "application/json"
# the 2026-07-28 caching hints these results must carry: lists for a minute, a read never
# (a run record changes), each for this caller only
LIST_CACHE = {"ttlMs": 60_000, "cacheScope": "private"}
READ_CACHE = {"ttlMs": 0, "cacheScope": "private"}

__all__ = ["mcp_view", "run_tools", "server", "skill_tools"]   # importing them registers their tools
server.listed = skill_run_tools  # a module holding the three functions ListedTools names


def _skill_resource(skill: Skill) -> dict[str, Any]:
    return {"uri": f"{SKILL_SCHEME}{skill.name}/{skill.version}/manifest",
            "name": f"{skill.ref} manifest", "title": f"Skill {skill.ref}",
            "description": skill.description[:300], "mimeType": JSON}


def _list(request: HttpRequest) -> dict[str, Any]:
    skills = Skill.objects.latest_versions().order_by("name")[:LISTED_SKILLS]
    return {"resources": [_skill_resource(skill) for skill in skills], **LIST_CACHE}


def _templates(request: HttpRequest) -> dict[str, Any]:
    return {**LIST_CACHE, "resourceTemplates": [
        {"uriTemplate": f"{SKILL_SCHEME}{{name}}/{{version}}/manifest", "name": "skill manifest",
         "description": "A skill's manifest.json, as the registry exports it.", "mimeType": JSON},
        {"uriTemplate": f"{RUN_SCHEME}{{run_id}}", "name": "run record",
         "description": "A run's record as read_run returns it: state, result, criteria, "
                        "usage, children and what waits for a person.", "mimeType": JSON}]}


def _read(request: HttpRequest, uri: str) -> str | None:
    """The text of the resource at ``uri``, or None when there is none the caller may read."""
    if uri.startswith(SKILL_SCHEME) and uri.endswith("/manifest"):
        name, _, version = uri[len(SKILL_SCHEME):-len("/manifest")].partition("/")
        skill = Skill.objects.filter(name=name, version=version).first()
        return skill.export_manifest_json() if skill is not None else None
    if uri.startswith(RUN_SCHEME):
        run = visible_runs(request.user).filter(pk=uri[len(RUN_SCHEME):]).first()
        return json.dumps(run_tools.run_view(request, run), default=str) if run is not None else None
    return None


def _resources(request: HttpRequest, request_id: str | int, method: str, params: dict[str, Any]) -> HttpResponse:
    if method == "resources/list":
        return server._result(request, request_id, _list(request))
    if method == "resources/templates/list":
        return server._result(request, request_id, _templates(request))
    uri = params.get("uri")
    text = _read(request, uri) if isinstance(uri, str) else None
    if text is None:
        # the specification's "resource not found" code
        return error_response(request_id, -32002, f"No resource {uri!r} that you can read.",
                              data={"uri": uri})
    return server._result(request, request_id, {"contents": [{"uri": uri, "mimeType": JSON, "text": text}], **READ_CACHE})


def _initialized_with_resources(response: HttpResponse) -> HttpResponse:
    """django-mcpz's answer to a 2025 client's initialize, saying that resources are served
    too (it names only tools)."""
    body = json.loads(response.content)
    if "result" in body:
        body["result"]["capabilities"]["resources"] = {}
    return JsonResponse(body, status=response.status_code)


def _checked(request: HttpRequest, request_id: str | int, method: str,
             params: dict[str, Any]) -> HttpResponse | None:
    """What django-mcpz checks before a call (the token, the protocol headers and ``_meta``),
    for the requests answered here: a refusal, or None to go on."""
    refused = server.auth(request)
    if refused is None and not is_legacy_request(request):
        refused = server._validate_metadata(request, request_id, method, params)
        if refused is None and method == "tools/call":
            refused = _validate_name_header(request, request_id, str(params.get("name")))
    return refused


def _answered_here(request: HttpRequest) -> HttpResponseBase | None:
    """The answer to a resources request or a wait, or None for the server's own."""
    try:
        message = decode_message(request.body)
    except MessageError:
        return None   # the server answers with its parse error
    except RecursionError:   # which the server's parser would raise too
        return error_response(None, PARSE_ERROR, "The message nests arrays or objects too deeply "
                              "to read; send a JSON-RPC message a few levels deep.",
                              status=HTTPStatus.BAD_REQUEST)
    params = message.params if isinstance(message.params, dict) else {}
    token = progress_token(params)
    # a wait is answered here, off the server's threads; one asking for no time (and no
    # progress) is an ordinary call
    streams = (message.method == "tools/call" and params.get("name") == "wait_for_run"
               and (token is not None or wait_seconds(params) > 0))
    opens = message.method == "initialize" and is_legacy_request(request)
    if not (message.method in RESOURCE_METHODS or streams or opens) or not isinstance(message.id, str | int):
        return None
    refused = _checked(request, message.id, message.method, params)
    if refused is not None:
        return refused
    if streams:
        return wait_then_answer(request, message.id, params, token)
    if opens:
        return _initialized_with_resources(legacy_dispatch(server, request, message.id, message.method, params))
    if message.method == "resources/read" and not isinstance(params.get("uri"), str):
        return error_response(message.id, INVALID_PARAMS, "resources/read needs a `uri`.")
    return _resources(request, message.id, message.method, params)


@csrf_exempt
def mcp_view(request: HttpRequest) -> HttpResponseBase:
    try:
        request.body  # noqa: B018 - read once, here, so a body past the limit is answered in the protocol
    except RequestDataTooBig:
        return error_response(None, INVALID_REQUEST, too_large(), status=HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
    except RawPostDataException:   # a form post, already read as one by the middleware
        return error_response(None, PARSE_ERROR, "MCP messages are JSON-RPC in an application/json "
                              "body, not a form.", status=HTTPStatus.UNSUPPORTED_MEDIA_TYPE)
    if request.method == "POST":
        answer = _answered_here(request)
        if answer is not None:
            return answer
    return server(request)


mcp_view.login_required = False  # type: ignore[attr-defined]  # the token is checked per request
