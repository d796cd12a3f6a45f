"""`manage.py import_skills PATH...` and `manage.py load_builtin_skills`."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from delegations.protocol.manifest import SUBAGENT_TYPES, load_bundle
from skills.models import Skill
from skills.services import BUILTIN_DIR
from tests.skills.factories import HANDOFF_MANIFEST, bundle, manifest

pytestmark = pytest.mark.django_db


def run(*args: str) -> tuple[str, str, CommandError | None]:
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        call_command(*args, stdout=stdout, stderr=stderr)
    except CommandError as error:
        return stdout.getvalue(), stderr.getvalue(), error
    return stdout.getvalue(), stderr.getvalue(), None


@pytest.fixture
def skill_folder(tmp_path: Path) -> Path:
    """A folder holding a manifest file, a bundle folder, a zip and an invalid manifest."""
    (tmp_path / "handoff-manifest.json").write_text(json.dumps(HANDOFF_MANIFEST))
    folder = tmp_path / "nested" / "price-check"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps(manifest()))
    (folder / "instructions.md").write_text("Find the price.")
    (tmp_path / "reviewer.zip").write_bytes(bundle(manifest("reviewer", subagent_type="reviewer")))
    (tmp_path / "broken.json").write_text(json.dumps(manifest("broken", version="one",
                                                             capabilities=["file_delete"])))
    (tmp_path / "notes.txt").write_text("not a skill")
    return tmp_path


def test_import_skills_takes_files_folders_and_zips_and_reports_each(skill_folder, composer):
    stdout, stderr, error = run("import_skills", str(skill_folder), "--user", composer.username)
    assert sorted(Skill.objects.values_list("name", flat=True)) == [
        "SourceCodeAalyzer", "price-check", "reviewer"]
    assert "Added (3):" in stdout and "+ price-check@1.0.0" in stdout
    assert "3 added, 0 skipped, 1 rejected." in stdout
    assert "broken.json" in stderr
    assert "version: 'one' is not a semantic version" in stderr
    assert "capabilities[0]: capability 'file_delete' needs explicit approval" in stderr
    assert "analyze.py" in stdout  # the hand-off protocol's example manifest warns
    assert error is not None and error.returncode == 1
    assert Skill.objects.get(name="price-check").instructions == "Find the price."
    assert set(Skill.objects.values_list("source", flat=True)) == {"command"}
    assert Skill.objects.get(name="reviewer").created_by == composer


def test_import_skills_exits_zero_and_skips_what_is_already_there(skill_folder):
    (skill_folder / "broken.json").unlink()
    assert run("import_skills", str(skill_folder))[2] is None
    stdout, _, error = run("import_skills", str(skill_folder / "handoff-manifest.json"),
                           str(skill_folder / "reviewer.zip"))
    assert error is None
    assert "0 added, 2 skipped, 0 rejected." in stdout
    assert "= SourceCodeAalyzer@1.2.0" in stdout


def test_import_skills_rejects_a_changed_version(skill_folder, tmp_path):
    run("import_skills", str(skill_folder / "handoff-manifest.json"))
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps({**HANDOFF_MANIFEST, "description": "edited"}))
    _, stderr, error = run("import_skills", str(changed))
    assert error is not None and error.returncode == 1
    assert "SourceCodeAalyzer@1.2.0 is already in the registry with different content" in stderr
    assert '"version": "1.2.1"' in stderr


def test_import_skills_names_a_path_that_does_not_exist(tmp_path):
    _, stderr, error = run("import_skills", str(tmp_path / "missing.json"))
    assert error is not None and "no such file or folder" in stderr


def test_import_skills_refuses_a_bundle_folder_with_an_unsafe_file_name(tmp_path, composer):
    folder = tmp_path / "price-check"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps(manifest()))
    (folder / "instructions.md").write_text("Find the price.")
    (folder / "notes\\draft.md").write_text("x")
    _, stderr, error = run("import_skills", str(folder), "--user", composer.username)
    assert error is not None and not Skill.objects.exists()
    assert "'notes\\\\draft.md': backslashes are not allowed" in stderr


def test_import_skills_refuses_an_unknown_user(skill_folder):
    _, _, error = run("import_skills", str(skill_folder), "--user", "ghost")
    assert error is not None and "No user named 'ghost'" in str(error)
    assert not Skill.objects.exists()


def test_the_builtin_catalog_loads_and_loading_it_again_changes_nothing():
    stdout, _, error = run("load_builtin_skills")
    assert error is None and " 0 rejected." in stdout
    count = Skill.objects.count()
    assert count >= 12 and set(Skill.objects.values_list("source", flat=True)) == {"builtin"}
    stdout, _, error = run("load_builtin_skills")
    assert error is None and f"0 added, {count} skipped, 0 rejected." in stdout
    assert Skill.objects.count() == count


def test_the_builtin_catalog_covers_every_subagent_type_and_approval_capability():
    run("load_builtin_skills")
    latest = Skill.objects.latest_versions()
    assert set(latest.values_list("subagent_type", flat=True)) >= set(SUBAGENT_TYPES)
    # every capability that waits for a person is met on some built-in skill's latest version
    for capability in ("network_outbound", "file_delete", "financial_tx"):
        skill = latest.with_capability(capability).get()
        assert skill.requires_approval
    # price research on the network, each request approved, is 1.2.0's; 1.3.0 reads a pasted quote
    assert "price-research@1.2.0" in {skill.ref for skill in Skill.objects.with_capability("network_outbound")}
    assert {"SourceCodeAnalyzer", "price-research"} <= set(latest.values_list("name", flat=True))
    assert Skill.objects.filter(name="price-research").count() == 4  # versions to switch between
    assert all(skill.instructions for skill in latest)  # each has its instruction file


def test_the_builtin_research_skill_returns_price_and_currency():
    run("load_builtin_skills")
    schema = Skill.objects.resolve("price-research").output_schema
    assert {"price", "currency"} <= set(schema["required"])
    assert schema["properties"]["price"]["type"] == "number"


@pytest.mark.parametrize(("name", "contract"), [
    ("agloop-researcher", ["context_map", "findings", "passes_completed", "confidence"]),
    ("agloop-planner", ["plan_yaml_path", "plan_md_path", "task_count", "estimated_total_effort",
                        "critical_risks"]),
    ("agloop-critic", ["verdict", "objection", "objection_category", "severity", "suggested_fix",
                       "specification_compliance"]),
    ("agloop-executor", ["files_modified", "files_deleted", "acceptance_criteria_confirmation",
                         "summary", "warnings"]),
])
def test_the_agloop_skills_carry_the_agloop_delegation_protocols_output_contracts(name, contract):
    """The agloop delegation protocol's expected output contracts, field for field, as required
    properties."""
    built_in = load_bundle(BUILTIN_DIR / name).manifest
    assert built_in.output_schema["required"] == contract
    assert built_in.subagent_type == name.removeprefix("agloop-")


def test_the_critic_contract_accepts_the_agloop_delegation_protocols_verdict_values():
    from delegations.protocol.schemas import validate_instance

    schema = load_bundle(BUILTIN_DIR / "agloop-critic").manifest.output_schema
    approve = {"verdict": "APPROVE", "objection": None, "objection_category": None,
               "severity": None, "suggested_fix": None,
               "specification_compliance": {"compliant": True, "violations": []}}
    assert validate_instance(schema, approve) == []
    assert validate_instance(schema, {**approve, "verdict": "MAYBE"}) != []
