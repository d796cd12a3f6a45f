"""Tool dispatch: a model's tool call run in its run's scope.

Every capability tool is checked against the run's capability token first; a call out of
scope is refused (ERR_CONSTRAINT_VIOLATION, recorded as a failed tool result and an
``error`` event). Approval-required capabilities go through the gate, and
``request_capability`` asks a person for one the run lacks (never beyond its parent's).

A failed call is reported to the model with its error; a failed call that repeats an
earlier failed one exactly (same tool, same arguments) also gets a ``hint`` saying so,
since a small model otherwise tries the same thing until its turns run out.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from ..a2a_subagents import RemoteAgents
from ..adapters.base import ToolCall
from ..approvals import ApprovalDecision, ApprovalKind, RunParked
from ..capabilities import CAPABILITY_DESCRIPTIONS, KNOWN_CAPABILITIES, verify_token
from ..errors import ErrorCode, ProtocolError, internal_error_message
from ..events import EventType
from ..mcp_client import McpTools, is_mcp_tool
from ..tools import REQUEST_CAPABILITY, RUNTIME_TOOLS, RuntimeTool, ToolContext
from .acceptance import grant
from .prompt import failure_text
from .questions import Questions, awaits_decision
from .reporting import Reporter
from .settings import RunnerSettings
from .state import ActiveRun

logger = logging.getLogger(__name__)

_TOOL_CALL = EventType.TOOL_CALL.value
_TOOL_RESULT = EventType.TOOL_RESULT.value
_ERROR = EventType.ERROR.value
_LOG = EventType.LOG.value

_HIGH_RISK = frozenset({"file_delete", "financial_tx"})
# Tools whose effect must not happen twice (a file written or deleted, a command run). Just
# before one runs, the checkpoint records it as interrupted: if the worker dies before its
# result is saved, the resumed run reports the call as unknown instead of running it again.
_EFFECTFUL = frozenset({"fs_write", "file_delete", "subprocess_exec"})


def interrupted_record(name: str) -> dict[str, Any]:
    return {"name": name, "ok": False, "interrupted": True, "error": {
        "code": ErrorCode.WORKER_LOST.value,
        "message": f"The worker running {name} stopped before its outcome was recorded, so it "
                   f"was not run again: it may or may not have taken effect. Check (read the "
                   f"file, list the folder) before trying it again."}}


class ToolCalls:
    """Runs the tool calls of a run's turn (all but ``yield_control`` and ``delegate_task``)."""

    def __init__(self, settings: RunnerSettings, reporter: Reporter, questions: Questions,
                 mcp: McpTools | None = None, remote: RemoteAgents | None = None) -> None:
        self.settings = settings
        self.reporter = reporter
        self.questions = questions
        self.mcp = mcp
        self.remote = remote

    async def run(self, run: ActiveRun, call: ToolCall) -> None:
        """Run ``call`` and record its result in the turn (checkpointed before it is reported).
        A tool that fails gives a failed result, never an exception."""
        turn = run.chat.turn
        assert turn is not None
        emit = self.reporter.emit
        if not run.attempts.asked or not awaits_decision(run, call.id):
            await emit(run.run_id, _TOOL_CALL, {"id": call.id, "name": call.name, "arguments": call.arguments})
        scope_error = False
        try:
            result = await self._dispatch(run, call)
            record: dict[str, Any] = {"name": call.name, "ok": True, "result": result}
        except ProtocolError as exc:
            record = {"name": call.name, "ok": False, "error": exc.as_dict()}
            scope_error = exc.code is ErrorCode.CONSTRAINT_VIOLATION and not exc.details.get("refused_by_person")
        except (RunParked, asyncio.CancelledError):
            raise
        except Exception:
            logger.exception("tool %s failed in run %s", call.name, run.run_id)
            record = {"name": call.name, "ok": False, "error": {
                "code": ErrorCode.TOOL_FAILURE.value,
                "message": internal_error_message(f"Tool {call.name}", run.run_id)}}
        if not record["ok"]:
            earlier = earlier_failure(run, call)
            if earlier is not None:
                record["hint"] = (f"You already tried this exact call; it failed because {earlier}; "
                                  f"try something else or call yield_control.")
        turn.completed[call.id] = record
        await self.reporter.save(run)
        await emit(run.run_id, _TOOL_RESULT, {"id": call.id, **record})
        if scope_error:
            await emit(run.run_id, _ERROR, {**record["error"], "tool": call.name, "call_id": call.id})

    async def report_interrupted(self, run: ActiveRun, calls: list[ToolCall]) -> None:
        """On resume: a call that was running when its worker died (see _EFFECTFUL) gets its
        ``tool_result`` now, failed with ERR_WORKER_LOST, and is not run again."""
        turn = run.chat.turn
        assert turn is not None
        for call in calls:
            record = turn.completed.get(call.id)
            if record is None or not record.get("interrupted"):
                continue
            # a new dict: the stored checkpoint may hold the old one
            settled = {key: value for key, value in record.items() if key != "interrupted"}
            turn.completed[call.id] = settled
            await self.reporter.save(run)
            await self.reporter.emit(run.run_id, _TOOL_RESULT, {"id": call.id, **settled})

    async def _dispatch(self, run: ActiveRun, call: ToolCall) -> dict[str, Any]:
        if call.name == REQUEST_CAPABILITY:
            return await self._request_capability(run, call)
        tool = self._tool(call.name)
        if tool is None:
            offered = ", ".join(schema["name"] for schema in run.scope.tools)
            raise ProtocolError(ErrorCode.CONSTRAINT_VIOLATION,
                                f"There is no tool '{call.name}' for this run. Tools offered: {offered}.")
        settings = self.settings
        verify_token(settings.token_key, run.scope.token, capability=tool.capability)
        if tool.capability == "subprocess_exec" and not settings.subprocess_enabled:
            raise ProtocolError(ErrorCode.CONSTRAINT_VIOLATION,
                                "run_command is switched off on this server (subprocess_enabled).")
        arguments = call.arguments
        if tool.capability in run.scope.approval_required:
            arguments = await self.approve(run, call, tool.capability)
        context = ToolContext(
            workspace=Path(run.workspace), read_max_bytes=settings.read_max_bytes,
            http_max_bytes=settings.http_max_bytes, http_timeout_s=settings.http_timeout_s,
            command_timeout_s=settings.command_timeout_s)
        if tool.capability in _EFFECTFUL or is_mcp_tool(tool.name):
            # an MCP tool's effects are unknown: it is not run twice either
            turn = run.chat.turn
            assert turn is not None
            turn.completed[call.id] = interrupted_record(call.name)  # replaced by the result
            await self.reporter.save(run)
        return await tool.run(context, arguments)

    def _tool(self, name: str) -> RuntimeTool | None:
        tool = RUNTIME_TOOLS.get(name)
        if tool is None and self.mcp is not None:
            tool = self.mcp.get(name)
        return tool

    async def approve(self, run: ActiveRun, call: ToolCall, capability: str, action: str = "") -> dict[str, Any]:
        """The arguments a person let ``call`` run with (their edit, else the model's), or
        ERR_CONSTRAINT_VIOLATION carrying their comment. A tool a person allowed for the
        rest of the run (or of an ancestor) runs without asking; that is logged. ``action``
        says what the call does in the item's title (by default, the tool's name)."""
        allowed_by = run.always_allowed_by(call.name)
        if allowed_by is not None:
            await self.reporter.emit(run.run_id, _LOG, {
                "level": "info", "tool": call.name, "call_id": call.id, "always_allowed_by": allowed_by,
                "message": f"{call.name} runs without asking: {allowed_by} allowed it for the rest "
                           f"of the run and its subagents."})
            return call.arguments
        decision = await self.questions.ask(
            run, ApprovalKind.CAPABILITY, call.id,
            f"{run.asker} wants to {action or call.name} ({capability})",
            {"tool": call.name, "capability": capability, "arguments": call.arguments,
             "call_id": call.id, "description": CAPABILITY_DESCRIPTIONS.get(capability, "")},
            "high" if capability in _HIGH_RISK else "medium")
        _raise_unless_allowed(decision)
        if decision.always_allow:
            run.scope.always_allowed[call.name] = decision.decided_by or "a person"
        return decision.edited_arguments if decision.edited_arguments is not None else call.arguments

    async def _request_capability(self, run: ActiveRun, call: ToolCall) -> dict[str, Any]:
        capability = call.arguments.get("capability")
        reason = call.arguments.get("reason", "")
        if not isinstance(capability, str) or capability not in KNOWN_CAPABILITIES:
            raise ProtocolError(ErrorCode.CONSTRAINT_VIOLATION,
                                f"Unknown capability {capability!r}; known: {', '.join(sorted(KNOWN_CAPABILITIES))}.")
        scope = run.scope
        if capability in scope.capabilities:
            return {"capability": capability, "granted": True, "note": "already in scope"}
        ceiling = run.parent.scope.capabilities if run.parent is not None else scope.ceiling
        if ceiling is not None and capability not in ceiling:
            raise ProtocolError(
                ErrorCode.CONSTRAINT_VIOLATION,
                f"Capability '{capability}' is outside the parent's scope; capabilities only "
                f"shrink down the delegation chain, so it cannot be granted here.")
        decision = await self.questions.ask(
            run, ApprovalKind.CAPABILITY_REQUEST, call.id,
            f"{run.asker} asks for capability {capability}",
            {"capability": capability, "reason": reason, "call_id": call.id,
             "description": CAPABILITY_DESCRIPTIONS.get(capability, "")},
            "high" if capability in _HIGH_RISK else "medium")
        _raise_unless_allowed(decision)
        scope.capabilities = [*scope.capabilities, capability]
        grant(run, self.settings, self.mcp, self.remote)
        granted_tools = [tool.name for tool in RUNTIME_TOOLS.values() if tool.capability == capability]
        if self.mcp is not None:
            granted_tools += self.mcp.names(capability)
        if self.remote is not None:
            granted_tools += self.remote.names(capability)
        return {"capability": capability, "granted": True, "tools": granted_tools}


def earlier_failure(run: ActiveRun, call: ToolCall) -> str | None:
    """Why an earlier call of the run with the same tool and arguments as ``call`` failed,
    else None. Read only when a call fails."""
    chat = run.chat
    turn = chat.turn
    if turn is not None:    # the turn in hand: its calls are not in the conversation yet
        for earlier in turn.calls:
            record = turn.completed.get(earlier.id)
            if (record is not None and not record["ok"] and earlier.id != call.id
                    and earlier.name == call.name and earlier.arguments == call.arguments):
                return failure_text(record)
    calls: dict[Any, tuple[Any, Any]] = {}     # call id -> (tool, arguments)
    for message in chat.messages:
        if message.get("role") == "assistant":
            for made in message.get("tool_calls") or ():
                calls[made.get("id")] = (made.get("name"), made.get("arguments"))
        elif "failure" in message and calls.get(message.get("tool_call_id")) == (call.name, call.arguments):
            return str(message["failure"])
    return None


def _raise_unless_allowed(decision: ApprovalDecision) -> None:
    if not decision.allows:
        raise ProtocolError(ErrorCode.CONSTRAINT_VIOLATION,
                            f"Refused by a person: {decision.comment or 'no reason given'}.",
                            details={"refused_by_person": True})
