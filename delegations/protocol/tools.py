"""The tools a run's model is offered, and their implementations.

Protocol tools, always handled by the runner itself: ``yield_control`` (finish),
``delegate_task`` (spawn a child; offered only where nesting is allowed) and
``request_capability`` (ask a person for a capability outside the run's scope).

Capability tools, one set per granted capability::

    fs_read           read_file, list_files
    fs_write          apply_edit   (a unified diff, or the hand-off protocol's
                                    Targeted Replace Blocks)
    file_delete       delete_file
    network_outbound  http_get     (httpx, timeout, size cap)
    subprocess_exec   run_command  (only when RunnerSettings.subprocess_enabled)

Every path is confined to the run's workspace folder: ``..``, absolute paths elsewhere and
symlinks that lead out are refused with ERR_CONSTRAINT_VIOLATION. The runner checks the
run's capability token before calling any of these; the functions here only do the work.
The protocol tools' schemas are ``tool_schemas.MODEL_TOOLS`` (the hand-off protocol's
definitions made valid JSON Schema); :func:`offered_tools` assembles and caches each
scope's list.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from . import json_text
from .errors import ErrorCode, ProtocolError
from .tool_schemas import MODEL_TOOLS, yield_control_for

# A model turn whose finish_reason is this asks the runner to finish the run with the
# results of the turn's delegate_task children, without another model call (a coordinator
# that only fans out; the scripted adapter's TURN "finish": "children").
FINISH_WITH_CHILDREN = "children"

YIELD_CONTROL = "yield_control"
DELEGATE_TASK = "delegate_task"
REQUEST_CAPABILITY = "request_capability"
PROTOCOL_TOOLS = frozenset({YIELD_CONTROL, DELEGATE_TASK, REQUEST_CAPABILITY})



@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool implementation may touch: the run's workspace and its limits."""

    workspace: Path
    read_max_bytes: int = 256_000
    list_max_entries: int = 1000
    http_max_bytes: int = 1_000_000
    http_timeout_s: float = 20.0
    command_timeout_s: float = 60.0
    command_max_bytes: int = 256_000


ToolFunction = Callable[[ToolContext, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class RuntimeTool:
    name: str
    capability: str
    schema: dict[str, Any]
    run: ToolFunction


# --- workspace confinement --------------------------------------------------------------

def confine(workspace: Path, path: object, *, field: str = "path") -> Path:
    """``path`` inside ``workspace`` (relative to it, or absolute within it), resolved.

    Symlinks are resolved first, so a link pointing out of the workspace is refused too.
    """
    if not isinstance(path, str) or not path.strip():
        raise ProtocolError(ErrorCode.CONSTRAINT_VIOLATION,
                            f"'{field}' must be a non-empty path inside the workspace.")
    root = workspace.resolve()
    candidate = Path(path)
    target = (candidate if candidate.is_absolute() else root / candidate).resolve()
    if target != root and not target.is_relative_to(root):
        raise ProtocolError(
            ErrorCode.CONSTRAINT_VIOLATION,
            f"'{path}' is outside the run's workspace; use a path relative to the workspace "
            f"(no '..', no absolute paths elsewhere, no links that lead out).",
            details={"path": path})
    return target


def _relative(workspace: Path, target: Path) -> str:
    return target.relative_to(workspace.resolve()).as_posix() or "."


def _argument(arguments: dict[str, Any], name: str, kind: type, default: Any = None) -> Any:
    value = arguments.get(name, default)
    if value is None or not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        expected = {str: "a string", int: "an integer", bool: "true or false",
                    list: "a list"}.get(kind, kind.__name__)
        raise ProtocolError(ErrorCode.TOOL_FAILURE, f"Argument '{name}' must be {expected}.",
                            details={"argument": name})
    return value


# --- fs_read ----------------------------------------------------------------------------

async def read_file(ctx: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    target = confine(ctx.workspace, arguments.get("path"))
    if not target.is_file():
        raise ProtocolError(ErrorCode.TOOL_FAILURE,
                            f"No file '{arguments['path']}' in the workspace (list_files shows what is there).")
    limit = min(int(arguments.get("max_bytes") or ctx.read_max_bytes), ctx.read_max_bytes)
    size = target.stat().st_size
    with target.open("rb") as handle:
        data = handle.read(limit)
    return {"path": _relative(ctx.workspace, target), "size": size, "truncated": size > limit,
            "content": data.decode("utf-8", errors="replace")}


async def list_files(ctx: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    target = confine(ctx.workspace, arguments.get("path") or ".")
    if not target.is_dir():
        raise ProtocolError(ErrorCode.TOOL_FAILURE, f"'{arguments.get('path')}' is not a folder in the workspace.")
    recursive = bool(arguments.get("recursive", False))
    root = ctx.workspace.resolve()
    entries: list[dict[str, Any]] = []
    found: Iterable[Path] = sorted(target.rglob("*") if recursive else target.iterdir())
    truncated = False
    for entry in found:
        if len(entries) >= ctx.list_max_entries:
            truncated = True
            break
        is_dir = entry.is_dir()
        entries.append({"path": entry.relative_to(root).as_posix(),
                        "type": "dir" if is_dir else "file",
                        "size": 0 if is_dir else entry.lstat().st_size})
    return {"path": _relative(ctx.workspace, target), "entries": entries, "truncated": truncated}


# --- fs_write / file_delete ---------------------------------------------------------------

async def apply_edit(ctx: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    from .edits import apply_edits, parse_edits

    text = _argument(arguments, "edit", str)
    ctx.workspace.mkdir(parents=True, exist_ok=True)
    # deletions go through delete_file, where each one waits for a person's approval
    outcomes = apply_edits(ctx.workspace, parse_edits(text), allow_delete=False)
    return {"files": [{"path": outcome.path, "created": outcome.created, "deleted": outcome.deleted,
                       "diff": outcome.diff} for outcome in outcomes]}


async def delete_file(ctx: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    target = confine(ctx.workspace, arguments.get("path"))
    if target == ctx.workspace.resolve():
        raise ProtocolError(ErrorCode.CONSTRAINT_VIOLATION, "The workspace folder itself cannot be deleted.")
    if not target.is_file() and not target.is_symlink():
        raise ProtocolError(ErrorCode.TOOL_FAILURE,
                            f"No file '{arguments['path']}' in the workspace (only files can be deleted).")
    target.unlink()
    return {"path": _relative(ctx.workspace, target), "deleted": True}


# --- network_outbound ---------------------------------------------------------------------

async def http_get(ctx: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    import httpx

    url = _argument(arguments, "url", str)
    if not url.startswith(("http://", "https://")):
        raise ProtocolError(ErrorCode.CONSTRAINT_VIOLATION, "http_get only fetches http:// and https:// URLs.")
    body = bytearray()
    truncated = False
    try:
        async with (httpx.AsyncClient(timeout=ctx.http_timeout_s, follow_redirects=True) as client,
                    client.stream("GET", url) as response):
            async for chunk in response.aiter_bytes():
                room = ctx.http_max_bytes - len(body)
                if len(chunk) > room:
                    body.extend(chunk[:room])
                    truncated = True
                    break
                body.extend(chunk)
            status, content_type = response.status_code, response.headers.get("content-type", "")
    except httpx.HTTPError as exc:
        raise ProtocolError(ErrorCode.TOOL_FAILURE, f"http_get {url} failed: {type(exc).__name__}: {exc}",
                            details={"url": url}) from None
    return {"url": url, "status": status, "content_type": content_type, "truncated": truncated,
            "body": body.decode("utf-8", errors="replace")}


# --- subprocess_exec ----------------------------------------------------------------------

async def run_command(ctx: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    argv = _argument(arguments, "argv", list)
    if not argv or not all(isinstance(part, str) for part in argv):
        raise ProtocolError(ErrorCode.TOOL_FAILURE, "Argument 'argv' must be a non-empty list of strings.")
    timeout = min(float(arguments.get("timeout_s") or ctx.command_timeout_s), ctx.command_timeout_s)
    ctx.workspace.mkdir(parents=True, exist_ok=True)
    try:
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=ctx.workspace, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(ctx.workspace)})
    except OSError as exc:
        raise ProtocolError(ErrorCode.TOOL_FAILURE, f"run_command could not start {argv[0]!r}: {exc}") from None
    timed_out = False
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        timed_out = True
        stdout, stderr = b"", b""
    finally:
        # a cancelled run (or a timeout) must not leave the process running unattributed
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
    result = {"argv": argv, "exit_code": process.returncode, "timed_out": timed_out,
              "stdout": stdout[:ctx.command_max_bytes].decode("utf-8", errors="replace"),
              "stderr": stderr[:ctx.command_max_bytes].decode("utf-8", errors="replace")}
    if timed_out or process.returncode != 0:
        reason = f"timed out after {timeout:g} s" if timed_out else f"exited with code {process.returncode}"
        raise ProtocolError(ErrorCode.TOOL_FAILURE, f"Command {argv[0]!r} {reason}.", details=result)
    return result


def _schema(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"name": name, "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required,
                           "additionalProperties": False}}


_PATH = {"type": "string", "description": "Path relative to the workspace folder."}

RUNTIME_TOOLS: dict[str, RuntimeTool] = {tool.name: tool for tool in (
    RuntimeTool("read_file", "fs_read", _schema(
        "read_file", "Read a text file from the workspace.",
        {"path": _PATH, "max_bytes": {"type": "integer", "minimum": 1}}, ["path"]), read_file),
    RuntimeTool("list_files", "fs_read", _schema(
        "list_files", "List the files and folders of a workspace folder.",
        {"path": _PATH, "recursive": {"type": "boolean"}}, []), list_files),
    RuntimeTool("apply_edit", "fs_write", _schema(
        "apply_edit", "Change workspace files with a unified diff, or with Targeted Replace Blocks "
        "(FILE: path / REPLACE_START / original / REPLACE_WITH / new / REPLACE_END). All or nothing.",
        {"edit": {"type": "string"}}, ["edit"]), apply_edit),
    RuntimeTool("delete_file", "file_delete", _schema(
        "delete_file", "Delete a file from the workspace (a person approves each deletion).",
        {"path": _PATH}, ["path"]), delete_file),
    RuntimeTool("http_get", "network_outbound", _schema(
        "http_get", "Fetch a URL with HTTP GET (text body, size-capped).",
        {"url": {"type": "string", "format": "uri"}}, ["url"]), http_get),
    RuntimeTool("run_command", "subprocess_exec", _schema(
        "run_command", "Run a program in the workspace folder (argv list, no shell).",
        {"argv": {"type": "array", "items": {"type": "string"}, "minItems": 1},
         "timeout_s": {"type": "number", "exclusiveMinimum": 0}}, ["argv"]), run_command),
)}

_offered: dict[tuple[frozenset[str], bool, bool], list[dict[str, Any]]] = {}


def offered_tools(capabilities: Iterable[str], *, can_delegate: bool, subprocess_enabled: bool,
                  output_schema: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The tool schemas a run is offered (cached: the same list object for the same scope
    and output schema; callers must not change it). ``output_schema``, the run's expected
    output schema, is carried by ``yield_control`` (:func:`yield_control_for`)."""
    caps = frozenset(capabilities)
    key = (caps, can_delegate, subprocess_enabled)
    tools = _offered.get(key)
    if tools is None:
        tools = [MODEL_TOOLS[YIELD_CONTROL], MODEL_TOOLS[REQUEST_CAPABILITY]]
        if can_delegate:
            tools.insert(1, MODEL_TOOLS[DELEGATE_TASK])
        for tool in RUNTIME_TOOLS.values():
            if tool.capability in caps and (tool.capability != "subprocess_exec" or subprocess_enabled):
                tools.append(tool.schema)
        _offered[key] = tools
    if not output_schema:
        return tools
    # key order kept: a constrained model writes properties in the order the schema lists
    return _with_output_schema(key, json_text.compact(output_schema))


@lru_cache(maxsize=256)
def _with_output_schema(key: tuple[frozenset[str], bool, bool], schema_json: str) -> list[dict[str, Any]]:
    narrowed = yield_control_for(json.loads(schema_json))
    return [narrowed if tool["name"] == YIELD_CONTROL else tool for tool in _offered[key]]
