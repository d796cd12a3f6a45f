"""The published schema tells the truth: its names are unique, a request it says is wrong
is refused (no lax conversion), and filters list the values they take."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from delegations.composer.services import delegation_create
from delegations.models import Delegation, Run
from handoff_site.api import api
from tests.delegations import scripts

pytestmark = pytest.mark.django_db

SCHEMA = api.get_openapi_schema(path_prefix="/api/")
COMPONENTS = SCHEMA["components"]["schemas"]


def response_schema(path: str, method: str = "get") -> dict[str, Any]:
    ref = SCHEMA["paths"][path][method]["responses"][200]["content"]["application/json"]["schema"]["$ref"]
    return resolve(ref)


def resolve(ref: str) -> dict[str, Any]:
    return dict(COMPONENTS[ref.rsplit("/", 1)[1]])


def test_a_skill_and_a_delegation_publish_their_versions_under_names_of_their_own() -> None:
    skill_versions = response_schema("/api/skills/{name}")["properties"]["versions"]["items"]["$ref"]
    delegation_versions = response_schema("/api/delegations/{delegation_id}/versions")["properties"][
        "versions"]["items"]["$ref"]
    assert skill_versions != delegation_versions
    assert "is_latest" in COMPONENTS[skill_versions.rsplit("/", 1)[1]]["properties"]
    assert "packet" in COMPONENTS[delegation_versions.rsplit("/", 1)[1]]["properties"]


def test_a_json_array_is_not_an_object_body(client: Client, composer: Any, composer_api: dict[str, str]) -> None:
    delegation = delegation_create(owner=composer, name="caching study", packet=scripts.packet())
    runs_before = Run.objects.count()
    for body in ([], [{"adapter": {"name": "scripted"}}], '"text"', 7, "null"):
        response = client.post(f"/api/delegations/{delegation.pk}/runs", body, content_type="application/json",
                               headers=composer_api)
        assert response.status_code == 422, body
        assert "must be a JSON object" in response.json()["detail"]
    assert Run.objects.count() == runs_before


@pytest.mark.parametrize(("field", "value"), [("position", False), ("position", "1"), ("template", 1),
                                              ("name", 5), ("parent", True)])
def test_a_value_of_another_type_is_refused_not_converted(
        client: Client, composer_api: dict[str, str], field: str, value: Any) -> None:
    body = {"name": "caching study", "packet": scripts.packet(), field: value}
    response = client.post("/api/delegations", body, content_type="application/json", headers=composer_api)
    assert response.status_code == 422
    assert field in str(response.json()["detail"])
    assert not Delegation.objects.exists()


def test_approval_filters_list_the_values_they_take(client: Client, approver_api: dict[str, str]) -> None:
    parameters = {parameter["name"]: parameter for parameter in SCHEMA["paths"]["/api/approvals"]["get"]["parameters"]}

    def values(name: str) -> list[str]:
        schema = parameters[name]["schema"]["anyOf"][0]
        return list(resolve(schema["$ref"])["enum"] if "$ref" in schema else schema["enum"])
    assert values("status") == ["pending", "approved", "rejected", "answered", "edited", "retried",
                                "expired", "cancelled"]
    assert "budget" in values("kind") and values("risk") == ["low", "medium", "high"]
    for query in ("status=pending", "status=cancelled&kind=budget&risk=high", ""):
        assert client.get(f"/api/approvals?{query}", headers=approver_api).status_code == 200, query
    refused = client.get("/api/approvals?status=waiting", headers=approver_api)
    assert refused.status_code == 422 and "status" in str(refused.json()["detail"])
