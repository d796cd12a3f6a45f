"""/api/delegations: lint, list, create, read, save, delete, versions, diff, runs."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from delegations.composer.services import delegation_create
from delegations.models import Delegation, Run
from tests.conftest import bearer
from tests.delegations import scripts

pytestmark = [pytest.mark.django_db(transaction=True)]


def send(client: Client, method: str, path: str, headers: dict[str, str], body: Any = None) -> Any:
    return getattr(client, method)(f"/api/delegations{path}", body, content_type="application/json",
                                   headers=headers)


def create(client: Client, headers: dict[str, str], **body: Any) -> Any:
    return send(client, "post", "", headers, {"name": "caching study", "packet": scripts.packet(), **body})


# -- lint ----------------------------------------------------------------------------------------

def test_lint_answers_200_with_the_report_even_when_it_holds_errors(
        client: Client, composer_api: dict[str, str]) -> None:
    response = send(client, "post", "/lint", composer_api, scripts.packet(depth=9, max_depth=3))
    assert response.status_code == 200
    report = response.json()
    assert report["errors"] > 0 and not report["runnable"]
    assert any(f["severity"] == "error" for f in report["findings"]) and report["packet"]["depth"] == 9


def test_lint_reports_a_packet_that_does_not_parse_as_problems(
        client: Client, composer_api: dict[str, str]) -> None:
    response = send(client, "post", "/lint", composer_api, {"goal": 5})
    assert response.status_code == 200
    assert response.json()["packet"] is None and response.json()["problems"][0]["field"] == "goal"


def test_lint_of_a_clean_packet_is_runnable(client: Client, composer_api: dict[str, str]) -> None:
    report = send(client, "post", "/lint", composer_api, scripts.packet()).json()
    assert report["runnable"] and report["errors"] == 0 and report["review_depth"]


def test_lint_compares_a_wrapped_child_with_its_parent(client: Client, composer_api: dict[str, str]) -> None:
    parent = scripts.packet(budget={"max_model_calls": 5})
    child = scripts.packet(budget={"max_model_calls": 50}, depth=1)
    alone = send(client, "post", "/lint", composer_api, {"packet": child}).json()
    nested = send(client, "post", "/lint", composer_api, {"packet": child, "parent": parent}).json()
    assert nested["errors"] > alone["errors"]


@pytest.mark.parametrize(("body", "content_type"), [
    ("{oops", "application/json"), ("[1, 2]", "application/json"), ('"text"', "application/json"),
    ("", "application/json"), ("--x\r\nbroken", "multipart/form-data; boundary=x"),
])
def test_lint_of_a_body_that_is_not_a_json_object_is_422(client: Client, composer_api: dict[str, str],
                                                         body: str, content_type: str) -> None:
    response = client.post("/api/delegations/lint", body, content_type=content_type, headers=composer_api)
    assert response.status_code == 422 and response.json()["detail"]


# -- create, read, list --------------------------------------------------------------------------

def test_a_composer_saves_a_delegation_and_reads_it_back(client: Client, composer_api: dict[str, str]) -> None:
    response = create(client, composer_api, template=True)
    assert response.status_code == 201
    created = response.json()
    assert created["version"] == 1 and created["owner"] == "carol" and created["template"]
    detail = send(client, "get", f"/{created['id']}", composer_api).json()
    assert detail["packet"] == scripts.packet() and detail["children"] == []


def test_a_child_is_listed_under_its_parent(client: Client, composer_api: dict[str, str]) -> None:
    root = create(client, composer_api).json()
    child = create(client, composer_api, name="child", parent=root["id"]).json()
    assert child["parent"] == root["id"] and child["position"] == 0
    detail = send(client, "get", f"/{root['id']}", composer_api).json()
    assert [c["id"] for c in detail["children"]] == [child["id"]] and detail["children_count"] == 1


@pytest.mark.parametrize(("body", "status"), [
    ({"name": "", "packet": scripts.packet()}, 422),
    ({"name": "   ", "packet": scripts.packet()}, 422),
    ({"name": "x", "packet": {"goal": 5}}, 422),
    ({"name": "x", "packet": ["a"]}, 422),
    ({"packet": scripts.packet()}, 422),
    ({"name": "x", "packet": scripts.packet(), "parent": 999}, 422),   # read, but names nothing
    ({"name": "x", "packet": scripts.packet(), "parent": "one"}, 422),
])
def test_a_bad_delegation_is_refused_not_saved(client: Client, composer_api: dict[str, str],
                                               body: dict[str, Any], status: int) -> None:
    response = send(client, "post", "", composer_api, body)
    assert response.status_code == status and response.json()["detail"]
    assert not Delegation.objects.exists()


@pytest.mark.parametrize(("body", "content_type"), [
    ("{oops", "application/json"), ("--x\r\nbroken", "multipart/form-data; boundary=x"), ("[]", "application/json"),
])
def test_a_malformed_body_is_a_client_error_not_500(client: Client, composer_api: dict[str, str],
                                                    body: str, content_type: str) -> None:
    response = client.post("/api/delegations", body, content_type=content_type, headers=composer_api)
    assert response.status_code in (400, 415, 422) and response.json()["detail"]


def test_saving_needs_the_composer_role(client: Client, outsider_api: dict[str, str]) -> None:
    assert create(client, outsider_api).status_code == 403


def test_unauthenticated_is_401(client: Client) -> None:
    assert client.get("/api/delegations").status_code == 401


def test_the_list_filters_and_pages(client: Client, composer: Any, composer_api: dict[str, str],
                                    admin_user: Any) -> None:
    root = delegation_create(owner=composer, name="Caching root", packet=scripts.packet())
    for number in range(3):
        delegation_create(owner=composer, name=f"child {number}", packet=scripts.packet(), parent=root)
    delegation_create(owner=composer, name="A template", packet=scripts.packet(), template=True)
    delegation_create(owner=admin_user, name="root's caching", packet=scripts.packet())

    def names(query: str, headers: dict[str, str] = composer_api) -> list[str]:
        return [d["name"] for d in client.get(f"/api/delegations?{query}", headers=headers).json()["results"]]

    assert sorted(names("q=caching")) == ["Caching root"]
    assert names("template=true") == ["A template"]
    assert sorted(names("parent=root")) == ["A template", "Caching root"]
    assert names(f"parent={root.pk}") == ["child 0", "child 1", "child 2"]
    assert "root's caching" not in names("owner=all")
    assert sorted(names("q=caching&owner=all", bearer(admin_user))) == ["Caching root", "root's caching"]
    assert names("q=caching", bearer(admin_user)) == ["root's caching"]
    page = client.get(f"/api/delegations?parent={root.pk}&page=2&page_size=2", headers=composer_api).json()
    assert (page["count"], page["pages"], [d["name"] for d in page["results"]]) == (3, 2, ["child 2"])
    assert client.get("/api/delegations?parent=nope", headers=composer_api).status_code == 422
    assert client.get("/api/delegations?owner=theirs", headers=composer_api).status_code == 422


# -- saving on top of a version ------------------------------------------------------------------

def test_a_save_bumps_the_version(client: Client, composer_api: dict[str, str]) -> None:
    created = create(client, composer_api).json()
    response = send(client, "put", f"/{created['id']}", composer_api,
                    {"base_version": 1, "name": "renamed", "packet": scripts.packet(timeout_s=90)})
    assert response.status_code == 200
    saved = response.json()
    assert (saved["version"], saved["name"], saved["packet"]["timeout_s"]) == (2, "renamed", 90)
    assert saved["template"] is False and saved["updated_by"] == "carol"


def test_a_stale_save_is_409_with_who_saved_and_a_diff(client: Client, composer: Any,
                                                       composer_api: dict[str, str], admin_user: Any) -> None:
    created = create(client, composer_api).json()
    path = f"/{created['id']}"
    assert send(client, "put", path, bearer(admin_user),
                {"base_version": 1, "packet": scripts.packet(goal="Their goal")}).status_code == 200
    response = send(client, "put", path, composer_api, {"base_version": 1, "packet": scripts.packet(goal="Mine")})
    assert response.status_code == 409
    body = response.json()
    assert set(body) == {"detail", "current_version", "saved_by", "saved_at", "diff"}
    assert body["current_version"] == 2 and body["saved_by"] == "root" and "root" in body["detail"]
    assert body["diff"].startswith("--- version 1\n+++ version 2\n") and '+  "goal": "Their goal"' in body["diff"]
    assert Delegation.objects.get(pk=created["id"]).packet["goal"] == "Their goal"


def test_a_save_moves_a_delegation_in_the_tree(client: Client, composer_api: dict[str, str]) -> None:
    one, two = create(client, composer_api).json(), create(client, composer_api, name="two").json()
    moved = send(client, "put", f"/{two['id']}", composer_api, {"base_version": 1, "parent": one["id"]}).json()
    assert moved["parent"] == one["id"]
    cycle = send(client, "put", f"/{one['id']}", composer_api, {"base_version": 1, "parent": two["id"]})
    assert cycle.status_code == 400 and cycle.json()["field"] == "parent"
    top = send(client, "put", f"/{two['id']}", composer_api, {"base_version": 2, "parent": None}).json()
    assert top["parent"] is None and top["version"] == 3


@pytest.mark.parametrize("body", [{}, {"base_version": "one"}, {"base_version": 1, "packet": "text"}])
def test_a_save_without_a_usable_base_version_or_packet_is_422(client: Client, composer_api: dict[str, str],
                                                                body: dict[str, Any]) -> None:
    created = create(client, composer_api).json()
    assert send(client, "put", f"/{created['id']}", composer_api, body).status_code == 422


def test_another_owners_delegation_is_404_on_every_route(client: Client, composer_api: dict[str, str],
                                                         other_composer: Any) -> None:
    theirs = delegation_create(owner=other_composer, name="theirs", packet=scripts.packet())
    path = f"/{theirs.pk}"
    assert send(client, "get", path, composer_api).status_code == 404
    assert send(client, "put", path, composer_api, {"base_version": 1, "name": "mine"}).status_code == 404
    assert send(client, "delete", path, composer_api).status_code == 404
    assert send(client, "get", f"{path}/versions", composer_api).status_code == 404
    assert send(client, "get", f"{path}/diff?a=1&b=1", composer_api).status_code == 404
    assert send(client, "post", f"{path}/runs", composer_api, {}).status_code == 404
    assert create(client, composer_api, parent=theirs.pk).status_code == 422   # as one that does not exist
    assert send(client, "get", "/999999", composer_api).status_code == 404
    assert Delegation.objects.get(pk=theirs.pk).name == "theirs"


def test_deleting_removes_the_subtree(client: Client, composer_api: dict[str, str]) -> None:
    root = create(client, composer_api).json()
    create(client, composer_api, name="child", parent=root["id"])
    other = create(client, composer_api, name="other").json()
    assert send(client, "delete", f"/{root['id']}", composer_api).status_code == 204
    assert list(Delegation.objects.values_list("pk", flat=True)) == [other["id"]]


def test_deleting_a_version_someone_saved_over_is_409_and_deletes_nothing(
        client: Client, composer_api: dict[str, str], admin_user: Any) -> None:
    created = create(client, composer_api).json()
    path = f"/{created['id']}"
    send(client, "put", path, bearer(admin_user), {"base_version": 1, "packet": scripts.packet(goal="Theirs")})
    response = send(client, "delete", f"{path}?base_version=1", composer_api)
    assert response.status_code == 409
    assert response.json()["saved_by"] == "root" and response.json()["current_version"] == 2
    assert Delegation.objects.filter(pk=created["id"]).exists()
    assert send(client, "delete", f"{path}?base_version=2", composer_api).status_code == 204
    assert not Delegation.objects.filter(pk=created["id"]).exists()


# -- history -------------------------------------------------------------------------------------

def test_versions_are_listed_and_diffed(client: Client, composer_api: dict[str, str]) -> None:
    created = create(client, composer_api).json()
    path = f"/{created['id']}"
    send(client, "put", path, composer_api, {"base_version": 1, "packet": scripts.packet(timeout_s=90)})
    listing = send(client, "get", f"{path}/versions", composer_api).json()
    assert listing["current_version"] == 2
    assert [(v["number"], v["saved_by"], v["packet"]["timeout_s"]) for v in listing["versions"]] == [
        (1, "carol", 60), (2, "carol", 90)]
    diff = send(client, "get", f"{path}/diff?a=1&b=2", composer_api).json()
    assert diff["a"] == 1 and '+  "timeout_s": 90' in diff["diff"]
    assert send(client, "get", f"{path}/diff?a=1&b=7", composer_api).status_code == 404
    assert send(client, "get", f"{path}/diff?a=x&b=2", composer_api).status_code == 422


# -- running -------------------------------------------------------------------------------------

def test_running_a_delegation_answers_201_with_the_run(client: Client, composer_api: dict[str, str],
                                                       immediate_tasks: None) -> None:
    created = create(client, composer_api).json()
    response = send(client, "post", f"/{created['id']}/runs", composer_api,
                    {"adapter": {"name": "scripted", "config": scripts.leaf()}})
    assert response.status_code == 201
    run = response.json()
    assert run["state"] == "COMPLETE" and run["websocket"] == f"/ws/runs/{run['id']}/"
    assert run == client.get(f"/api/runs/{run['id']}", headers=composer_api).json()
    assert Run.objects.get(pk=run["id"]).delegation_id == created["id"]


def test_running_with_an_unknown_adapter_is_422(client: Client, composer_api: dict[str, str]) -> None:
    created = create(client, composer_api).json()
    response = send(client, "post", f"/{created['id']}/runs", composer_api, {"adapter": {"name": "gpt-banana"}})
    assert response.status_code == 422 and "gpt-banana" in response.json()["detail"]
    assert not Run.objects.exists()


def test_the_routes_are_documented(client: Client) -> None:
    schema = client.get("/api/openapi.json").json()
    paths = {path for path in schema["paths"] if path.startswith("/api/delegations")}
    assert paths == {"/api/delegations", "/api/delegations/lint", "/api/delegations/{delegation_id}",
                     "/api/delegations/{delegation_id}/versions", "/api/delegations/{delegation_id}/diff",
                     "/api/delegations/{delegation_id}/runs"}
    assert schema["paths"]["/api/delegations/{delegation_id}"]["put"]["responses"]["409"]
