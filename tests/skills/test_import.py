"""Importing skills: the service every path shares, and the browser's import page."""

from __future__ import annotations

import html
import json
import os
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from delegations.protocol.errors import ProtocolError
from skills.models import Skill, SkillCapability, SkillFile, SkillTag
from skills.services import RegistryError, RegistryErrorCode, skill_import
from tests.skills.factories import (
    HANDOFF_MANIFEST,
    INSTRUCTIONS,
    add_skill,
    bundle,
    manifest,
    zip_bytes,
)

pytestmark = pytest.mark.django_db


def issues_of(source: object) -> list[tuple[str, str]]:
    with pytest.raises(ProtocolError) as caught:
        skill_import(source=source, origin="api")  # type: ignore[arg-type]
    return [(issue.field, issue.message) for issue in caught.value.issues]


def nothing_stored() -> bool:
    return not (Skill.objects.exists() or SkillFile.objects.exists()
                or SkillCapability.objects.exists() or SkillTag.objects.exists())


# -- the service ----------------------------------------------------------------------------

def test_it_imports_the_hand_off_protocols_example_manifest_verbatim(composer):
    result = skill_import(source=json.dumps(HANDOFF_MANIFEST), origin="upload", created_by=composer)
    skill = result.skill
    assert result.created and skill.ref == "SourceCodeAalyzer@1.2.0"
    assert skill.input_schema["required"] == ["repo_path", "strict_mode"]
    assert skill.capabilities == ["fs_read", "ast_parsing", "subprocess_exec"]
    assert skill.created_by == composer and skill.source == "upload" and skill.is_latest
    # analyze.py is a script: accepted, with a warning that Handoff does not run it
    assert any("analyze.py" in warning for warning in result.warnings)
    assert skill.raw_manifest == json.dumps(HANDOFF_MANIFEST)


def test_a_bundle_brings_its_instructions_and_other_files():
    result = skill_import(source=bundle(extra={"examples/request.json": '{"query": "TSLA"}'}),
                          origin="bundle")
    skill = result.skill
    assert skill.instructions == INSTRUCTIONS
    assert [(row.path, bytes(row.content)) for row in skill.files.all()] == [
        ("examples/request.json", b'{"query": "TSLA"}')]
    assert sorted(SkillCapability.objects.values_list("name", flat=True)) == ["search"]
    assert sorted(SkillTag.objects.values_list("name", flat=True)) == ["finance", "market-data"]


def test_importing_the_same_version_again_with_the_same_content_is_a_no_op():
    first = skill_import(source=manifest(), origin="api")
    # same content, other formatting and key order
    again = skill_import(source=json.dumps(dict(reversed(manifest().items())), indent=4),
                         origin="upload")
    assert first.created and not again.created
    assert again.skill.pk == first.skill.pk and again.skill.source == "api"
    assert Skill.objects.count() == 1


def test_an_exported_manifest_reimports_as_identical_to_its_bundle():
    skill = skill_import(source=bundle(), origin="bundle").skill
    again = skill_import(source=skill.export_manifest_json(), origin="api")
    assert not again.created


def test_the_same_version_with_other_content_is_refused_with_a_version_hint():
    add_skill("price-check", "1.0.0")
    add_skill("price-check", "1.3.0")
    with pytest.raises(RegistryError) as caught:
        skill_import(source=manifest(description="changed"), origin="api")
    assert caught.value.code is RegistryErrorCode.CONFLICT
    assert "price-check@1.0.0 is already in the registry" in caught.value.message
    assert '"version": "1.3.1"' in caught.value.message
    assert Skill.objects.get(version="1.0.0").description.startswith("Looks up")


def test_a_newer_version_with_other_content_is_accepted():
    add_skill("price-check", "1.0.0")
    result = skill_import(source=manifest(version="1.0.1", description="changed"), origin="api")
    assert result.created and Skill.objects.resolve("price-check").version == "1.0.1"


def test_nothing_is_half_imported_when_storing_fails_midway(monkeypatch):
    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(SkillTag.objects, "bulk_create", fail)
    with pytest.raises(RuntimeError):
        skill_import(source=bundle(extra={"notes.txt": "x"}), origin="bundle")
    assert nothing_stored()


# -- every bad input: a clear message, nothing stored -------------------------------------------

def test_invalid_json_says_where():
    problems = issues_of('{"skill_name": "x",, }')
    assert problems[0][0] == "manifest.json"
    assert "invalid JSON at line 1, column 20" in problems[0][1]
    assert nothing_stored()


def test_every_problem_is_reported_at_once_with_its_field_path():
    problems = dict(issues_of(manifest(
        skill_name=42, version="1.0", input_schema={"type": "strin"},
        output_schema={"price": "float64"}, capabilities="fs_read", requires_approval="yes",
        subagent_type="wizard", tags=["a", "a"])))
    assert "expected a string; got a number" in problems["skill_name"]
    assert "'1.0' is not a semantic version" in problems["version"]
    assert "unknown type 'strin'" in problems["input_schema.type"]
    assert "unknown type 'float64'" in problems["output_schema.price"]
    assert "expected a list of names" in problems["capabilities"]
    assert "expected true or false" in problems["requires_approval"]
    assert "expected one of coder, researcher" in problems["subagent_type"]
    assert "listed twice" in problems["tags[1]"]
    assert nothing_stored()


def test_missing_required_fields_are_named():
    problems = dict(issues_of({"skill_name": "x"}))
    assert set(problems) >= {"version", "entry_point", "input_schema", "output_schema",
                             "capabilities"}


@pytest.mark.parametrize("version", ["1", "1.2", "01.2.3", "1.2.3-", "v1.2.3", "1.2.3.4"])
def test_bad_semver_is_refused(version):
    problems = dict(issues_of(manifest(version=version)))
    assert "is not a semantic version" in problems["version"]


def test_an_invalid_json_schema_is_refused_with_its_path():
    problems = issues_of(manifest(input_schema={"type": "object",
                                                "properties": {"n": {"type": "integer",
                                                                     "minimum": "zero"}}}))
    assert problems[0][0] == "input_schema.properties.n.minimum"
    assert "invalid JSON Schema" in problems[0][1]


def test_an_approval_required_capability_needs_requires_approval():
    problems = issues_of(manifest(capabilities=["fs_read", "financial_tx"]))
    assert problems == [("capabilities[1]", "capability 'financial_tx' needs explicit approval: "
                         'set "requires_approval": true in the manifest (the hand-off protocol\'s approval rules)')]
    assert nothing_stored()


def test_the_approval_required_set_is_a_setting(settings):
    settings.HANDOFF_APPROVAL_REQUIRED_CAPABILITIES = ["fs_write"]
    assert dict(issues_of(manifest(capabilities=["fs_write"]))).keys() == {"capabilities[0]"}
    assert skill_import(source=manifest(capabilities=["financial_tx"]), origin="api").created


def test_unknown_capabilities_are_kept_with_a_warning():
    result = skill_import(source=manifest(capabilities=["search", "teleport"]), origin="api")
    assert result.skill.capabilities == ["search", "teleport"]
    assert result.skill.unknown_capabilities == ["teleport"]
    assert any("'teleport' is not one Handoff knows" in warning for warning in result.warnings)
    assert result.skill.warnings == result.warnings


def test_python_entry_points_need_the_allowlist(settings):
    problems = dict(issues_of(manifest(entry_point="python:acme.pricing:run")))
    assert "not in the python skill allowlist" in problems["entry_point"]
    settings.HANDOFF_PYTHON_SKILL_ALLOWLIST = ["acme"]
    assert skill_import(source=manifest(entry_point="python:acme.pricing:run"), origin="api").created


def test_a_bundle_without_its_instruction_file_is_refused():
    archive = zip_bytes({"manifest.json": json.dumps(manifest())})
    assert issues_of(archive) == [("entry_point", "instruction file 'instructions.md' is not in "
                                                  "the bundle")]


@pytest.mark.parametrize("name", ["../evil.md", "docs/../../evil.md", "/etc/passwd"])
def test_path_traversal_in_a_bundle_is_refused(name):
    problems = issues_of(bundle(extra={name: "x"}))
    assert any(name in message and ("'..'" in message or "absolute" in message)
               for _, message in problems)
    assert nothing_stored()


def test_a_zip_bomb_is_refused_before_it_is_extracted():
    bomb = bundle(extra={"padding.txt": b"\0" * (4 * 1024 * 1024)})
    problems = [message for _, message in issues_of(bomb)]
    assert any("zip bomb" in message or "per file" in message for message in problems)
    assert nothing_stored()


def test_too_many_files_are_refused():
    files = {f"docs/{index}.txt": "x" for index in range(201)}
    problems = [message for _, message in issues_of(bundle(extra=files))]
    assert any("a bundle holds at most 200" in message for message in problems)


def test_an_upload_over_the_size_limit_is_refused(settings):
    settings.HANDOFF_SKILL_UPLOAD_LIMIT_BYTES = 2048
    too_large = [json.dumps(manifest(description="y" * 5000)),
                 bundle(extra={"data.bin": os.urandom(5000)})]
    for source in too_large:
        with pytest.raises(RegistryError) as caught:
            skill_import(source=source, origin="upload")
        assert caught.value.code is RegistryErrorCode.TOO_LARGE
        assert "skills are at most 2 KB" in caught.value.message
    assert nothing_stored()


def test_a_corrupt_zip_is_refused():
    problems = issues_of(b"PK\x03\x04 this is not really a zip")
    assert problems[0][0] == "bundle" and "not a readable zip" in problems[0][1]


def test_values_the_registry_cannot_store_are_refused():
    problems = dict(issues_of(manifest(capabilities=["c" * 101])))
    assert problems == {"capabilities[0]": "at most 100 characters"}


# -- the import page ------------------------------------------------------------------------------

def test_pasting_a_manifest_imports_it_and_shows_the_skill(composer_client, composer):
    response = composer_client.post("/skills/import/", {"manifest_text": json.dumps(manifest())},
                                    follow=True)
    assert response.redirect_chain[-1][0] == "/skills/price-check/1.0.0/"
    assert "Imported price-check@1.0.0." in response.content.decode()
    skill = Skill.objects.get()
    assert skill.source == "upload" and skill.created_by == composer


def test_uploading_a_manifest_file_imports_it(composer_client):
    upload = SimpleUploadedFile("manifest.json", json.dumps(HANDOFF_MANIFEST).encode(),
                                content_type="application/json")
    response = composer_client.post("/skills/import/", {"manifest_file": upload}, follow=True)
    page = response.content.decode()
    assert "Imported SourceCodeAalyzer@1.2.0." in page
    assert "Warning: entry_point &#x27;analyze.py&#x27; is a script" in page


def test_uploading_a_bundle_imports_it_with_its_instructions(composer_client):
    upload = SimpleUploadedFile("price.zip", bundle(), content_type="application/zip")
    response = composer_client.post("/skills/import/", {"bundle_file": upload}, follow=True)
    assert response.status_code == 200
    skill = Skill.objects.get()
    assert skill.source == "bundle" and skill.instructions == INSTRUCTIONS
    assert "Find the current price and its currency." in response.content.decode()


def test_the_import_page_lists_every_problem_with_its_field(composer_client):
    bad = manifest(version="one", capabilities=["network_outbound"])
    response = composer_client.post("/skills/import/", {"manifest_text": json.dumps(bad)})
    page = response.content.decode()
    assert response.status_code == 200
    assert "2 problems" in page
    assert "<td>version</td>" in page and "<td>capabilities[0]</td>" in page
    assert "needs explicit approval" in page
    assert json.dumps(bad).replace('"', "&quot;") in page  # the paste is kept for fixing
    assert nothing_stored()


def test_a_bad_bundle_upload_is_explained(composer_client):
    upload = SimpleUploadedFile("evil.zip", bundle(extra={"../../etc/cron.d/x": "boom"}))
    page = composer_client.post("/skills/import/", {"bundle_file": upload}).content.decode()
    assert "&#x27;..&#x27; would leave the bundle" in page
    assert nothing_stored()


def test_a_bundle_holding_a_git_folder_is_refused_on_the_import_page(composer_client):
    upload = SimpleUploadedFile("repo.zip", bundle(extra={".git/hooks/post-checkout": "#!/bin/sh\nboom"}))
    page = html.unescape(composer_client.post("/skills/import/", {"bundle_file": upload}).content.decode())
    assert "entry '.git/hooks/post-checkout': version-control folders" in page
    assert "a relative path such as docs/notes.md" in page
    assert nothing_stored()


def test_a_conflicting_version_is_explained_on_the_page(composer_client):
    add_skill()
    response = composer_client.post("/skills/import/",
                                    {"manifest_text": json.dumps(manifest(description="new"))})
    page = response.content.decode()
    assert "already in the registry with different content" in page
    assert "1.0.1" in page


def test_reimporting_an_identical_version_says_nothing_changed(composer_client):
    add_skill()
    response = composer_client.post("/skills/import/", {"manifest_text": json.dumps(manifest())},
                                    follow=True)
    assert "already in the registry with exactly this content" in response.content.decode()
    assert Skill.objects.count() == 1


def test_an_empty_import_form_asks_for_something(composer_client):
    page = composer_client.post("/skills/import/", {"manifest_text": "  "}).content.decode()
    assert "Nothing to import" in page


def test_two_sources_at_once_are_refused(composer_client):
    upload = SimpleUploadedFile("b.zip", bundle())
    page = composer_client.post("/skills/import/", {"manifest_text": json.dumps(manifest()),
                                                    "bundle_file": upload}).content.decode()
    assert "Import one skill at a time" in page
    assert nothing_stored()


def test_an_upload_over_the_limit_is_refused_on_the_page(composer_client, settings):
    settings.HANDOFF_SKILL_UPLOAD_LIMIT_BYTES = 1024
    upload = SimpleUploadedFile("big.zip", b"PK\x03\x04" + b"x" * 4096)
    page = composer_client.post("/skills/import/", {"bundle_file": upload}).content.decode()
    assert "big.zip is 4 KB; skills are at most 1 KB" in page
    assert nothing_stored()


def test_someone_who_is_not_a_composer_is_sent_back_with_a_message(outsider_client):
    response = outsider_client.get("/skills/import/", follow=True)
    assert response.redirect_chain == [("/skills/", 302)]
    assert "Only composers can import skills" in response.content.decode()
    response = outsider_client.post("/skills/import/", {"manifest_text": json.dumps(manifest())})
    assert response.status_code == 302
    assert nothing_stored()


def test_the_import_page_works_without_javascript(composer_client):
    page = composer_client.get("/skills/import/").content.decode()
    assert 'method="post"' in page and 'enctype="multipart/form-data"' in page
    assert 'name="manifest_text"' in page and 'name="bundle_file"' in page


def test_zip_entries_are_read_from_one_top_level_folder():
    archive = zip_bytes({"price-check/manifest.json": json.dumps(manifest()),
                         "price-check/instructions.md": INSTRUCTIONS})
    assert skill_import(source=archive, origin="bundle").skill.instructions == INSTRUCTIONS


def test_a_stored_zip_entry_is_accepted_too():
    archive = zip_bytes({"manifest.json": json.dumps(manifest()), "instructions.md": "hi"},
                        compression=zipfile.ZIP_STORED)
    assert skill_import(source=archive, origin="bundle").created


def test_a_bare_manifest_says_its_instruction_file_was_left_behind():
    result = skill_import(source=manifest(), origin="api")
    assert any("instructions.md was not part of this import" in w for w in result.warnings)
    assert result.skill.instructions == ""
    bundled = skill_import(source=bundle(manifest(version="1.0.1")), origin="bundle")
    assert not any("was not part of this import" in w for w in bundled.warnings)


def test_a_manifest_that_carries_its_instructions_needs_no_file():
    result = skill_import(source=manifest(instructions="Find the price."), origin="api")
    assert result.skill.instructions == "Find the price."
    assert not any("was not part of this import" in w for w in result.warnings)


@pytest.mark.parametrize(("field", "said"), [
    ("bundle_file", "photo.png is not a zip file. A bundle is a .zip with manifest.json"),
    ("manifest_file", "photo.png is neither a manifest.json (JSON text) nor a bundle (.zip)."),
])
def test_an_uploaded_file_of_the_wrong_kind_says_what_it_is_not(composer_client, field, said):
    upload = SimpleUploadedFile("photo.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", content_type="image/png")
    page = html.unescape(composer_client.post("/skills/import/", {field: upload}).content.decode())
    assert said in page and "UTF-8" not in page
    assert nothing_stored()
