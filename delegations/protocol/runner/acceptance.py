"""Acceptance: the scope a run gets, and whether its delegation is refused.

Functions of a packet and what its parent (or host) has, with no events and no I/O: a
skill's defaults merged in, budget and capabilities narrowed to the parent's (a child
never gets more than its parent has left), lint errors and a bad ``input_data`` turned
into the rejection, the run's limits settled, its token and tools granted. The
orchestrator calls them and reports what they decide.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..budgets import Budget, narrow
from ..capabilities import APPROVAL_REQUIRED_CAPABILITIES, issue_token, narrow_capabilities
from ..criteria import CriterionKind, readable_criteria
from ..errors import ErrorCode, Issue, ProtocolError
from ..lint import Finding, Severity, rejection_message
from ..packet import HandoffPacket, SubagentType, parse_packet
from ..tools import DELEGATE_TASK, offered_tools
from .settings import RunnerSettings
from .state import ActiveRun, Clock, Scope

if TYPE_CHECKING:
    from ..a2a_subagents import RemoteAgents
    from ..manifest import SkillManifest
    from ..mcp_client import McpTools

# the host's skill lookup: the manifest of ``name@version`` (or ``name``, for its latest),
# None when the registry has no such skill; a ProtocolError when it has one that cannot run
# (its message is the rejection)
SkillResolver = Callable[[str], Awaitable["SkillManifest | None"]]

# lint codes that mean "asks for more than the parent has" (narrowed unless lint says error)
_SCOPE_CODES = frozenset({"BUDGET_EXCEEDS_PARENT", "CAPABILITY_EXCEEDS_PARENT", "DEPTH_LIMIT_EXCEEDED"})


def merge_skill(packet: HandoffPacket, skill: SkillManifest) -> HandoffPacket:
    """The packet with the skill's instructions, output schema and capabilities as defaults,
    the skill's success criteria added to its own (they always apply), and its ``skill``
    pinned to the exact ``name@version`` that runs (the run's record then says which
    version that was, even when the delegation named the skill alone)."""
    update: dict[str, Any] = {}
    added = [c for c in getattr(skill, "success_criteria", None) or [] if c not in packet.success_criteria]
    if added:
        update["success_criteria"] = [*packet.success_criteria, *added]
    if packet.skill != skill.ref:
        update["skill"] = skill.ref
    instructions = getattr(skill, "instructions", None)
    if not packet.instruction_set and instructions:
        update["instruction_set"] = instructions
    if packet.expected_output_schema is None and getattr(skill, "output_schema", None):
        update["expected_output_schema"] = skill.output_schema
    if not packet.capabilities and getattr(skill, "capabilities", None):
        update["capabilities"] = list(skill.capabilities)
    kind = getattr(skill, "subagent_type", None)
    if packet.subagent_type is None and isinstance(kind, str):
        with contextlib.suppress(ValueError):
            update["subagent_type"] = SubagentType(kind)
    return packet.model_copy(update=update) if update else packet


# A verifier's verdict is the label its whole job is: a PASS the model is unsure of goes to
# a person (criteria kind ``confident``) instead of reading as checked.
VERIFIER_CONFIDENCE = 0.7


def with_role_criteria(packet: HandoffPacket) -> HandoffPacket:
    """The packet with the criteria its role always carries: a verifier whose output has a
    ``verdict`` label is held to choosing it with a probability of at least
    :data:`VERIFIER_CONFIDENCE` (unless a criterion of its own already names the verdict's
    confidence)."""
    if packet.subagent_type is not SubagentType.VERIFIER:
        return packet
    properties = (packet.expected_output_schema or {}).get("properties") or {}
    verdict = properties.get("verdict") if isinstance(properties, dict) else None
    if not isinstance(verdict, dict) or not isinstance(verdict.get("enum"), list):
        return packet
    if any(criterion.kind is CriterionKind.CONFIDENT and criterion.field_path == "verdict"
           for criterion in readable_criteria(packet.success_criteria)):
        return packet
    criterion = {"kind": "confident", "path": "verdict", "min": VERIFIER_CONFIDENCE}
    return packet.model_copy(update={"success_criteria": [*packet.success_criteria, criterion]})


def approval_required(base: frozenset[str], skill: SkillManifest | None) -> frozenset[str]:
    """The capabilities whose every use waits for a person in a run: ``base`` (the
    deployment's set, or the parent's for a child) plus, for a skill that requires
    approval, its approval-class capabilities, which a deployment cannot switch off."""
    if skill is None or not skill.requires_approval:
        return base
    return base | (frozenset(skill.capabilities) & APPROVAL_REQUIRED_CAPABILITIES)


def root_scope(packet: HandoffPacket, skill: SkillManifest | None, *,
               parent_packet: HandoffPacket | None, parent_budget: Budget | None,
               parent_capabilities: list[str] | None) -> Scope:
    """A root run's scope: its packet (with its skill merged), bounded by what a host
    starting it on behalf of an existing run says that run has."""
    if skill is not None:
        packet = merge_skill(packet, skill)
    budget_cap = parent_budget if parent_budget is not None else (
        parent_packet.budget if parent_packet is not None else None)
    caps_cap = parent_capabilities if parent_capabilities is not None else (
        list(parent_packet.capabilities) if parent_packet is not None else None)
    scope = Scope(
        packet=packet, skill=skill,
        budget=narrow(packet.budget, budget_cap) if budget_cap is not None else packet.budget,
        capabilities=(narrow_capabilities(packet.capabilities, caps_cap) if caps_cap is not None
                      else list(dict.fromkeys(packet.capabilities))),
        ceiling=list(caps_cap) if caps_cap is not None else None)
    if parent_packet is not None or budget_cap is not None or caps_cap is not None:
        base = parent_packet if parent_packet is not None else HandoffPacket()
        scope.parent_view = base.model_copy(update={
            "budget": budget_cap if budget_cap is not None else base.budget,
            "capabilities": caps_cap if caps_cap is not None else list(base.capabilities),
            "depth": max(0, packet.depth - 1)})
    return scope


def child_scope(arguments: dict[str, Any], parent: Scope, *, depth: int, label: str,
                available: Budget, view: HandoffPacket) -> tuple[Scope, str | None]:
    """A ``delegate_task`` call's scope, and the agent id its session key names.

    The child inherits ``allow_nested``, ``max_depth`` and (unless the arguments name
    ``capabilities``) the parent's capabilities; lint judges what was asked for, the run
    gets it narrowed to ``available`` (what the parent has left). Arguments that are not a
    packet give a scope carrying the rejection.
    """
    assert parent.packet is not None
    planned = parent.packet.planned_child(arguments.get("label"))
    if planned is not None:
        arguments = planned_arguments(planned, arguments)
    try:
        requested = parse_packet(arguments)
    except ProtocolError as exc:
        return Scope(reject=exc, budget=available, capabilities=list(parent.capabilities)), parent.packet.agent_id
    explicit = {"capabilities", "allow_nested", "allowNested"} & arguments.keys()
    update: dict[str, Any] = {
        "depth": depth,
        "max_depth": min(requested.max_depth, parent.max_depth),
        "label": requested.label or label,
        "agent_id": requested.agent_id or parent.packet.agent_id,
    }
    if not explicit & {"allow_nested", "allowNested"}:
        update["allow_nested"] = parent.packet.allow_nested
    if "capabilities" not in explicit:
        update["capabilities"] = list(parent.capabilities)
    requested = requested.model_copy(update=update)
    budget = narrow(requested.budget, available)
    capabilities = narrow_capabilities(requested.capabilities, parent.capabilities)
    packet = requested.model_copy(update={"budget": budget, "capabilities": list(capabilities)})
    scope = Scope(packet=packet, requested=requested, parent_view=view, budget=budget,
                  capabilities=capabilities)
    return scope, requested.agent_id


def planned_arguments(planned: HandoffPacket, arguments: dict[str, Any]) -> dict[str, Any]:
    """A ``delegate_task`` call naming a planned child by its label: the composed packet,
    with the ``input_data`` the parent's model adds. The model may add inputs; the
    contract, budget and capabilities stay as composed (and are narrowed like any child's)."""
    composed = planned.to_dict()
    added = arguments.get("input_data")
    if isinstance(added, dict) and added:
        composed["input_data"] = {**planned.input_data, **added}
    return composed


def input_issues(skill: SkillManifest | None, packet: HandoffPacket) -> list[Issue]:
    """Where ``input_data`` breaks the skill's ``input_schema`` (none without a schema)."""
    return skill.input_issues(packet.input_data) if skill is not None else []


def rejection(findings: list[Finding], issues: list[Issue]) -> dict[str, Any] | None:
    """The error that refuses the delegation: its lint errors (a scope error when one asks
    for more than the parent has), else the ``input_data`` issues; None when accepted."""
    errors = [finding for finding in findings if finding.severity == Severity.ERROR]
    if errors:
        scope = any(finding.code in _SCOPE_CODES for finding in errors)
        return {"code": (ErrorCode.CONSTRAINT_VIOLATION if scope else ErrorCode.INVALID_PACKET).value,
                "message": rejection_message(errors)}
    if issues:
        return {"code": ErrorCode.INVALID_PACKET.value,
                "message": f"input_data does not match the skill's input_schema: "
                           f"{issues[0].field}: {issues[0].message}",
                "issues": [issue.as_dict() for issue in issues]}
    return None


def settle_limits(scope: Scope, clock: Clock, *, depth: int, default_timeout_s: float) -> None:
    """Fix the accepted run's limits: iterations (the packet's, capped by its budget), its
    timeout (``timeout_s``, else the budget's runtime, else the default) and whether it may
    delegate: below ``max_depth``, the root run, the coordinator, always may, unless it runs
    a skill (a specialist, like a child, delegates only with ``allow_nested``: offered
    ``delegate_task`` it does not need, SmolLM2-135M handed price research to a "coder").
    A run whose packet plans children may always delegate to them: the tree runs as drawn."""
    packet = scope.packet
    assert packet is not None
    limit = scope.budget.max_iterations
    scope.max_iterations = packet.max_iterations if limit is None else min(packet.max_iterations, limit)
    clock.timeout_s = packet.timeout_s or scope.budget.max_runtime_s or default_timeout_s
    coordinator = depth == 0 and not packet.skill
    scope.can_delegate = ((coordinator or packet.allow_nested or bool(packet.planned_children))
                          and depth < scope.max_depth)


def grant(run: ActiveRun, settings: RunnerSettings, mcp: McpTools | None = None,
          remote: RemoteAgents | None = None) -> None:
    """Issue the run's capability token (expiring with its deadline) and the tools it is
    offered: the runner's, then the MCP servers' tools and, to a run that may delegate, the
    remote agents' skills its capabilities cover."""
    seconds_left = run.clock.deadline - asyncio.get_running_loop().time()
    scope = run.scope
    scope.token = issue_token(
        settings.token_key, run_id=run.run_id, capabilities=scope.capabilities,
        expires_at=time.time() + max(seconds_left, 0.0) + 1.0,
        parent_run_id=run.parent.run_id if run.parent is not None else None)
    tools = offered_tools(scope.capabilities, can_delegate=scope.can_delegate,
                          subprocess_enabled=settings.subprocess_enabled,
                          output_schema=scope.packet.expected_output_schema if scope.packet else None)
    if mcp is not None:
        tools = [*tools, *mcp.schemas(scope.capabilities)]
    if remote is not None and scope.can_delegate:    # a remote skill runs as a subagent
        tools = [*tools, *remote.schemas(scope.capabilities)]
    planned = scope.packet.planned_children if scope.packet is not None else []
    scope.tools = tools if not planned else [
        with_planned_children(tool, planned) if tool["name"] == DELEGATE_TASK else tool for tool in tools]


def with_planned_children(tool: dict[str, Any], planned: list[HandoffPacket]) -> dict[str, Any]:
    """``delegate_task`` whose description names the planned children a call can start by label."""
    names = "; ".join(f"{child.label} ({child.subagent_type.value if child.subagent_type else 'any role'}): "
                      f"{child.goal or child.instruction_set or 'no goal given'}" for child in planned)
    return {**tool, "description": f"{tool.get('description', '')} Planned subagents, started by "
                                   f"naming their label: {names}."}
