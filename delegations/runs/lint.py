"""Lint a packet as it will run: what run creation, the composer, its lint panel and
``POST /api/delegations/lint`` all ask.

One function, :func:`lint_as_run`: the packet is read in any dialect the parsers accept,
the skill it names is looked up as a run looks it up (``Skill.objects.for_run``) and
merged in as the runner merges it (``merge_skill``: instructions, schemas, capabilities,
its version pinned), and the protocol's lint runs with the limits the worker's runner
applies (:func:`~delegations.runs.runner_setup.runner_settings`), so that a packet it
passes is one the runner accepts, and one it refuses is refused with the runner's words.
Nothing is raised for user input: a packet that does not parse, a skill that does not
exist and input that breaks the skill's ``input_schema`` come back as ``problems``
(field, message), beside lint's ``findings``; either kind with an error blocks a run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from delegations.models import RemoteAgent
from delegations.protocol.a2a_subagents import capability_problem, parse_remote_ref
from delegations.protocol.errors import ErrorCode, ProtocolError
from delegations.protocol.lint import Severity, lint_packet, review_depth_reason
from delegations.protocol.packet import HandoffPacket, parse_packet
from delegations.protocol.runner.acceptance import approval_required, merge_skill
from delegations.runs.runner_setup import runner_settings
from skills.models import Skill


@dataclass(frozen=True, slots=True)
class LintReport:
    findings: list[dict[str, str]] = field(default_factory=list)   # lint: code, severity, field, message
    problems: list[dict[str, str]] = field(default_factory=list)   # parse / skill / input: field, message
    review_depth: str | None = None
    review_depth_reason: str | None = None
    packet: dict[str, Any] | None = None    # the canonical packet (skill merged) when it parses
    # for callers that go on to run it: the same packet parsed, and why it cannot be used
    # at all (it does not parse, or the registry refuses its skill), as the error to raise
    parsed: HandoffPacket | None = field(default=None, compare=False, repr=False)
    refusal: ProtocolError | None = field(default=None, compare=False, repr=False)

    @property
    def errors(self) -> int:
        return len(self.problems) + sum(f["severity"] == Severity.ERROR for f in self.findings)

    @property
    def runnable(self) -> bool:
        return self.packet is not None and self.errors == 0

    @property
    def error_findings(self) -> list[dict[str, str]]:
        return [finding for finding in self.findings if finding["severity"] == Severity.ERROR]

    @property
    def blocked_because(self) -> str:
        """Why the packet cannot run yet, in one sentence ("" when it can)."""
        if self.runnable:
            return ""
        first = self.problems[0] if self.problems else self.error_findings[0]
        more = f" (and {self.errors - 1} more)" if self.errors > 1 else ""
        return f"Fix {first['field'] or 'the packet'} first: {first['message']}{more}"

    def as_dict(self) -> dict[str, Any]:
        return {"findings": self.findings, "problems": self.problems,
                "review_depth": self.review_depth, "review_depth_reason": self.review_depth_reason,
                "errors": self.errors, "runnable": self.runnable, "packet": self.packet}


def _issues(exc: ProtocolError, default_field: str) -> list[dict[str, str]]:
    if exc.issues:
        return [{"field": issue.field or default_field, "message": issue.message} for issue in exc.issues]
    return [{"field": default_field, "message": exc.message}]


def _remote_skill_problems(packet: HandoffPacket) -> tuple[list[dict[str, str]], ProtocolError | None]:
    """A remote agent's skill (``<agent>/<skill>``) runs when an enabled agent offers it and
    the packet holds the agent's capability, as the runner checks."""
    ref = packet.skill or ""
    agent = RemoteAgent.objects.offering(ref)
    problem = capability_problem(ref, agent.capability, packet.capabilities) if agent is not None else None
    if agent is None:
        refusal = ProtocolError(ErrorCode.INVALID_PACKET, (
            f"No enabled remote agent offers '{ref}'. Name a remote skill as <agent>/<skill>, "
            f"with an agent and skill listed at /api/remote-agents."))
    elif problem is not None:
        refusal = ProtocolError(ErrorCode.CONSTRAINT_VIOLATION, problem)
    else:
        return [], None
    return _issues(refusal, "skill"), refusal


def lint_as_run(data: dict[str, Any] | str | HandoffPacket, *,
                parent: HandoffPacket | dict[str, Any] | None = None) -> LintReport:
    """Lint ``data`` (a packet as JSON text, a dict or parsed) as the runner will judge it,
    with ``parent`` (for a child in a tree) enabling the checks that compare the two."""
    try:
        packet = parse_packet(data)    # a HandoffPacket is taken as it is
    except ProtocolError as exc:
        return LintReport(problems=_issues(exc, "packet"), refusal=exc)
    settings = runner_settings()
    approval = settings.approval_required
    problems: list[dict[str, str]] = []
    refusal: ProtocolError | None = None
    input_schema: dict[str, Any] | None = None
    input_refused = False
    if parse_remote_ref(packet.skill):
        problems, refusal = _remote_skill_problems(packet)
    elif packet.skill:
        # the registry's own refusal: no such skill or version, its instruction file
        # missing, input that breaks its input_schema
        skill: Skill | None
        try:
            skill = Skill.objects.for_run(packet.skill, packet.input_data)
        except ProtocolError as exc:
            problems, refusal = _issues(exc, "skill"), exc
            # input the skill refuses is said once, above; the rest is linted as the skill
            # makes it (a blank form was told the criteria, schema and budget it brings were
            # missing)
            input_refused = bool(exc.issues) and all(issue.field.startswith("input_data") for issue in exc.issues)
            skill = Skill.objects.resolve(packet.skill) if input_refused else None
        if skill is not None:
            manifest = skill.to_manifest()
            packet = merge_skill(packet, manifest)
            approval = approval_required(approval, manifest)
            input_schema = None if input_refused else manifest.input_schema or None
    try:
        findings = lint_packet(packet, parent, max_depth=settings.max_depth,
                               approval_required=approval, input_schema=input_schema, **settings.lint_limits)
    except ProtocolError as exc:   # a parent that does not parse
        return LintReport(problems=problems + _issues(exc, "parent"), packet=packet.to_dict(),
                          parsed=packet, refusal=refusal or exc)
    if input_refused:   # what the input lacks is said by the skill's refusal, once
        findings = [finding for finding in findings if not finding.field.startswith("input_data")]
    depth, why = review_depth_reason(packet)
    return LintReport(findings=[finding.as_dict() for finding in findings], problems=problems,
                      review_depth=depth, review_depth_reason=why, packet=packet.to_dict(),
                      parsed=packet, refusal=refusal)
