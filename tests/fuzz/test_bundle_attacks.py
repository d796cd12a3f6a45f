"""Zip bombs, path traversal and symlinks in skill bundles are refused with a message
naming the problem, through the protocol and through the import page's API."""

from __future__ import annotations

import io
import json
import stat
import zipfile
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from delegations.protocol.errors import ProtocolError
from delegations.protocol.manifest import MAX_BUNDLE_FILES, load_bundle
from tests.conftest import bearer

MANIFEST = {"skill_name": "attack", "version": "1.0.0", "entry_point": "instructions.md",
            "input_schema": {}, "output_schema": {}, "capabilities": []}


def bundle(*entries: tuple[str | zipfile.ZipInfo, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("manifest.json", json.dumps(MANIFEST))
        archive.writestr("instructions.md", "Do it.")
        for name, content in entries:
            archive.writestr(name, content)
    return buffer.getvalue()


def symlink(name: str, target: str) -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info, target.encode()


ATTACKS = {
    "zip bomb": (bundle(("bomb.txt", b"0" * 3_000_000)), "looks like a zip bomb"),
    "too many files": (bundle(*((f"f{i}.txt", b"x") for i in range(MAX_BUNDLE_FILES + 1))), "at most"),
    "parent folder": (bundle(("../../etc/evil.md", b"x")), "../../etc/evil.md"),
    "absolute path": (bundle(("/etc/passwd", b"x")), "/etc/passwd"),
    "backslashes": (bundle(("..\\..\\evil.md", b"x")), "evil.md"),
    "drive letter": (bundle(("C:/evil.md", b"x")), "C:/evil.md"),
    "symlink": (bundle(symlink("link.md", "/etc/passwd")), "symlinks are not allowed"),
    "not a zip": (b"PK\x03\x04" + b"\x00" * 50, "not a readable zip"),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_hostile_bundle_is_refused_with_a_clear_message(attack: str) -> None:
    raw, message = ATTACKS[attack]
    with pytest.raises(ProtocolError) as refused:
        load_bundle(raw)
    assert refused.value.code == "ERR_INVALID_MANIFEST"
    assert message in str(refused.value.issues), (attack, refused.value.issues)


def test_a_zip_whose_headers_understate_the_size_is_refused() -> None:
    raw = bytearray(bundle(("big.txt", b"A" * 200_000)))
    # lie in the central directory: claim the entry is 10 bytes uncompressed
    archive = zipfile.ZipFile(io.BytesIO(bytes(raw)))
    info = archive.getinfo("big.txt")
    central = raw.rfind(b"PK\x01\x02", 0, raw.rfind(b"big.txt") + 1)
    raw[central + 24:central + 28] = (10).to_bytes(4, "little")
    local = info.header_offset
    raw[local + 22:local + 26] = (10).to_bytes(4, "little")
    with pytest.raises(ProtocolError) as refused:
        load_bundle(bytes(raw))
    assert "bundle" in str(refused.value.issues)


def test_a_bundle_folder_with_a_symlink_is_refused(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps(MANIFEST))
    (tmp_path / "instructions.md").write_text("Do it.")
    (tmp_path / "secrets.md").symlink_to("/etc/passwd")
    with pytest.raises(ProtocolError) as refused:
        load_bundle(tmp_path)
    assert "symlinks are not allowed" in str(refused.value.issues)


@pytest.mark.django_db
@pytest.mark.parametrize("attack", ["zip bomb", "parent folder", "symlink"])
def test_the_api_refuses_a_hostile_bundle_with_422_and_writes_nothing(attack: str, composer: Any) -> None:
    from skills.models import Skill

    raw, message = ATTACKS[attack]
    response = Client().post("/api/skills", raw, content_type="application/zip", headers=bearer(composer))
    assert response.status_code == 422
    assert message in json.dumps(response.json())
    assert not Skill.objects.filter(name="attack").exists()
