"""One ``run_skill.<name>`` tool per published skill, whose hints follow what a run of it may
do: read-only when the skill has no capability that changes anything, destructive when it
may write, delete, run commands or move money, open-world when it reaches the network or a
search. Its input schema is the skill's own, so a client checks the input before calling.
A call is start_run of that skill's latest version, through the same code.

The list follows the registry (the server's tools/list asks :func:`definitions` on every
call): a newly imported skill is a tool as soon as the client lists the tools again.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django_mcpz.server import ToolError

from delegations.interop.mcp.run_tools import StartRunParams, start_run
from skills.models import Skill

PREFIX = "run_skill."
LISTED = 200
CHANGES = frozenset({"fs_write", "file_delete", "subprocess_exec", "financial_tx"})
REACHES_OUT = frozenset({"network_outbound", "search"})
HARMLESS = frozenset({"fs_read", "ast_parsing", "compute"})
ARGUMENTS = ("input", "budget", "adapter", "adapter_config", "idempotency_key")


def _hints(capabilities: list[str]) -> dict[str, bool]:
    granted = set(capabilities)
    return {"readOnlyHint": granted <= HARMLESS, "destructiveHint": bool(granted & CHANGES),
            "idempotentHint": True, "openWorldHint": bool(granted & REACHES_OUT)}


def _definition(skill: Skill) -> dict[str, Any]:
    asks = f" Each use of {', '.join(skill.approval_capabilities)} waits for a person's approval " \
           "in Handoff's inbox." if skill.approval_capabilities else ""
    return {
        "name": f"{PREFIX}{skill.name}",
        "title": f"Run the skill {skill.name}",
        "description": (f"Start a Handoff run of the skill {skill.ref}: {skill.description} "
                        f"Returns at once with run_id and page_url, as start_run does; follow it "
                        f"with wait_for_run.{asks}"),
        "inputSchema": {"type": "object", "additionalProperties": False, "required": ["input"],
                        "properties": {
                            "input": skill.input_schema or {"type": "object"},
                            "budget": {"type": "object", "description": "Limits for the run, e.g. "
                                       "{\"max_model_calls\": 10, \"max_tokens\": 20000}."},
                            "adapter": {"type": "string", "description": "local, openai, anthropic "
                                        "or scripted; empty for the server's default."},
                            "adapter_config": {"type": "object", "description": "The adapter's "
                                               "settings; keys and hosts come from the server."},
                            "idempotency_key": {"type": "string", "description": "Calling again "
                                                "with the same key returns the same run."}}},
        "annotations": _hints(skill.capabilities),
    }


def definitions(request: HttpRequest) -> list[dict[str, Any]]:
    skills = Skill.objects.latest_versions().order_by("name")[:LISTED]
    return [_definition(skill) for skill in skills]


def handles(name: str) -> bool:
    return name.startswith(PREFIX)


def call(request: HttpRequest, name: str, arguments: dict[str, Any]) -> Any:
    unknown = sorted(set(arguments) - set(ARGUMENTS))
    if unknown:
        raise ToolError(f"Invalid arguments: unknown {', '.join(unknown)}; this tool takes "
                        f"{', '.join(ARGUMENTS)}.")
    for key in ("input", "budget", "adapter_config"):
        if arguments.get(key) is not None and not isinstance(arguments[key], dict):
            raise ToolError(f"`{key}` must be an object.")
    return start_run(request, StartRunParams(
        skill=name[len(PREFIX):], input=arguments.get("input") or {}, budget=arguments.get("budget"),
        adapter=str(arguments.get("adapter") or ""), adapter_config=arguments.get("adapter_config"),
        idempotency_key=str(arguments.get("idempotency_key") or "")))
