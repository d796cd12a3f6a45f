from __future__ import annotations

import pytest

from delegations.protocol.errors import ErrorCode, ProtocolError
from skills.models import Skill
from skills.schema_tables import schema_rows
from skills.services import skill_delete
from tests.skills.factories import INSTRUCTIONS, add_skill

pytestmark = pytest.mark.django_db


def latest_version(name: str) -> str:
    skill = Skill.objects.resolve(name)
    assert skill is not None
    return skill.version


def test_latest_follows_semver_not_upload_order():
    for version in ("1.10.0", "1.9.0", "1.2.3"):
        add_skill("ranker", version)
    assert latest_version("ranker") == "1.10.0"
    assert [row.version for row in Skill.objects.versions_of("ranker")] == ["1.10.0", "1.9.0", "1.2.3"]
    assert Skill.objects.filter(name="ranker", is_latest=True).count() == 1


def test_a_release_is_latest_over_a_newer_prerelease():
    add_skill("ranker", "1.10.0")
    add_skill("ranker", "2.0.0-rc.1")
    assert latest_version("ranker") == "1.10.0"
    assert [row.version for row in Skill.objects.versions_of("ranker")] == ["2.0.0-rc.1", "1.10.0"]


def test_prereleases_alone_give_the_highest_prerelease():
    add_skill("early", "1.0.0-alpha.10")
    add_skill("early", "1.0.0-alpha.9")
    add_skill("early", "1.0.0-alpha")
    assert latest_version("early") == "1.0.0-alpha.10"


def test_a_new_higher_version_takes_over_latest():
    add_skill("ranker", "1.0.0")
    add_skill("ranker", "1.0.1")
    assert latest_version("ranker") == "1.0.1"
    assert Skill.objects.get(name="ranker", version="1.0.0").is_latest is False


def test_deleting_the_latest_version_promotes_the_next_one():
    add_skill("ranker", "1.0.0")
    newest = add_skill("ranker", "1.1.0")
    skill_delete(skill=newest)
    assert latest_version("ranker") == "1.0.0"


def test_semver_components_are_stored_for_ordering():
    skill = add_skill("ranker", "12.3.40-beta.2+build.7")
    assert (skill.version_major, skill.version_minor, skill.version_patch) == (12, 3, 40)
    assert skill.version_prerelease == "beta.2" and skill.is_prerelease


def test_resolve_takes_a_reference_or_a_bare_name():
    add_skill("ranker", "1.0.0")
    add_skill("ranker", "1.1.0")
    assert Skill.objects.resolve("ranker@1.0.0").version == "1.0.0"
    assert Skill.objects.resolve("ranker").version == "1.1.0"
    assert Skill.objects.resolve("ranker@9.9.9") is None
    assert Skill.objects.resolve("nobody") is None


def test_a_row_gives_back_the_protocol_manifest_with_normalized_schemas():
    skill = add_skill("ranker", "1.0.0")
    manifest = skill.to_manifest()
    assert manifest.ref == "ranker@1.0.0"
    assert manifest.input_schema == {
        "type": "object",
        "properties": {"query": {"type": "string"},
                       "sources": {"type": "array", "items": {"type": "string"}}},
        "required": ["query", "sources"]}


def test_capability_badges_mark_approval_and_unknown_capabilities():
    skill = add_skill("fetcher", capabilities=["network_outbound", "teleport", "fs_read"],
                      requires_approval=True)
    badges = {badge["name"]: badge for badge in skill.capability_badges()}
    assert badges["network_outbound"]["needs_approval"] is True
    assert "HTTP" in badges["network_outbound"]["description"]
    assert badges["teleport"]["known"] is False
    assert badges["fs_read"] == {"name": "fs_read", "needs_approval": False, "known": True,
                                 "description": badges["fs_read"]["description"]}
    assert skill.unknown_capabilities == ["teleport"]


def test_the_catalog_query_searches_name_description_and_tags():
    add_skill("price-check", description="Quotes for stocks", tags=["finance"])
    add_skill("summarizer", description="Summarizes long documents", tags=["text"])
    add_skill("auditor", description="Checks ledgers", tags=["finance", "audit"])
    names = lambda **kw: [row.name for row in Skill.objects.catalog(**kw)]  # noqa: E731
    assert names(q="summar") == ["summarizer"]
    assert names(q="LEDGERS") == ["auditor"]
    assert names(q="finance") == ["auditor", "price-check"]
    assert names(q="finance audit") == ["auditor"]
    assert names(q="price") == ["price-check"]


def test_exact_and_prefix_name_matches_come_first():
    add_skill("alpha-tools", description="mentions report")
    add_skill("report", description="the report skill")
    add_skill("report-writer", description="writes")
    assert [row.name for row in Skill.objects.catalog(q="report")] == [
        "report", "report-writer", "alpha-tools"]


def test_the_catalog_filters_on_capability_type_approval_and_tag():
    add_skill("fetcher", capabilities=["network_outbound"], requires_approval=True,
              subagent_type="researcher", tags=["web"])
    add_skill("reader", capabilities=["fs_read"], subagent_type="reviewer", tags=["files"])
    names = lambda **kw: [row.name for row in Skill.objects.catalog(**kw)]  # noqa: E731
    assert names(capability="network_outbound") == ["fetcher"]
    assert names(subagent_type="reviewer") == ["reader"]
    assert names(requires_approval=True) == ["fetcher"]
    assert names(requires_approval=False) == ["reader"]
    assert names(tag="files") == ["reader"]
    assert names(capability="fs_read", subagent_type="researcher") == []


def test_the_catalog_lists_one_row_per_skill_its_latest_version():
    add_skill("fetcher", "1.0.0", capabilities=["fs_read"])
    add_skill("fetcher", "2.0.0", capabilities=["search"])
    rows = list(Skill.objects.catalog())
    assert [(row.name, row.version) for row in rows] == [("fetcher", "2.0.0")]
    # an old version's capabilities do not make the skill match
    assert list(Skill.objects.catalog(capability="fs_read")) == []


def test_schema_rows_indent_nested_properties_and_show_enums():
    rows = schema_rows({
        "type": "object",
        "properties": {
            "verdict": {"type": "string", "enum": ["APPROVE", "REVISE"], "description": "the call"},
            "severity": {"enum": ["blocking", None]},
            "context_map": {"type": "object", "properties": {
                "primary_files": {"type": "array", "items": {"type": "object", "properties": {
                    "path": {"type": "string", "minLength": 1}}, "required": ["path"]}}},
                "required": ["primary_files"]},
            "note": {"type": ["string", "null"]},
        },
        "required": ["verdict"],
    })
    by_path = {row.path: row for row in rows}
    assert [row.path for row in rows] == ["verdict", "severity", "context_map",
                                          "context_map.primary_files",
                                          "context_map.primary_files[].path", "note"]
    assert by_path["verdict"].required and by_path["verdict"].enum == ("APPROVE", "REVISE")
    assert by_path["verdict"].description == "the call"
    assert by_path["severity"].type == "string | null" and not by_path["severity"].required
    assert by_path["context_map.primary_files"].type == "array of object"
    assert by_path["context_map.primary_files"].depth == 1
    assert by_path["context_map.primary_files[].path"].depth == 2
    assert by_path["context_map.primary_files[].path"].required
    assert by_path["context_map.primary_files[].path"].constraints == ("min length 1",)
    assert by_path["note"].type == "string | null"


def test_a_schema_that_is_not_an_object_gets_one_row():
    rows = schema_rows({"type": "string", "enum": ["a", "b"]})
    assert [(row.name, row.type, row.enum) for row in rows] == [("(value)", "string", ("a", "b"))]
    assert schema_rows({}) == []


def test_the_runner_resolves_a_reference_to_a_protocol_manifest():
    add_skill("ranker", "1.0.0", instructions=INSTRUCTIONS)
    add_skill("ranker", "1.2.0", instructions=INSTRUCTIONS)
    assert Skill.objects.manifest_for("ranker").version == "1.2.0"
    assert Skill.objects.manifest_for("ranker@1.0.0").ref == "ranker@1.0.0"
    assert Skill.objects.manifest_for("ghost") is None


def test_the_runner_is_refused_a_version_whose_instruction_file_is_missing():
    add_skill("ranker", "1.0.0")  # manifest.json alone
    with pytest.raises(ProtocolError) as refused:
        Skill.objects.manifest_for("ranker")
    assert refused.value.code == ErrorCode.INVALID_PACKET
    with pytest.raises(ProtocolError) as root_refused:
        Skill.objects.for_run("ranker", {})
    assert refused.value.message == root_refused.value.message
    assert "ranker@1.0.0's instruction file instructions.md is missing" in refused.value.message
