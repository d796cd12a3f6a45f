"""What the composer, the lint panel and ``POST /api/delegations/lint`` say about a packet.

One function, :func:`lint_report`, for all three: the packet is read in any dialect the
parsers accept, the skill it names is merged in as the runner will merge it (its
instructions, schemas, capabilities), and the protocol's lint runs with the server's
limits. Nothing is raised for user input: a packet that does not parse, a skill that does
not exist and input that breaks the skill's ``input_schema`` come back as ``problems``
(field, message), beside lint's ``findings``; either kind with an error blocks a run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from delegations.protocol.errors import ProtocolError
from delegations.protocol.lint import Severity, lint_packet, review_depth_reason
from delegations.protocol.packet import HandoffPacket, parse_packet
from delegations.protocol.runner.acceptance import merge_skill
from skills.models import Skill


@dataclass(frozen=True, slots=True)
class LintReport:
    findings: list[dict[str, str]] = field(default_factory=list)   # lint: code, severity, field, message
    problems: list[dict[str, str]] = field(default_factory=list)   # parse / skill / input: field, message
    review_depth: str | None = None
    review_depth_reason: str | None = None
    packet: dict[str, Any] | None = None    # the canonical packet (skill merged) when it parses

    @property
    def errors(self) -> int:
        return len(self.problems) + sum(f["severity"] == Severity.ERROR for f in self.findings)

    @property
    def runnable(self) -> bool:
        return self.packet is not None and self.errors == 0

    @property
    def blocked_because(self) -> str:
        """Why the packet cannot run yet, in one sentence ("" when it can)."""
        if self.runnable:
            return ""
        first = self.problems[0] if self.problems else next(
            f for f in self.findings if f["severity"] == Severity.ERROR)
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


def lint_report(data: dict[str, Any] | str, *,
                parent: HandoffPacket | dict[str, Any] | None = None) -> LintReport:
    """Lint ``data`` (a packet as JSON text or a dict) as the runner would judge it, with
    ``parent`` (for a child in a tree) enabling the checks that compare the two."""
    try:
        packet = parse_packet(data)
    except ProtocolError as exc:
        return LintReport(problems=_issues(exc, "packet"))
    problems: list[dict[str, str]] = []
    if packet.skill:
        # the registry's own refusal: no such skill or version, its instruction file
        # missing, input that breaks its input_schema
        try:
            skill = Skill.objects.for_run(packet.skill, packet.input_data)
        except ProtocolError as exc:
            problems = _issues(exc, "skill")
        else:
            packet = merge_skill(packet, skill.to_manifest())
    try:
        findings = lint_packet(packet, parent, max_depth=settings.HANDOFF_MAX_DEPTH,
                               payload_limit_bytes=settings.HANDOFF_PAYLOAD_LIMIT_BYTES,
                               approval_required=settings.HANDOFF_APPROVAL_REQUIRED_CAPABILITIES)
    except ProtocolError as exc:   # a parent that does not parse
        return LintReport(problems=problems + _issues(exc, "parent"), packet=packet.to_dict())
    depth, why = review_depth_reason(packet)
    return LintReport(findings=[finding.as_dict() for finding in findings], problems=problems,
                      review_depth=depth, review_depth_reason=why, packet=packet.to_dict())
