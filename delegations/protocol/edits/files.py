"""The files an edit touches: each read once, keeping its line endings, byte-order mark
and mode so that writing it back changes only what the edits changed, and all of them
written together, each atomically (a temporary file beside it and ``os.replace``); if a
write fails part-way, the files already written are restored."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ErrorCode, ProtocolError

BOM = "\ufeff"
NEW_FILE_MODE = 0o644


@dataclass(slots=True)
class FileState:
    rel: str
    target: Path
    existed: bool
    original_bytes: bytes | None
    mode: int | None
    original_text: str | None  # normalized to "\n" line endings, without BOM
    text: str | None           # current content; None = absent
    eol: str = "\n"
    bom: bool = False
    failed: bool = False

    @property
    def created(self) -> bool:
        return not self.existed and self.text is not None

    @property
    def deleted(self) -> bool:
        return self.existed and self.text is None

    def encoded(self) -> bytes:
        text = self.text or ""
        if self.eol != "\n":
            text = text.replace("\n", self.eol)
        return ((BOM if self.bom else "") + text).encode("utf-8")



def load_file(root: Path, resolved: Path, rel: str) -> FileState:
    if not resolved.exists():
        for parent in resolved.parents:
            if parent == root or not parent.is_relative_to(root):
                break
            if parent.exists() and not parent.is_dir():
                raise ValueError(f"{parent.relative_to(root).as_posix()} is a file, so "
                                 f"{rel} cannot be created under it")
        return FileState(rel=rel, target=resolved, existed=False, original_bytes=None,
                          mode=None, original_text=None, text=None)
    if not resolved.is_file():
        raise ValueError("it is not a regular file")
    data = resolved.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("it is not UTF-8 text; binary files cannot be edited") from None
    bom = text.startswith(BOM)
    if bom:
        text = text[1:]
    eol = "\n"
    # Normalize to "\n" only when every line ending is CRLF, so writing back restores
    # the file's own endings exactly.
    if "\r\n" in text and text.count("\r\n") == text.count("\n"):
        eol = "\r\n"
        text = text.replace("\r\n", "\n")
    return FileState(rel=rel, target=resolved, existed=True, original_bytes=data,
                      mode=stat.S_IMODE(resolved.stat().st_mode), original_text=text,
                      text=text, eol=eol, bom=bom)



@dataclass(slots=True)
class _Commit:
    made_dirs: list[Path] = field(default_factory=list)
    temps: dict[Path, Path] = field(default_factory=dict)
    done: list[FileState] = field(default_factory=list)


def _temp_beside(target: Path, data: bytes, mode: int) -> Path:
    handle, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                    suffix=".tmp")
    temp = Path(name)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(temp, mode)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    return temp


def _make_parents(target: Path, made: list[Path]) -> None:
    missing = [parent for parent in target.parents if not parent.exists()]
    for parent in reversed(missing):
        parent.mkdir()
        made.append(parent)


def write_files(states: list[FileState]) -> None:
    work = _Commit()
    current: FileState | None = None
    try:
        # Stage every new content beside its target first: a full disk or a read-only
        # folder fails here, before any file has changed.
        for current in states:
            if current.text is not None:
                _make_parents(current.target, work.made_dirs)
                work.temps[current.target] = _temp_beside(
                    current.target, current.encoded(), current.mode or NEW_FILE_MODE)
        for current in states:
            if current.text is None:
                current.target.unlink()
            else:
                os.replace(work.temps[current.target], current.target)
                del work.temps[current.target]
            work.done.append(current)
    except OSError as exc:
        _roll_back(work)
        name = current.rel if current is not None else "a file"
        restored = " The files already written were restored." if work.done else ""
        raise ProtocolError(
            ErrorCode.TOOL_FAILURE,
            f"Writing {name} failed ({exc.strerror or exc}); no edit was kept.{restored}",
            details={"path": name}) from exc


def _roll_back(work: _Commit) -> None:
    for state in reversed(work.done):
        with contextlib.suppress(OSError):
            if state.existed and state.original_bytes is not None:
                temp = _temp_beside(state.target, state.original_bytes,
                                    state.mode or NEW_FILE_MODE)
                os.replace(temp, state.target)
            else:
                state.target.unlink()
    for temp in work.temps.values():
        with contextlib.suppress(OSError):
            temp.unlink()
    for folder in reversed(work.made_dirs):
        with contextlib.suppress(OSError):
            folder.rmdir()

