"""MCP tools that read the skill registry and lint packets: the catalog's own query, the
registry's lookups and the composer's lint report, as ``/api/skills`` and
``/api/delegations/lint`` answer them."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from django.http import HttpRequest
from django.urls import reverse
from django_mcpz.server import ToolError

from delegations.interop.mcp.server import about, server
from delegations.runs.lint import lint_as_run
from skills.models import Skill

FIND_LIMIT = 25


class FindSkillsParams(msgspec.Struct, forbid_unknown_fields=True):
    text: Annotated[str, about("Words that must all appear in a skill's name, description or "
                               "tags; empty lists every skill.")] = ""
    tag: Annotated[str, about("Only skills with this tag, e.g. classification.")] = ""
    capability: Annotated[str, about("Only skills that use this capability, e.g. "
                                     "network_outbound or fs_read.")] = ""


class DescribeSkillParams(msgspec.Struct, forbid_unknown_fields=True):
    name: Annotated[str, about("The skill's name, e.g. review-sentiment.")]
    version: Annotated[str, about("A version such as 1.1.0; empty for the latest.")] = ""


class LintPacketParams(msgspec.Struct, forbid_unknown_fields=True):
    packet: Annotated[dict[str, Any] | str, about(
        "The hand-off packet, as a JSON object or JSON text, in any dialect Handoff reads.")]


def skill_summary(request: HttpRequest, skill: Skill) -> dict[str, Any]:
    return {"name": skill.name, "version": skill.version, "ref": skill.ref,
            "description": skill.description, "tags": skill.tags,
            "capabilities": skill.capabilities,
            "approval_capabilities": skill.approval_capabilities,
            "page_url": request.build_absolute_uri(skill.get_absolute_url())}


@server.tool(
    title="Find skills",
    description=(
        "Search Handoff's catalog of skills (ready-made subagent jobs, such as classifying a "
        "review or researching a price). Every word of `text` must appear in a skill's name, "
        "description or tags; `tag` and `capability` (e.g. network_outbound) narrow further. "
        "Returns at most 25 latest versions with their `ref` (name@version) to pass to "
        "describe_skill or start_run. Capabilities listed in approval_capabilities make a "
        "person approve each use in Handoff's inbox."),
    read_only=True, open_world=False)
def find_skills(request: HttpRequest, params: FindSkillsParams) -> dict[str, Any]:
    rows = Skill.objects.catalog(q=params.text[:200], tag=params.tag[:100],
                                 capability=params.capability[:100])
    page = rows.paginate(1, FIND_LIMIT, clamp=False)
    return {"skills": [skill_summary(request, skill) for skill in page.object_list],
            "total": page.paginator.count}


@server.tool(
    title="Describe a skill",
    description=(
        "Everything needed to run one skill: its versions, the JSON Schema its `input` must "
        "satisfy, the schema of what it returns, its capabilities (which of them wait for a "
        "person's approval) and worked examples of input and output. `version` empty: the "
        "latest."),
    read_only=True, open_world=False)
def describe_skill(request: HttpRequest, params: DescribeSkillParams) -> dict[str, Any]:
    ref = f"{params.name}@{params.version}" if params.version else params.name
    skill = Skill.objects.resolve(ref)
    if skill is None:
        known = [row.version for row in Skill.objects.versions_of(params.name)]
        hint = (f"it has {', '.join(known[:10])}" if known
                else "find_skills lists the skills there are")
        raise ToolError(f"No skill {ref} in the registry; {hint}.")
    manifest = skill.manifest or {}
    return {
        **skill_summary(request, skill),
        "subagent_type": skill.subagent_type or None,
        "versions": [row.version for row in Skill.objects.versions_of(skill.name)],
        "input_schema": skill.input_schema, "output_schema": skill.output_schema,
        "requires_approval": skill.requires_approval,
        "success_criteria": manifest.get("success_criteria") or [],
        "examples": manifest.get("examples") or [],
        "manifest_url": request.build_absolute_uri(
            reverse("api:skill_manifest", args=[skill.name, skill.version])),
    }


@server.tool(
    title="Lint a delegation packet",
    description=(
        "Check a hand-off packet (a delegation: goal, inputs, expected output, budget, "
        "capabilities, success criteria) before running it, in any dialect Handoff reads "
        "(its canonical form, a delegate_task call, a HandoffPackage, a delegation contract, "
        "a sessions_spawn call), as a JSON object or JSON text. Returns every finding with its "
        "field, severity (error, warning, info) and message, and `runnable`: false when an "
        "error would block start_run. Nothing is run or saved."),
    read_only=True, open_world=False, idempotent=True)
def lint_packet(request: HttpRequest, params: LintPacketParams) -> dict[str, Any]:
    report = lint_as_run(params.packet)
    return {"runnable": report.runnable, "errors": report.errors,
            "problems": report.problems, "findings": report.findings,
            "review_depth": report.review_depth, "blocked_because": report.blocked_because}
