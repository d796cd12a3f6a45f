"""Hostile text never breaks a page: a lone surrogate, a control character or nesting past
the stated depth answers 422 naming the field, on every API route with a JSON body (the
table is the OpenAPI document, so a new route is probed too), forms and websocket frames;
and text stored before the limits (or written by a model) is drawn, never a 500."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client

from delegations.models import Delegation, Run, RunEvent
from delegations.protocol import text_limits
from delegations.protocol.text_limits import MAX_NESTING
from handoff_site.api import api
from tests.delegations import scripts
from tests.delegations.live.test_consumers import connect, frames_until_synced
from tests.delegations.runs.test_run_pages import make_run
from tests.security.conftest import World
from tests.security.routes import fill

pytestmark = pytest.mark.django_db

BAD = "caching \ud800 study"
FORM = "application/x-www-form-urlencoded"


def nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return value


def json_body_routes() -> list[tuple[str, str]]:
    """(method, path) of every operation whose request body is JSON."""
    schema = api.get_openapi_schema(path_prefix="/api/")
    return sorted((method.upper(), path) for path, operations in schema["paths"].items()
                  for method, operation in operations.items()
                  if "application/json" in operation.get("requestBody", {}).get("content", {}))


def send(world: World, method: str, path: str, text: str) -> Any:
    client = Client(raise_request_exception=False)
    return client.generic(method, fill(path, world), text, content_type="application/json",
                          headers={"Authorization": f"Bearer {world.tokens['superuser']}"})


def test_the_table_covers_the_routes_that_take_json() -> None:
    routes = json_body_routes()
    assert ("POST", "/api/delegations") in routes and ("POST", "/api/runs") in routes
    assert ("POST", "/api/delegations/lint") in routes
    assert len(routes) >= 8


@pytest.mark.parametrize(("method", "path"), json_body_routes())
def test_a_lone_surrogate_in_any_json_body_answers_422_naming_the_field(
        world: World, method: str, path: str) -> None:
    response = send(world, method, path, json.dumps({"packet": {"goal": BAD}, "name": "x"}))
    assert response.status_code == 422, response.content
    assert "packet.goal" in response.content.decode()   # the import names it within the file
    assert "lone surrogate" in response.content.decode()


@pytest.mark.parametrize(("method", "path"), json_body_routes())
def test_nesting_past_the_stated_depth_in_any_json_body_answers_422_naming_the_field(
        world: World, method: str, path: str) -> None:
    for depth in (MAX_NESTING + 1, 300, 1_400):
        response = send(world, method, path, json.dumps({"inputs": nested(depth)}))
        assert response.status_code == 422, (depth, response.content)
        assert "inputs[0][0]" in response.content.decode()
        assert f"deeper than {MAX_NESTING} levels" in response.content.decode()
    too_deep_to_parse = "[" * 100_000 + "]" * 100_000
    assert send(world, method, path, too_deep_to_parse).status_code in (400, 422)


@pytest.mark.parametrize("text", ["nul\x00here", "bell\x07", "escape\x1b[31m"])
def test_control_characters_in_a_json_body_answer_422(world: World, text: str) -> None:
    response = send(world, "POST", "/api/runs", json.dumps({"packet": {"goal": text}}))
    assert response.status_code == 422
    assert response.json()["issues"][0]["field"] == "body.packet.goal"
    assert "control character" in response.json()["detail"]


def test_a_delegation_with_a_lone_surrogate_is_refused_and_nothing_is_stored(world: World) -> None:
    before = Delegation.objects.count()
    packet = {**scripts.packet(), "goal": BAD}
    assert send(world, "POST", "/api/delegations", json.dumps({"name": "bad", "packet": packet})).status_code == 422
    assert send(world, "POST", "/api/delegations",
                json.dumps({"name": "bad \ud800", "packet": scripts.packet()})).status_code == 422
    assert Delegation.objects.count() == before


def test_tabs_newlines_and_any_language_pass(world: World) -> None:
    packet = {**scripts.packet(), "goal": "Compare\tthree caching options:\r\n— für 日本 😀"}
    response = send(world, "POST", "/api/delegations", json.dumps({"name": "fine", "packet": packet}))
    assert response.status_code == 201


def test_a_form_field_with_a_control_character_answers_422_naming_it(world: World) -> None:
    client = Client()
    client.force_login(world.users["owner"])
    fields = {"action": "save", "name": "bad\x01name", "goal": "x"}
    for response in (client.post("/delegations/new/", fields),   # multipart, as the test client sends
                     client.post("/delegations/new/", urlencode(fields), content_type=FORM)):
        assert response.status_code == 422
        assert "'name'" in response.content.decode() and "U+0001" in response.content.decode()
    assert client.get("/runs/", {"q": "\x00"}).status_code == 422
    api_form = client.post(f"/api/runs/{world.run.pk}/messages", urlencode({"text": "hi\x00"}), content_type=FORM)
    assert api_form.status_code == 422 and api_form.json()["issues"][0]["field"] == "text"


def test_json_typed_into_a_form_is_held_to_the_limits(world: World) -> None:
    client = Client()
    client.force_login(world.users["owner"])
    response = client.post("/runs/new/", {"packet": json.dumps({"goal": BAD}), "adapter": "scripted"})
    assert response.status_code == 422   # the form, shown again with what is wrong
    assert "lone surrogate" in response.content.decode()
    assert not Run.objects.filter(goal__startswith="caching").exists()


@pytest.mark.django_db(transaction=True)
async def test_a_websocket_frame_past_the_limits_gets_an_error_frame_naming_the_field(world: World) -> None:
    communicator, _, _ = await connect(world.users["owner"], f"/ws/runs/{world.run.pk}/")
    await frames_until_synced(communicator)
    for frame, field in (('{"type": "ping", "note": "\\ud800"}', "frame.note"),
                         (json.dumps({"type": "ping", "x": nested(MAX_NESTING + 5)}), "frame.x")):
        await communicator.send_to(text_data=frame)
        reply = json.loads(await communicator.receive_from(timeout=5))
        assert reply["type"] == "error" and field in reply["data"]["message"]
    await communicator.send_json_to({"type": "ping"})
    assert json.loads(await communicator.receive_from(timeout=5)) == {"type": "pong"}
    await communicator.disconnect()


# --- text stored before the limits -----------------------------------------------------

@pytest.fixture
def stored_bad(world: World) -> tuple[Delegation, Run]:
    """A delegation and a run holding a lone surrogate, as the API stored them before."""
    owner = world.users["owner"]
    delegation = Delegation.objects.create(name="stored before", owner=owner,
                                           packet={**scripts.packet(), "goal": BAD,
                                                   "context": {"note": BAD}})
    run = make_run(owner, state="SUCCEEDED", packet={**scripts.packet(), "goal": BAD},
                   result={"status": "SUCCESS", "output_payload": {"summary": BAD}})
    RunEvent.objects.create(run=run, seq=1, type="text", data={"delta": BAD})
    return delegation, run


def test_every_page_that_shows_stored_bad_text_draws_it_replaced(world: World, stored_bad: Any) -> None:
    delegation, run = stored_bad
    owner, admin = Client(raise_request_exception=False), Client(raise_request_exception=False)
    owner.force_login(world.users["owner"])
    admin.force_login(world.users["superuser"])
    # (client, page, whether it shows the text itself: lists show names, JSON escapes it)
    pages = [(owner, "/delegations/", False), (owner, f"/delegations/{delegation.pk}/", True),
             (owner, f"/delegations/{delegation.pk}/tree/", True), (owner, "/runs/", False),
             (owner, f"/runs/{run.pk}/", True), (owner, f"/runs/{run.pk}/replay/", False),
             (owner, "/", False),
             (admin, f"/admin/delegations/delegation/{delegation.pk}/change/", True),
             (admin, "/admin/delegations/delegation/", False),
             (admin, f"/admin/delegations/run/{run.pk}/change/", True),
             (admin, f"/admin/delegations/runevent/?run__id__exact={run.pk}", False)]
    for client, path, shows_it in pages:
        response = client.get(path)
        assert response.status_code == 200, path
        assert not shows_it or "caching \ufffd study" in response.content.decode(), path
    api_view = owner.get(f"/api/delegations/{delegation.pk}")
    assert api_view.status_code == 200 and api_view.json()["packet"]["goal"] == BAD   # JSON escapes it


def test_starting_a_run_from_stored_bad_text_is_refused_in_words(world: World, stored_bad: Any) -> None:
    delegation, _ = stored_bad
    owner = Client(raise_request_exception=False)
    owner.force_login(world.users["owner"])
    runs_before = Run.objects.count()
    from_the_tree = owner.post(f"/delegations/{delegation.pk}/tree/run/", {"adapter": "scripted"})
    assert from_the_tree.status_code < 500
    from_the_api = owner.post(f"/api/delegations/{delegation.pk}/runs", {"adapter": {"name": "scripted"}},
                              content_type="application/json")
    assert from_the_api.status_code == 422
    assert "lone surrogate" in from_the_api.json()["detail"]
    assert Run.objects.count() == runs_before


@pytest.mark.django_db(transaction=True)
async def test_the_live_socket_sends_stored_bad_text_replaced(world: World, stored_bad: Any) -> None:
    _, run = stored_bad
    communicator, connected, _ = await connect(world.users["owner"], f"/ws/runs/{run.pk}/")
    assert connected
    await communicator.send_input({"type": "websocket.receive", "text": '{"type": "ping"}'})
    texts = []
    while (text := (await communicator.receive_output(timeout=5)).get("text") or "") != '{"type": "pong"}':
        texts.append(text)
    assert any("caching \ufffd study" in text for text in texts)
    for text in texts:
        text.encode("utf-8")   # what the server's socket does with each frame
    await communicator.disconnect()


def test_json_nested_past_what_the_parser_reads_is_refused_as_text_that_does_not_read() -> None:
    # every reader answers "not valid JSON" in its own words; Python's parser raises RecursionError
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ValueError, match="nests arrays or objects too deeply to read"):
        text_limits.parse(deep)
    with pytest.raises(ValueError, match="too deeply"):
        text_limits.loads(deep, "body")
    assert text_limits.parse("[[1]]") == [[1]]


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_in_a_body_are_refused_not_stored(constant: str) -> None:
    # Python reads them; SQLite's JSON columns refuse them, and the save was a 500
    with pytest.raises(ValueError, match="is not a JSON number"):
        text_limits.loads('{"adapter": {"config": {"t": ' + constant + '}}}', "body")
