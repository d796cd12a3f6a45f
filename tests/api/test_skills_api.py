"""/api/skills: search, read, import and export skills (DESIGN §3.3)."""

from __future__ import annotations

import io
import json
import os
import zipfile

import pytest

from skills.models import Skill
from tests.skills.factories import HANDOFF_MANIFEST, INSTRUCTIONS, add_skill, bundle, manifest

pytestmark = pytest.mark.django_db


def post_json(client, headers, body: object, **extra):
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post("/api/skills", data=data, content_type="application/json",
                       headers=headers, **extra)


# -- reading --------------------------------------------------------------------------------

def test_the_list_is_paginated_with_a_total(client, outsider_api):
    for index in range(25):
        add_skill(f"skill-{index:02d}")
    body = client.get("/api/skills", {"page": 2, "page_size": 10}, headers=outsider_api).json()
    assert body["total"] == 25 and body["pages"] == 3 and body["page"] == 2
    assert [item["name"] for item in body["items"]] == [f"skill-{i}" for i in range(10, 20)]
    assert body["items"][0]["ref"] == "skill-10@1.0.0"
    assert body["items"][0]["html_url"] == "/skills/skill-10/1.0.0/"


def test_a_page_past_the_end_is_empty_not_an_error(client, outsider_api):
    add_skill()
    body = client.get("/api/skills", {"page": 9}, headers=outsider_api).json()
    assert body["items"] == [] and body["total"] == 1


def test_the_list_searches_and_filters_like_the_catalog(client, outsider_api):
    add_skill("fetcher", capabilities=["network_outbound"], requires_approval=True,
              description="gets pages", tags=["web"])
    add_skill("reader", capabilities=["fs_read"], subagent_type="reviewer")

    def names(**params: object) -> list[str]:
        response = client.get("/api/skills", params, headers=outsider_api)
        assert response.status_code == 200, response.json()
        return [item["name"] for item in response.json()["items"]]

    assert names(q="pages") == ["fetcher"]
    assert names(capability="fs_read") == ["reader"]
    assert names(subagent_type="reviewer") == ["reader"]
    assert names(requires_approval="true") == ["fetcher"]
    assert names(requires_approval="false") == ["reader"]
    assert names(tag="web") == ["fetcher"]


def test_bad_list_parameters_get_422(client, outsider_api):
    for params in ({"subagent_type": "wizard"}, {"page": 0}, {"page_size": 1000},
                   {"requires_approval": "perhaps"}, {"page": "99999999999999999999999"}):
        response = client.get("/api/skills", params, headers=outsider_api)
        assert response.status_code == 422 and "detail" in response.json()


def test_a_skill_by_name_is_its_latest_version_with_every_version(client, outsider_api):
    add_skill("ranker", "1.9.0")
    add_skill("ranker", "1.10.0")
    body = client.get("/api/skills/ranker", headers=outsider_api).json()
    assert body["version"] == "1.10.0" and body["is_latest"] is True
    assert [v["version"] for v in body["versions"]] == ["1.10.0", "1.9.0"]
    assert body["versions"][1]["api_url"] == "/api/skills/ranker/1.9.0"
    assert body["input_schema"]["properties"]["query"] == {"type": "string"}
    assert body["manifest_url"] == "/api/skills/ranker/1.10.0/manifest"


def test_one_version_and_its_flags(client, outsider_api):
    add_skill("fetcher", "1.0.0", capabilities=["network_outbound", "teleport"],
              requires_approval=True)
    body = client.get("/api/skills/fetcher/1.0.0", headers=outsider_api).json()
    assert body["ref"] == "fetcher@1.0.0"
    assert body["unknown_capabilities"] == ["teleport"]
    assert body["approval_capabilities"] == ["network_outbound"]
    assert body["entry_kind"] == "instructions"


def test_unknown_skills_and_versions_get_a_json_404(client, outsider_api):
    add_skill("ranker", "1.0.0")
    for path in ("/api/skills/nobody", "/api/skills/ranker/2.0.0",
                 "/api/skills/ranker/2.0.0/manifest"):
        response = client.get(path, headers=outsider_api)
        assert response.status_code == 404 and "No skill" in response.json()["detail"]


def test_the_manifest_export_is_the_normalized_manifest(client, composer_api, outsider_api):
    assert post_json(client, composer_api, HANDOFF_MANIFEST).status_code == 201
    response = client.get("/api/skills/SourceCodeAalyzer/1.2.0/manifest", headers=outsider_api)
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    exported = json.loads(b"".join(response.streaming_content))
    assert exported["input_schema"] == {
        "type": "object", "properties": {"repo_path": {"type": "string"},
                                         "strict_mode": {"type": "boolean"}},
        "required": ["repo_path", "strict_mode"]}
    assert exported["capabilities"] == HANDOFF_MANIFEST["capabilities"]


def test_the_bundle_export_is_a_zip(client, composer_api, outsider_api):
    client.post("/api/skills", data=bundle(), content_type="application/zip", headers=composer_api)
    response = client.get("/api/skills/price-check/1.0.0/bundle", headers=outsider_api)
    assert response["Content-Type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content))) as archive:
        assert archive.read("instructions.md").decode() == INSTRUCTIONS


def test_reading_needs_authentication(client):
    add_skill()
    for path in ("/api/skills", "/api/skills/price-check", "/api/skills/price-check/1.0.0/manifest"):
        assert client.get(path).status_code == 401


def test_a_browser_session_can_read(outsider_client):
    add_skill()
    assert outsider_client.get("/api/skills").json()["total"] == 1


# -- importing ------------------------------------------------------------------------------

def test_posting_a_manifest_creates_the_skill(client, composer, composer_api):
    response = post_json(client, composer_api, manifest())
    assert response.status_code == 201
    body = response.json()
    assert body["created"] is True and body["skill"]["ref"] == "price-check@1.0.0"
    assert body["skill"]["created_by"] == composer.username and body["skill"]["source"] == "api"


def test_posting_the_same_manifest_again_is_a_no_op_200(client, composer_api):
    post_json(client, composer_api, manifest())
    response = post_json(client, composer_api, json.dumps(manifest(), indent=8))
    assert response.status_code == 200 and response.json()["created"] is False
    assert Skill.objects.count() == 1


def test_the_same_version_with_other_content_is_a_409_suggesting_a_bump(client, composer_api):
    post_json(client, composer_api, manifest())
    response = post_json(client, composer_api, manifest(description="changed"))
    assert response.status_code == 409
    detail = response.json()["detail"]
    assert "price-check@1.0.0 is already in the registry with different content" in detail
    assert '"version": "1.0.1"' in detail


def test_an_invalid_manifest_is_a_422_listing_every_issue(client, composer_api):
    response = post_json(client, composer_api, manifest(
        version="1.0", capabilities=["financial_tx"], input_schema={"n": "float64"}))
    assert response.status_code == 422
    body = response.json()
    assert body["code"] == "ERR_INVALID_MANIFEST" and "detail" in body
    fields = [issue["field"] for issue in body["issues"]]
    assert fields == ["version", "input_schema.n", "capabilities[0]"]
    assert not Skill.objects.exists()


@pytest.mark.parametrize(("body", "field", "words"), [
    ('{"skill_name": ', "manifest.json", "invalid JSON"),
    ("[1, 2]", "manifest", "expected a JSON object"),
    (json.dumps(manifest(skill_name="has space")), "skill_name", "no spaces"),
    (json.dumps(manifest(output_schema={"type": "array", "minItems": -1})),
     "output_schema.minItems", "invalid JSON Schema"),
    (json.dumps(manifest(tags="finance")), "tags", "expected a list"),
    (b"\xff\xfe\x00garbage", "manifest.json", "not UTF-8"),
])
def test_each_kind_of_bad_manifest_gets_a_clear_422(client, composer_api, body, field, words):
    response = post_json(client, composer_api, body)
    assert response.status_code == 422
    issues = response.json()["issues"]
    assert any(issue["field"] == field and words in issue["message"] for issue in issues), issues


def test_an_empty_body_is_explained(client, composer_api):
    response = post_json(client, composer_api, "")
    assert response.status_code == 422 and "The request body is empty" in response.json()["detail"]


def test_unknown_capabilities_are_accepted_with_warnings(client, composer_api):
    response = post_json(client, composer_api, manifest(capabilities=["teleport"]))
    assert response.status_code == 201
    assert any("'teleport' is not one Handoff knows" in w for w in response.json()["warnings"])
    assert response.json()["skill"]["unknown_capabilities"] == ["teleport"]


def test_a_bundle_zip_can_be_posted_as_the_body(client, composer_api):
    response = client.post("/api/skills", data=bundle(), content_type="application/zip",
                           headers=composer_api)
    assert response.status_code == 201
    assert response.json()["skill"]["instructions"] == INSTRUCTIONS


def test_a_bundle_can_be_uploaded_as_a_multipart_file(client, composer_api):
    upload = io.BytesIO(bundle())
    upload.name = "price.zip"
    response = client.post("/api/skills", {"file": upload}, headers=composer_api)
    assert response.status_code == 201 and response.json()["skill"]["name"] == "price-check"


def test_a_zip_with_path_traversal_is_a_422(client, composer_api):
    response = client.post("/api/skills", data=bundle(extra={"../../x.md": "boom"}),
                           content_type="application/zip", headers=composer_api)
    assert response.status_code == 422
    assert "would leave the bundle" in json.dumps(response.json()["issues"])
    assert not Skill.objects.exists()


@pytest.mark.parametrize(("name", "reason"), [(".git/config", "version-control folders"),
                                            ("notes\x1b[31m.md", "control character U+001B")])
def test_a_zip_with_an_unsafe_file_name_is_a_422_naming_it(client, composer_api, name, reason):
    response = client.post("/api/skills", data=bundle(extra={name: "x"}),
                           content_type="application/zip", headers=composer_api)
    assert response.status_code == 422
    [issue] = response.json()["issues"]
    assert issue["message"].startswith(f"entry {name!r}: ") and reason in issue["message"]
    assert "a relative path such as docs/notes.md" in issue["message"]
    assert not Skill.objects.exists()


def test_a_zip_bomb_is_a_422(client, composer_api):
    response = client.post("/api/skills", data=bundle(extra={"bomb.txt": b"\0" * 3_000_000}),
                           content_type="application/zip", headers=composer_api)
    assert response.status_code == 422
    assert "zip bomb" in json.dumps(response.json()["issues"])


def test_a_body_over_the_upload_limit_is_a_413(client, composer_api, settings):
    settings.HANDOFF_SKILL_UPLOAD_LIMIT_BYTES = 4096
    response = client.post("/api/skills", data=bundle(extra={"noise.bin": os.urandom(8000)}),
                           content_type="application/zip", headers=composer_api)
    assert response.status_code == 413
    assert "skills are at most 4 KB" in response.json()["detail"]


def test_importing_needs_the_composer_role(client, outsider_api):
    response = post_json(client, outsider_api, manifest())
    assert response.status_code == 403
    assert "Only composers can import skills" in response.json()["detail"]
    assert not Skill.objects.exists()


def test_importing_needs_authentication(client):
    assert post_json(client, {}, manifest()).status_code == 401


def test_a_browser_session_must_send_the_csrf_token(composer):
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    browser.force_login(composer)
    response = browser.post("/api/skills", data=json.dumps(manifest()),
                            content_type="application/json")
    assert response.status_code in (401, 403)
    assert not Skill.objects.exists()


def test_the_api_and_the_import_page_refuse_the_same_manifest_the_same_way(
        client, composer_api, composer_client):
    bad = manifest(version="x", capabilities=["file_delete"])
    api_issues = post_json(client, composer_api, bad).json()["issues"]
    page = composer_client.post("/skills/import/", {"manifest_text": json.dumps(bad)})
    html = page.content.decode()
    for issue in api_issues:
        assert f"<td>{issue['field']}</td>" in html
        assert issue["message"].replace("'", "&#x27;").replace('"', "&quot;") in html


def test_the_routes_are_in_the_openapi_schema(client):
    paths = client.get("/api/openapi.json").json()["paths"]
    for path in ("/api/skills", "/api/skills/{name}", "/api/skills/{name}/{version}",
                 "/api/skills/{name}/{version}/manifest", "/api/skills/{name}/{version}/bundle"):
        assert path in paths
    assert "application/zip" in paths["/api/skills"]["post"]["requestBody"]["content"]
