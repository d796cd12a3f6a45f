"""Skill manifests and bundles: the hand-off protocol's manifest, every bad-manifest case, zip limits."""

from __future__ import annotations

import io
import json
import stat
import zipfile
from pathlib import Path
from typing import Any

import pytest

from delegations.protocol.errors import ErrorCode, ProtocolError
from delegations.protocol.manifest import (
    EntryPointKind,
    SemVer,
    SkillManifest,
    bundle_zip,
    latest_version,
    load_bundle,
    load_manifest,
    manifest_json,
)
from delegations.protocol.manifest import entry_points as manifest_entry_points
from delegations.protocol.manifest import sources as manifest_sources

from .protocol_examples import HANDOFF_MANIFEST


def manifest(**changes: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(HANDOFF_MANIFEST))
    data.update(changes)
    return {key: value for key, value in data.items() if value is not None}


def problems(source: Any, **kwargs: Any) -> list[tuple[str, str]]:
    with pytest.raises(ProtocolError) as caught:
        load_manifest(source, **kwargs)
    assert caught.value.code is ErrorCode.INVALID_MANIFEST
    return [(issue.field, issue.message) for issue in caught.value.issues]


def zip_of(entries: dict[str, bytes | str], *, compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as archive:
        for name, content in entries.items():
            # ZipInfo keeps names verbatim (writestr(str) would rewrite "C:/x" and "/x").
            info = zipfile.ZipInfo(name)
            info.compress_type = compression
            archive.writestr(info, content)
    return buffer.getvalue()


def instruction_skill(**changes: Any) -> dict[str, Any]:
    return manifest(entry_point="INSTRUCTIONS.md", subagent_type="reviewer", **changes)


# --- the hand-off protocol's example manifest ------------------------------------------------

def test_the_hand_off_protocols_example_manifest_loads_with_normalized_schemas() -> None:
    skill = load_manifest(HANDOFF_MANIFEST)
    assert skill.ref == "SourceCodeAalyzer@1.2.0"
    assert skill.input_schema["required"] == ["repo_path", "strict_mode"]
    assert skill.output_schema["properties"] == {"vulnerabilities": {"type": "array"},
                                                 "sloc": {"type": "number"}}
    assert skill.capabilities == ["fs_read", "ast_parsing", "subprocess_exec"]
    assert skill.unknown_capabilities == []


def test_the_example_manifests_script_entry_point_is_accepted_with_a_warning() -> None:
    skill = load_manifest(HANDOFF_MANIFEST)
    assert skill.entry.kind is EntryPointKind.SCRIPT
    assert skill.entry.path == "analyze.py"
    assert any("'analyze.py' is a script" in warning for warning in skill.warnings)


def test_it_loads_json_text_bytes_and_a_manifest_path(tmp_path: Path) -> None:
    text = json.dumps(HANDOFF_MANIFEST)
    path = tmp_path / "manifest.json"
    path.write_text(text)
    for source in (text, text.encode(), path, str(path)):
        assert load_manifest(source).ref == "SourceCodeAalyzer@1.2.0"


def test_unknown_capabilities_are_kept_and_warned_about() -> None:
    skill = load_manifest(manifest(capabilities=["fs_read", "teleport"]))
    assert skill.capabilities == ["fs_read", "teleport"]
    assert skill.unknown_capabilities == ["teleport"]
    assert any("'teleport'" in warning for warning in skill.warnings)


def test_unknown_keys_are_kept_for_export_and_warned_about() -> None:
    skill = load_manifest(manifest(homepage="https://example.org"))
    assert skill.extra_keys == ["homepage"]
    assert json.loads(manifest_json(skill))["homepage"] == "https://example.org"
    assert any("'homepage'" in warning for warning in skill.warnings)


# --- approval-required capabilities -----------------------------------------------------------

def test_an_approval_required_capability_without_requires_approval_is_rejected_by_name() -> None:
    found = problems(manifest(capabilities=["fs_read", "network_outbound", "file_delete"]))
    assert [field for field, _ in found] == ["capabilities[1]", "capabilities[2]"]
    assert "'network_outbound' needs explicit approval" in found[0][1]
    assert '"requires_approval": true' in found[0][1]


def test_requires_approval_true_allows_approval_required_capabilities() -> None:
    skill = load_manifest(manifest(capabilities=["financial_tx"], requires_approval=True))
    assert skill.requires_approval is True


def test_the_approval_required_set_is_a_setting() -> None:
    assert load_manifest(manifest(capabilities=["network_outbound"]), approval_required=())
    assert problems(manifest(capabilities=["fs_read"]), approval_required={"fs_read"})


# --- entry points -----------------------------------------------------------------------------

def test_a_python_entry_point_needs_its_module_in_the_allowlist() -> None:
    data = manifest(entry_point="python:handoff_skills.pricing:quote")
    found = problems(data)
    assert found == [("entry_point", "python module 'handoff_skills.pricing' is not in the python skill "
                                     "allowlist (HANDOFF_PYTHON_SKILL_ALLOWLIST; allowed: none)")]
    skill = load_manifest(data, python_allowlist=["handoff_skills"])
    assert (skill.entry.kind, skill.entry.module, skill.entry.attribute) == (
        EntryPointKind.PYTHON, "handoff_skills.pricing", "quote")
    assert problems(data, python_allowlist=["handoff_skills.other", "handoff"])


@pytest.mark.parametrize("entry_point", ["python:bad module:run", "python:mod", "../escape.md",
                                         "/etc/passwd.md", "C:/x.md", "dir\\x.md", "no_extension", ""])
def test_malformed_entry_points_are_rejected(entry_point: str) -> None:
    assert problems(manifest(entry_point=entry_point))[0][0] == "entry_point"


def test_an_instruction_entry_point_is_accepted_outside_a_bundle() -> None:
    skill = load_manifest(instruction_skill())
    assert skill.entry.kind is EntryPointKind.INSTRUCTIONS and skill.warnings == []


# --- bad manifests -------------------------------------------------------------------------------

def test_invalid_json_reports_line_and_column() -> None:
    found = problems('{\n  "skill_name": "x",\n  "version" "1.0.0"\n}')
    assert found == [("manifest.json", "invalid JSON at line 3, column 13: Expecting ':' delimiter")]


def test_a_manifest_that_is_not_an_object_is_rejected() -> None:
    assert problems("[1, 2]") == [("manifest", "expected a JSON object; got a list")]


def test_every_problem_is_reported_at_once() -> None:
    found = problems({"skill_name": "bad name@1", "version": 1.2, "entry_point": 7,
                      "input_schema": {"a": "strng"}, "output_schema": {"type": "objekt"},
                      "capabilities": "fs_read", "requires_approval": "yes", "tags": [1],
                      "subagent_type": "wizard", "description": 5})
    fields = [field for field, _ in found]
    assert fields == ["skill_name", "version", "entry_point", "description", "subagent_type",
                      "requires_approval", "input_schema.a", "output_schema.type", "capabilities",
                      "tags[0]"]
    messages = dict(found)
    assert messages["version"].startswith('expected a semantic version string such as "1.2.0"')
    assert messages["capabilities"] == "expected a list of names; got a string"
    assert "coder, researcher, reviewer, executor, planner, critic, verifier" in messages["subagent_type"]


def test_missing_required_fields_are_each_named() -> None:
    found = problems({"skill_name": "x"})
    assert [field for field, _ in found] == ["version", "entry_point", "input_schema",
                                            "output_schema", "capabilities"]


def test_an_invalid_json_schema_is_rejected_with_its_path() -> None:
    found = problems(manifest(output_schema={"type": "object", "properties": {"n": {"minimum": "x"}}}))
    assert found[0][0] == "output_schema.properties.n.minimum"
    assert found[0][1].startswith("invalid JSON Schema")


@pytest.mark.parametrize("version", ["1.2", "v1.2.0", "01.2.0", "1.2.0-", "1.2.0+", "1.2.0.4", "latest"])
def test_a_version_that_is_not_semver_is_rejected(version: str) -> None:
    field, message = problems(manifest(version=version))[0]
    assert field == "version" and "is not a semantic version" in message


def test_duplicate_capabilities_are_rejected() -> None:
    assert problems(manifest(capabilities=["fs_read", "fs_read"])) == [
        ("capabilities[1]", "'fs_read' is listed twice")]


def test_a_path_that_does_not_exist_is_reported(tmp_path: Path) -> None:
    assert "no such file or folder" in problems(str(tmp_path / "missing.json"))[0][1]


# --- semver -------------------------------------------------------------------------------------

def test_semver_orders_by_precedence() -> None:
    ordered = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2",
               "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.2.0", "1.10.0", "2.0.0"]
    parsed = [SemVer.parse(text) for text in ordered]
    assert parsed == sorted(reversed(parsed))
    assert str(SemVer.parse("1.0.0-rc.1+build.5")) == "1.0.0-rc.1+build.5"


def test_latest_prefers_the_highest_release() -> None:
    assert latest_version(["1.2.0", "1.10.0", "1.9.9", "2.0.0-rc.1", "junk"]) == "1.10.0"
    assert latest_version(["1.2.0", "2.0.0-rc.1"], include_prerelease=True) == "2.0.0-rc.1"
    assert latest_version(["0.1.0-alpha"]) == "0.1.0-alpha"
    assert latest_version([]) is None


# --- bundles ------------------------------------------------------------------------------------

def test_a_folder_bundle_renders_its_instruction_file(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps(instruction_skill()))
    (tmp_path / "INSTRUCTIONS.md").write_text("# Review\nRead every file.\n")
    bundle = load_bundle(tmp_path)
    assert bundle.instructions == "# Review\nRead every file.\n"
    assert bundle.manifest.instructions == bundle.instructions
    assert sorted(bundle.files) == ["INSTRUCTIONS.md", "manifest.json"]
    assert load_manifest(tmp_path / "manifest.json").instructions == bundle.instructions


def test_a_bundle_whose_instruction_file_is_missing_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps(instruction_skill()))
    assert problems(tmp_path) == [("entry_point", "instruction file 'INSTRUCTIONS.md' is not in the bundle")]


def test_a_zip_bundle_loads_from_bytes_and_from_a_path(tmp_path: Path) -> None:
    data = zip_of({"manifest.json": json.dumps(instruction_skill()), "INSTRUCTIONS.md": "Do it."})
    assert load_bundle(data).instructions == "Do it."
    path = tmp_path / "skill.zip"
    path.write_bytes(data)
    assert load_manifest(path).instructions == "Do it."


def test_a_zip_of_a_folder_reads_as_that_folder() -> None:
    data = zip_of({"skill/manifest.json": json.dumps(instruction_skill()), "skill/INSTRUCTIONS.md": "Go."})
    assert load_bundle(data).instructions == "Go."


def test_a_zip_without_a_manifest_is_rejected() -> None:
    assert problems(zip_of({"README.md": "hi"})) == [
        ("bundle", "no manifest.json at the bundle's root (found README.md)")]


def test_a_broken_zip_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "skill.zip"
    path.write_bytes(b"PK\x03\x04 not really a zip")
    assert problems(path)[0][1].startswith("not a readable zip file")


@pytest.mark.parametrize(("name", "reason"), [
    ("../evil.md", "'..' would leave the bundle"), ("docs/../../evil.md", "'..' would leave the bundle"),
    ("/etc/passwd", "absolute paths are not allowed"), ("C:/windows/x", "absolute paths are not allowed"),
    ("dir\\evil.md", "backslashes are not allowed (use '/')"),
])
def test_zip_entries_that_leave_the_bundle_are_refused(name: str, reason: str) -> None:
    data = zip_of({"manifest.json": json.dumps(HANDOFF_MANIFEST), name: "x"})
    assert problems(data) == [("bundle", f"entry {name!r}: {reason}; {manifest_entry_points.BUNDLE_NAMES}")]


ALLOWED_NAMES = "a relative path such as docs/notes.md"


@pytest.mark.parametrize(("name", "reason"), [
    (".git/config", "version-control folders"), ("docs/.svn/entries", "version-control folders"),
    (".Git/hooks/post-checkout", "version-control folders"),
    ("notes\x01.md", "control character U+0001"), ("notes\x7f.md", "control character U+007F"),
    ("evil\u202egpj.md", "control character U+202E"),
    ("docs//notes.md", "empty and '.' parts"), ("./notes.md", "empty and '.' parts"),
])
def test_zip_entries_with_unsafe_names_are_refused_saying_what_names_are_allowed(name: str, reason: str) -> None:
    data = zip_of({"manifest.json": json.dumps(HANDOFF_MANIFEST), name: "x"})
    [(field, message)] = problems(data)
    assert field == "bundle" and message.startswith(f"entry {name!r}: ")
    assert reason in message and ALLOWED_NAMES in message


def test_a_zip_entry_whose_name_holds_a_nul_byte_is_refused_not_cut_short() -> None:
    # zipfile reads "notes.md\x00.sh" as "notes.md": the name as stored is what is checked
    data = zip_of({"manifest.json": json.dumps(HANDOFF_MANIFEST), "notes.md#.sh": "x"})
    data = data.replace(b"notes.md#.sh", b"notes.md\x00.sh")
    assert problems(data) == [("bundle", "entry 'notes.md\\x00.sh': it holds a NUL byte; "
                                         + manifest_entry_points.BUNDLE_NAMES)]


@pytest.mark.parametrize("name", ["back\\slash.md", "tab\tname.md"])
def test_a_folder_bundle_with_an_unsafe_file_name_is_refused(tmp_path: Path, name: str) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps(HANDOFF_MANIFEST))
    (tmp_path / name).write_text("x")
    [(field, message)] = problems(tmp_path)
    assert field == "bundle" and message.startswith(f"{name!r}: ") and ALLOWED_NAMES in message


def test_a_folder_bundle_leaves_its_version_control_folder_out(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps(instruction_skill()))
    (tmp_path / "INSTRUCTIONS.md").write_text("Go.")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("[core]")
    assert set(load_bundle(tmp_path).files) == {"manifest.json", "INSTRUCTIONS.md"}


def test_every_bad_zip_entry_is_reported_at_once() -> None:
    data = zip_of({"manifest.json": json.dumps(HANDOFF_MANIFEST), "../a": "x", "/b": "x", "c\\d": "x"})
    assert len(problems(data)) == 3


def test_a_symlink_entry_is_refused() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("manifest.json", json.dumps(HANDOFF_MANIFEST))
        link = zipfile.ZipInfo("link.md")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, "/etc/passwd")
    assert problems(buffer.getvalue()) == [("bundle", "entry 'link.md': symlinks are not allowed")]


def test_a_zip_bomb_is_refused_before_it_is_extracted() -> None:
    data = zip_of({"manifest.json": json.dumps(HANDOFF_MANIFEST), "bomb.txt": b"0" * 900_000})
    assert len(data) < 5_000
    found = problems(data)
    assert found == [("bundle", f"entry 'bomb.txt' expands {900_000 // _compressed_size(data, 'bomb.txt')}x; "
                                "more than 100x looks like a zip bomb")]


def _compressed_size(data: bytes, name: str) -> int:
    return zipfile.ZipFile(io.BytesIO(data)).getinfo(name).compress_size


def test_too_many_files_are_refused() -> None:
    entries: dict[str, bytes | str] = {"manifest.json": json.dumps(HANDOFF_MANIFEST)}
    entries.update({f"notes/{index}.txt": "x" for index in range(200)})
    assert problems(zip_of(entries)) == [("bundle", "201 files; a bundle holds at most 200")]


def test_a_file_too_large_and_a_bundle_too_large_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifest_sources, "MAX_FILE_BYTES", 1000)
    monkeypatch.setattr(manifest_sources, "MAX_BUNDLE_BYTES", 2500)
    big = bytes(range(256)) * 8  # 2048 incompressible-ish bytes: not a bomb, just too big
    entries: dict[str, bytes | str] = {"manifest.json": json.dumps(HANDOFF_MANIFEST), "a.bin": big,
                                       "b.bin": big[::-1]}
    found = problems(zip_of(entries, compression=zipfile.ZIP_STORED))
    assert ("bundle", "entry 'a.bin' is 2048 bytes uncompressed; at most 1000 per file") in found
    assert any("bytes uncompressed; a bundle holds at most 2500" in message for _, message in found)


def test_a_folder_bundle_with_a_symlink_is_refused(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps(HANDOFF_MANIFEST))
    (tmp_path / "secret.md").symlink_to("/etc/hostname")
    assert problems(tmp_path) == [("bundle", "'secret.md': symlinks are not allowed")]


# --- export -------------------------------------------------------------------------------------

def test_manifest_json_round_trips() -> None:
    skill = load_manifest(manifest(tags=["security"], description="Finds bugs"))
    again = load_manifest(manifest_json(skill))
    assert again == skill
    assert json.loads(manifest_json(skill))["input_schema"]["type"] == "object"


def test_bundle_zip_round_trips_and_is_deterministic() -> None:
    skill = load_manifest(instruction_skill())
    data = bundle_zip(skill, {"INSTRUCTIONS.md": "Review carefully.", "examples/a.txt": b"x"})
    assert data == bundle_zip(skill, {"examples/a.txt": b"x", "INSTRUCTIONS.md": "Review carefully."})
    bundle = load_bundle(data)
    assert bundle.instructions == "Review carefully."
    assert bundle.manifest.ref == skill.ref
    assert sorted(bundle.files) == ["INSTRUCTIONS.md", "examples/a.txt", "manifest.json"]


def test_bundle_zip_refuses_unsafe_names() -> None:
    skill = load_manifest(HANDOFF_MANIFEST)
    with pytest.raises(ProtocolError) as caught:
        bundle_zip(skill, {"../x": b""})
    assert caught.value.code is ErrorCode.INVALID_MANIFEST


def test_the_model_validates_on_its_own_too() -> None:
    with pytest.raises(ValueError, match="not a semantic version"):
        SkillManifest.model_validate(manifest(version="1"))
    assert SkillManifest.model_validate(HANDOFF_MANIFEST).input_schema["type"] == "object"


def test_the_entry_point_file_replaces_inline_instructions_with_a_warning() -> None:
    skill = load_manifest(instruction_skill(instructions="old inline text"))
    bundle = load_bundle(bundle_zip(skill, {"INSTRUCTIONS.md": "new text"}))
    assert bundle.manifest.instructions == "new text"
    assert "the manifest's instructions were replaced by INSTRUCTIONS.md (the entry point)" in (
        bundle.manifest.warnings)
