"""Is this delegation well formed? (DESIGN §2.7)

:func:`lint_packet` runs every check below on one :class:`HandoffPacket` (and, given the
parent's packet, the checks that compare a child with its parent) and returns
:class:`Finding` s in a deterministic order: errors first, then warnings, then info; within
a severity in the order of :data:`CHECKS`, and within a check in field order.

Errors block a run (the runner rejects the packet); warnings and info don't. Severities
are set so that a minimal but sane packet (a goal, machine-verifiable criteria, a
timeout) gets no errors, while a delegation that cannot work or that widens its scope
does (depth beyond the limit, scope or budget beyond the parent's, an executor with
nothing to verify against).

Where the checks come from:

- seed 001 "Verification" (the ten checks of a well-formed agloop delegation). They apply
  to agloop delegations: packets with seed 001 base params (other than ``task_id``) or a
  ``<role>_params`` block. The seed says "All 7 base_params fields" but lists eight: the
  seven that must be populated are all but ``task_id``, which the seed makes null during
  research, planning and critique; ``task_id`` is required from execute/verify on (and
  for executor and verifier delegations), and ``feature_description`` may be empty before
  research is done.
- seed 000 "Anti-Patterns" (recursive loops / depth, implicit state, vague criteria,
  payload bloat, silent failure without a timeout).
- seed 003 contract checks (goal, allowed inputs, expected output schema, resource
  boundaries, completion criteria; budgets and capabilities that shrink down the chain;
  approval-required capabilities).

:func:`review_depth` is seed 001's "Review Depth Decision Tree".
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable
from enum import StrEnum
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Any, NamedTuple

from pydantic import BaseModel
from pydantic_core import to_json

from .budgets import exceeds
from .capabilities import APPROVAL_REQUIRED_CAPABILITIES, KNOWN_CAPABILITIES
from .criteria import parse_criterion
from .errors import ProtocolError
from .packet import (
    AGLOOP_ROLES,
    BASE_PARAM_FIELDS,
    ROLE_PARAMS_FIELDS,
    CriticParams,
    HandoffPacket,
    PlannerParams,
    TaskDefinition,
    TaskParams,
    parse_packet,
)


class Severity(StrEnum):
    ERROR = "error"      # blocks the run
    WARNING = "warning"  # the run may go ahead; a person should look
    INFO = "info"        # a suggestion


_SEVERITY_RANK = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


class Finding(NamedTuple):
    """One problem: a stable code, its severity, the dotted field path, what to do."""

    code: str
    severity: Severity
    field: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "severity": str(self.severity), "field": self.field,
                "message": self.message}


_E, _W, _I = Severity.ERROR, Severity.WARNING, Severity.INFO

# Every check, in report order: code -> (severity, what it means). The UI lists these.
CHECKS: dict[str, tuple[Severity, str]] = {
    # seed 000 anti-pattern "Recursive Loops" and seed 004 nesting
    "DEPTH_LIMIT_EXCEEDED": (_E, "depth is beyond max_depth (the packet's, the parent's or "
                                "the server's, whichever is lowest; seed 000 recommends 3)."),
    "DEPTH_NOT_INCREMENTED": (_E, "A child's depth must be its parent's depth + 1, or "
                                 "delegation can loop without limit (seed 000)."),
    "NESTING_NOT_ALLOWED": (_E, "The parent is itself a subagent whose packet does not "
                               "allow_nested, so it may not spawn children (seed 004)."),
    # seed 003 shrinking scope
    "BUDGET_EXCEEDS_PARENT": (_E, "A budget axis asks for more than the parent's budget "
                                 "allows (budgets shrink down the chain, seed 003)."),
    "TIMEOUT_EXCEEDS_PARENT": (_E, "The child's timeout is longer than the parent's."),
    "CAPABILITY_EXCEEDS_PARENT": (_E, "A capability the parent does not have (capabilities "
                                     "shrink down the chain, seed 003)."),
    # seed 001 checks 4, 2, 3, 10
    "CRITERIA_MISSING": (_E, "An executor or verifier delegation has no acceptance criteria "
                            "(seed 001 check 4): there is nothing to verify against."),
    "INVALID_CRITERION": (_E, "A structured success criterion is malformed and cannot be "
                             "evaluated."),
    "FEATURE_NAME_NOT_VERBATIM": (_E, "feature_name differs from the root's original user "
                                     "request; seed 001 says never paraphrase (check 2)."),
    "ROLE_PARAMS_MISMATCH": (_E, "The packet carries <role>_params of another role than its "
                                "subagent_type, or of several roles."),
    "MULTIPLE_TASKS": (_E, "An executor delegation holds more than one task (seed 001 "
                          "check 10, failure mode 'monolithic delegation')."),
    # seed 000 anti-pattern "Large Payload Bloat"
    "PAYLOAD_BLOAT": (_E, "The packet is larger than the payload limit; pass file paths or "
                         "URIs instead of the data (seed 000)."),
    # seed 000 "Silent Failure", seed 003 contract parts
    "NO_TIMEOUT": (_W, "No timeout_s and no budget.max_runtime_s: a stuck subagent would "
                      "leave its parent waiting forever (seed 000 'Silent Failure')."),
    "GOAL_MISSING": (_W, "No goal (seed 003 contract part 1): say what the subagent must "
                        "achieve."),
    "IMPLICIT_STATE": (_W, "No context is passed (no input_data, context, role params or "
                          "previous failure): the subagent does not know the parent's "
                          "history (seed 000)."),
    "VAGUE_CRITERIA": (_W, "A success criterion is not machine-verifiable (seed 000 'Vague "
                          "Success Criteria')."),
    "COMPLETION_CRITERIA_MISSING": (_W, "No success/completion criteria at all (seed 003 "
                                       "contract part 5)."),
    "OUTPUT_SCHEMA_MISSING": (_W, "No expected output schema (seed 003 contract part 3). "
                                 "Not reported for agloop roles, whose output contract "
                                 "seed 001 fixes."),
    "BUDGET_MISSING": (_W, "No resource boundaries at all (seed 003 contract part 4)."),
    "INPUT_NOT_ALLOWED": (_W, "input_data passes a key that allowed_inputs does not list "
                             "(seed 003 contract part 2)."),
    "SECRET_IN_INPUT": (_W, "input_data looks like it carries a credential; secrets come "
                           "from server settings, never from packets (seed 003)."),
    "APPROVAL_REQUIRED_CAPABILITY": (_W, "A capability in scope needs explicit approval: "
                                        "each use will wait for a human (seed 000)."),
    "UNKNOWN_CAPABILITY": (_W, "A capability the system does not know; no tool provides it."),
    "MAX_DEPTH_ABOVE_LIMIT": (_W, "max_depth is above the parent's or the server's limit "
                                 "and will be capped."),
    # seed 001 checks 1, 3, 5, 6, 7, 8, 9
    "BASE_PARAMS_INCOMPLETE": (_W, "A seed 001 base parameter is missing or empty (check 1)."),
    "AGENT_PARAMS_MISSING": (_W, "An agloop delegation without its <role>_params block "
                                "(check 3)."),
    "AGENT_PARAMS_INCOMPLETE": (_W, "A required field of the role's params is missing "
                                   "(check 3)."),
    "ANTI_LAZINESS_MISSING": (_W, "An executor delegation without the anti-laziness "
                                 "checklist (check 5)."),
    "ANTI_LAZINESS_INCOMPLETE": (_W, "The executor's checklist lacks items of seed 001's "
                                    "complete ten-item checklist (check 5)."),
    "SPEC_ADHERENCE_MISSING": (_W, "An executor or verifier delegation without "
                                  "required_patterns / forbidden_patterns (check 6)."),
    "CONTEXT_INSUFFICIENT": (_W, "An executor delegation without files to read or a context "
                                "map (check 7)."),
    "PREVIOUS_FAILURE_MISSING": (_W, "A retry (attempt > 1) without previous_failure "
                                    "(check 8)."),
    "PREVIOUS_FAILURE_INCOMPLETE": (_W, "previous_failure lacks the attempt number, the "
                                       "specific failures or fix instructions (check 8)."),
    "ATTEMPT_MISMATCH": (_W, "metadata.attempt and previous_failure.attempt_number disagree."),
    "REVIEW_DEPTH_MISSING": (_W, "A verifier delegation without review_depth (check 9)."),
    "REVIEW_DEPTH_MISMATCH": (_W, "review_depth disagrees with seed 001's decision tree."),
    "TASK_ID_MISMATCH": (_W, "task_id differs from the task definition's id."),
    "UNFILLED_PLACEHOLDER": (_W, "A value is still a template placeholder such as "
                                "\"{verbatim user request}\" or the elision \"...\"."),
    "UNKNOWN_FIELD": (_W, "A field no part of the system reads (kept, but probably misspelt)."),
    "ALLOWED_INPUTS_MISSING": (_I, "No allowed_inputs: the contract does not say which "
                                  "context may be passed (seed 003 contract part 2)."),
    "NO_SELF_CORRECTION": (_I, "max_iterations is 1: no turn is left for seed 000's one "
                              "self-correction."),
    "ALLOW_NESTED_UNUSABLE": (_I, "allow_nested is set but the packet is already at its "
                                 "depth limit, so it cannot delegate."),
}
_CHECK_ORDER = {code: index for index, code in enumerate(CHECKS)}

# seed 001 "The Complete Checklist": each standard item and the words that show a
# checklist line covers it (one line may cover several, as the executor template's do).
STANDARD_CHECKLIST: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("DO NOT leave any TODO comments in the code", (r"\btodos?\b",)),
    ("DO NOT use placeholder implementations or stub functions", (r"placeholder|\bstubs?\b",)),
    ("DO NOT skip any acceptance criterion — confirm each one individually",
     (r"\bskip", r"criteri")),
    ("DO NOT return until every requirement is fully implemented",
     (r"\breturn until\b|\bfully implemented\b|\bevery requirement\b",)),
    ("You MUST create or modify ALL files listed in files_to_modify",
     (r"files_to_modify|\ball (?:the )?(?:listed )?files\b",)),
    ("You MUST handle ALL error cases, not just the happy path",
     (r"\berror (?:cases?|paths?|handling)\b|\bhappy path\b",)),
    ("You MUST follow existing codebase patterns (from context_map)",
     (r"\b(?:existing|codebase)\b[^.]*\bpatterns?\b|patterns_to_follow|\bcontext_map\b",)),
    ("You MUST use the specified technologies — do NOT substitute alternatives",
     (r"\bspecified technolog|\bsubstitut|\btech(?:nology)?[ _]choices?\b",)),
    ("You MUST NOT use any forbidden patterns listed in specification_adherence",
     (r"\bforbidden\b",)),
    ("Confirm each acceptance criterion with evidence before returning RESULT",
     (r"\bevidence\b",)),
)
_CHECKLIST_PATTERNS = tuple(
    (item, tuple(re.compile(pattern, re.IGNORECASE) for pattern in patterns))
    for item, patterns in STANDARD_CHECKLIST)

# seed 001 review depth decision tree, Step 1 keywords (verbatim), each with the
# inflections that still name the same thing ("tokens", "queries", "authorization").
SECURITY_KEYWORDS: tuple[str, ...] = (
    "auth", "login", "password", "token", "JWT", "crypto", "encryption",
    "SQL", "query", "injection", "validation", "sanitize", "CORS", "CSRF",
)
_KEYWORD_FORMS: dict[str, str] = {
    "auth": r"auth(?:[nz]|entic\w*|ori[sz]\w*)?",
    "login": r"log-?ins?",
    "password": r"passwords?",
    "token": r"tokens?",
    "JWT": r"jwts?",
    "crypto": r"crypto(?:graphy|graphic)?",
    "encryption": r"encrypt(?:ion|ed|s|ing)?",
    "SQL": r"sql",
    "query": r"quer(?:y|ies)",
    "injection": r"injections?",
    "validation": r"validations?",
    "sanitize": r"saniti[sz](?:e|es|ed|ing|ation)",
    "CORS": r"cors",
    "CSRF": r"csrf",
}
# Word boundaries that also split snake_case and paths ("auth_token", "src/auth.ts").
_SECURITY_RE = re.compile(
    r"(?<![A-Za-z0-9])(?:" + "|".join(
        f"(?P<k{index}>{_KEYWORD_FORMS[word]})" for index, word in enumerate(SECURITY_KEYWORDS))
    + r")(?![A-Za-z0-9])", re.IGNORECASE)
DOC_CONFIG_SUFFIXES: frozenset[str] = frozenset({".md", ".json", ".yaml", ".yml", ".env", ".config"})
_HIGH_PRIORITY = frozenset({"high", "critical", "urgent", "p0", "p1"})

_PLACEHOLDER_RE = re.compile(r"^\s*\{[^{}:,]+\}\s*$")
_RETRY_RE = re.compile(r"\bretr(?:y|ies|ying|ied)\b", re.IGNORECASE)
_SECRET_KEY_RE = re.compile(
    r"(?:^|_)(?:api_?key|secret|secret_key|password|passwd|access_token|refresh_token|"
    r"auth_token|bearer|private_key|credentials?|token)$", re.IGNORECASE)
_SECRET_SCAN_DEPTH = 3
_SECRET_MIN_LENGTH = 8


@lru_cache(maxsize=4096)
def _is_vague_text(text: str) -> bool:
    return parse_criterion(text) is None


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _task_definitions(packet: HandoffPacket) -> list[TaskDefinition]:
    out: list[TaskDefinition] = []
    for params in (packet.executor_params, packet.verifier_params):
        if params is not None:
            out.extend(params.task_definitions)
    return out


# ---------------------------------------------------------------------------------
# review depth (seed 001 decision tree)
# ---------------------------------------------------------------------------------

def review_depth_reason(packet: HandoffPacket) -> tuple[str, str]:
    """``(depth, why)`` by seed 001's decision tree; ``why`` is one readable sentence."""
    definitions = _task_definitions(packet)
    texts = [packet.goal or ""]
    if packet.task is not None and packet.task.description:
        texts.append(packet.task.description)
    for definition in definitions:
        texts.extend(text for text in (definition.title, definition.description) if text)
    for text in texts:
        match = _SECURITY_RE.search(text)
        if match is not None:
            keyword = SECURITY_KEYWORDS[int(str(match.lastgroup)[1:])]
            return "full", f"security-sensitive: keyword '{keyword}' in {match.group(0)!r}"
    for definition in definitions:
        if (definition.estimated_effort or "").strip().lower() == "large":
            return "full", "estimated_effort is 'large'"
        if (definition.priority or "").strip().lower() in _HIGH_PRIORITY:
            return "full", f"high priority ({definition.priority})"
        if definition.critical_path:
            return "full", "the task is on the critical path"
    files = [path for definition in definitions for path in definition.files_to_modify]
    if not files and packet.verifier_params is not None:
        result = packet.verifier_params.executor_result or {}
        modified = result.get("files_modified")
        if isinstance(modified, list):
            files = [str(path) for path in modified]
    if files and all(_is_doc_or_config(path) for path in files):
        return "lightweight", "files_to_modify holds only documentation/config files"
    return "standard", "a typical task (no security keyword, not large, not docs/config only)"


def review_depth(packet: HandoffPacket) -> str:
    """"full" | "standard" | "lightweight" by seed 001's Review Depth Decision Tree.

    Step 1: a security keyword (seed's list, word-boundary match, plural and common
    inflections) in the goal, task description or a task definition's title/description
    -> full. Step 2: estimated_effort "large", high priority or on the critical path ->
    full. Step 3: files_to_modify (or, for a verifier without them, the executor's
    files_modified) all .md/.json/.yaml/.yml/.env/.config -> lightweight. Else standard.
    """
    return review_depth_reason(packet)[0]


def _is_doc_or_config(path: str) -> bool:
    name = PurePosixPath(path.replace("\\", "/")).name.lower()
    if name == ".env" or name.startswith(".env."):
        return True
    return PurePosixPath(name).suffix in DOC_CONFIG_SUFFIXES


# ---------------------------------------------------------------------------------
# lint
# ---------------------------------------------------------------------------------

_ROLE_PARAM_NAMES: tuple[str, ...] = tuple(ROLE_PARAMS_FIELDS.values())
_AGLOOP_BASE_FIELDS: tuple[str, ...] = BASE_PARAM_FIELDS[1:]


class _Lint:
    def __init__(self, packet: HandoffPacket, parent: HandoffPacket | None) -> None:
        self.packet = packet
        self.parent = parent
        self.findings: list[Finding] = []
        self.role = str(packet.subagent_type) if packet.subagent_type is not None else None
        # the packet's field values, read directly: lint_packet runs on every delegation
        fields = packet.__dict__
        self.present = [name for name in _ROLE_PARAM_NAMES if fields[name] is not None]
        self.agloop = bool(self.present)
        if not self.agloop:
            for name in _AGLOOP_BASE_FIELDS:
                if fields[name] is not None:
                    self.agloop = True
                    break

    def add(self, code: str, field: str, message: str) -> None:
        self.findings.append(Finding(code, CHECKS[code][0], field, message))


def lint_packet(packet: HandoffPacket | dict[str, Any] | str,
                parent: HandoffPacket | dict[str, Any] | str | None = None, *,
                payload_limit_bytes: int = 65536, max_depth: int | None = None,
                approval_required: Iterable[str] | None = None) -> list[Finding]:
    """Every finding for ``packet`` (see :data:`CHECKS`), errors first, deterministic.

    ``parent`` enables the chain checks (depth, nesting, budget, timeout, capabilities,
    feature name). Budgets are compared with ``parent.budget`` as given: a runner that has
    metered the parent passes a copy whose budget is what is left
    (``budgets.remaining``). ``max_depth`` is the server's limit, ``approval_required`` its set of
    approval-required capabilities (default: network_outbound, file_delete, financial_tx).
    Packets given as dict/JSON are parsed first (ProtocolError when invalid).
    """
    packet = parse_packet(packet)
    parent_packet = parse_packet(parent) if parent is not None else None
    lint = _Lint(packet, parent_packet)
    _check_depth(lint, max_depth)
    if parent_packet is not None:
        _check_parent_scope(lint, parent_packet)
    _check_criteria(lint)
    _check_feature_name(lint)
    _check_role_params(lint)
    _check_tasks(lint)
    _check_payload(lint, payload_limit_bytes)
    _check_contract(lint)
    _check_capabilities(lint, approval_required)
    if lint.agloop:
        _check_base_params(lint)
    _check_executor(lint)
    _check_retry(lint)
    _check_verifier(lint)
    _check_placeholders(lint)
    _check_unknown_fields(lint)
    _check_iterations(lint)
    findings = lint.findings
    if len(findings) > 1:
        findings.sort(key=_finding_order)
    return findings


def _finding_order(finding: Finding) -> tuple[int, int]:
    return _SEVERITY_RANK[finding.severity], _CHECK_ORDER[finding.code]


def has_errors(findings: Iterable[Finding]) -> bool:
    """Whether any finding blocks the run."""
    return any(finding.severity == Severity.ERROR for finding in findings)


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [finding for finding in findings if finding.severity == Severity.ERROR]


# -- seed 000 recursive loops / seed 004 nesting -----------------------------------------

def _check_depth(lint: _Lint, server_max: int | None) -> None:
    packet, parent = lint.packet, lint.parent
    limits = [(packet.max_depth, "its own max_depth")]
    if server_max is not None:
        limits.append((server_max, "the server's depth limit"))
    if parent is not None:
        limits.append((parent.max_depth, "the parent's max_depth"))
    limit, which = min(limits, key=lambda pair: pair[0])
    if packet.depth > limit:
        lint.add("DEPTH_LIMIT_EXCEEDED", "depth", (
            f"depth is {packet.depth} but {which} is {limit}. Do this work in the parent "
            f"or in an existing subagent instead of delegating deeper."))
    for cap, source in limits[1:]:
        if packet.max_depth > cap:
            lint.add("MAX_DEPTH_ABOVE_LIMIT", "max_depth", (
                f"max_depth {packet.max_depth} is above {source} ({cap}); it is capped at "
                f"{cap}. Set max_depth to {cap} or less."))
    if packet.allow_nested and packet.depth >= limit:
        lint.add("ALLOW_NESTED_UNUSABLE", "allow_nested", (
            f"allow_nested is true but depth {packet.depth} is already at the limit "
            f"({limit}); this subagent cannot delegate. Drop allow_nested or raise the limit."))
    if parent is None:
        return
    if packet.depth != parent.depth + 1:
        lint.add("DEPTH_NOT_INCREMENTED", "depth", (
            f"depth is {packet.depth} but the parent is at depth {parent.depth}; set depth "
            f"to {parent.depth + 1} so the depth limit can stop runaway delegation."))
    if parent.depth > 0 and not parent.allow_nested:
        lint.add("NESTING_NOT_ALLOWED", "depth", (
            f"The parent is a subagent (depth {parent.depth}) whose packet does not set "
            f"allow_nested, so it cannot spawn children. Delegate from the parent's own "
            f"parent, or set allow_nested on the parent's packet."))


# -- seed 003 shrinking scope --------------------------------------------------------------

def _check_parent_scope(lint: _Lint, parent: HandoffPacket) -> None:
    packet = lint.packet
    for issue in exceeds(packet.budget, parent.budget):
        lint.add("BUDGET_EXCEEDS_PARENT", issue.field, issue.message)
    if (packet.timeout_s is not None and parent.timeout_s is not None
            and packet.timeout_s > parent.timeout_s):
        lint.add("TIMEOUT_EXCEEDS_PARENT", "timeout_s", (
            f"timeout_s is {packet.timeout_s:g} s but the parent times out after "
            f"{parent.timeout_s:g} s; set it to {parent.timeout_s:g} or less so the child "
            f"ends before its parent."))
    allowed = set(parent.capabilities)
    for index, capability in enumerate(packet.capabilities):
        if capability not in allowed:
            held = ", ".join(parent.capabilities) or "none"
            lint.add("CAPABILITY_EXCEEDS_PARENT", f"capabilities[{index}]", (
                f"'{capability}' is not in the parent's capabilities ({held}); remove it, "
                f"or have the parent request it first (request_capability)."))


# -- criteria ------------------------------------------------------------------------------

def _acceptance_criteria(packet: HandoffPacket) -> list[str]:
    role_params = packet.role_params
    return list(role_params.acceptance_criteria) if isinstance(role_params, TaskParams) else []


def _check_criteria(lint: _Lint) -> None:
    packet = lint.packet
    acceptance = _acceptance_criteria(packet)
    if lint.role in ("executor", "verifier") and not acceptance and not packet.success_criteria:
        field = f"{lint.role}_params.acceptance_criteria"
        lint.add("CRITERIA_MISSING", field, (
            f"This {lint.role} delegation has no acceptance criteria, so nothing can tell "
            f"done from not done. Add {field} (or success_criteria), one checkable "
            f"statement each, e.g. \"GET /api/search without q returns 400\"."))
    elif not acceptance and not packet.success_criteria:
        lint.add("COMPLETION_CRITERIA_MISSING", "success_criteria", (
            "No success criteria: the result cannot be checked. Add machine-verifiable "
            "ones such as \"JSON is schema-valid\" or \"Include at least 2 sources\"."))
    for index, criterion in enumerate(packet.success_criteria):
        field = f"success_criteria[{index}]"
        if isinstance(criterion, str):
            if _is_vague_text(criterion):
                lint.add("VAGUE_CRITERIA", field, (
                    f"{criterion!r} is not machine-verifiable. Rewrite it as a check such as "
                    f"\"JSON is schema-valid\", \"Word count > 500\", \"Include at least 2 "
                    f"sources\" or \"`price` is a number\"."))
            continue
        try:
            parsed = parse_criterion(criterion, field)
        except ProtocolError as exc:
            detail = exc.issues[0].message if exc.issues else exc.message
            lint.add("INVALID_CRITERION", field, (
                f"This structured criterion cannot be evaluated: {detail}. Fix it or write "
                f"it as text."))
            continue
        if parsed is None:
            lint.add("VAGUE_CRITERIA", field, (
                "This criterion is not machine-verifiable; give it a kind (json_schema, "
                "field, regex, word_count, equals, range, evidence, files_modified)."))


# -- seed 001 ------------------------------------------------------------------------------

def _check_feature_name(lint: _Lint) -> None:
    packet, parent = lint.packet, lint.parent
    reference: tuple[str, str] | None = None
    if parent is not None and not _blank(parent.feature_name):
        reference = (str(parent.feature_name), "the parent's feature_name")
    elif packet.context is not None and not _blank(packet.context.original_request):
        reference = (str(packet.context.original_request), "context.original_request")
    elif (parent is not None and parent.context is not None
          and not _blank(parent.context.original_request)):
        reference = (str(parent.context.original_request), "the parent's original request")
    names = [("feature_name", packet.feature_name)]
    if packet.critic_params is not None:
        names.append(("critic_params.feature_name", packet.critic_params.feature_name))
        if reference is None and not _blank(packet.feature_name):
            reference = (str(packet.feature_name), "feature_name")
    if reference is None:
        return
    expected, source = reference
    for field, value in names:
        if _blank(value) or value == expected:
            continue
        near = " ".join(str(value).split()).lower() == " ".join(expected.split()).lower()
        how = "differs only in case or spacing; " if near else ""
        lint.add("FEATURE_NAME_NOT_VERBATIM", field, (
            f"{field} {how}is {_quote(value)} but {source} is {_quote(expected)}. Copy the "
            f"user's request verbatim; never paraphrase or abbreviate it."))


def _quote(value: object, limit: int = 80) -> str:
    text = str(value)
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


_ROLE_REQUIRED: dict[str, tuple[tuple[str, str], ...]] = {
    "researcher": (
        ("complexity_level", "simple, medium or complex (1, 2 or 3 research passes)"),
        ("research_mode", "codebase_only or codebase_plus_latest_guidance"),
        ("focus_areas", "the areas to research"),
        ("workspace_root", "the absolute path of the workspace"),
    ),
    "planner": (
        ("research_findings", "the researcher's full research_output"),
        ("context_map", "the context_map section of the research"),
    ),
    "critic": (
        ("plan_yaml_path", "the plan to review"),
        ("iteration_number", "which critique iteration this is (1-3)"),
        ("max_iterations", "how many critique iterations there may be"),
        ("feature_name", "the original request, for the specification compliance check"),
        ("research_findings", "the research output, for context"),
    ),
    "executor": (("task_definition", "the one task to implement"),),
    "verifier": (
        ("task_definition", "the task that was implemented"),
        ("executor_result", "the executor's output to verify"),
    ),
}
_TASK_DEFINITION_REQUIRED: dict[str, tuple[str, ...]] = {
    "executor": ("id", "title", "description", "files_to_modify"),
    "verifier": ("id", "title"),
}


def _check_role_params(lint: _Lint) -> None:
    packet, role = lint.packet, lint.role
    present = lint.present
    if role is None and len(present) > 1:
        lint.add("ROLE_PARAMS_MISMATCH", "subagent_type", (
            f"The packet carries {', '.join(present)} but no subagent_type; one delegation "
            f"goes to one role. Keep one block and set subagent_type."))
    elif role is not None:
        for name in present:
            if name != ROLE_PARAMS_FIELDS.get(role):
                lint.add("ROLE_PARAMS_MISMATCH", name, (
                    f"{name} is given but subagent_type is '{role}'; remove it or send it in "
                    f"its own delegation."))
    if role not in AGLOOP_ROLES or not lint.agloop:
        return
    params = packet.role_params
    field = ROLE_PARAMS_FIELDS[role]
    if params is None:
        lint.add("AGENT_PARAMS_MISSING", field, (
            f"This is a seed 001 {role} delegation without {field}; add the role's "
            f"parameters (see seed 001's {role} delegation template)."))
        return
    for name, what in _ROLE_REQUIRED[role]:
        if _empty(getattr(params, name, None)):
            lint.add("AGENT_PARAMS_INCOMPLETE", f"{field}.{name}", (
                f"{field}.{name} is missing: give {what}."))
    definition = params.task_definition if isinstance(params, TaskParams) else None
    if definition is not None:
        for name in _TASK_DEFINITION_REQUIRED[role]:
            if _empty(getattr(definition, name)):
                lint.add("AGENT_PARAMS_INCOMPLETE", f"{field}.task_definition.{name}", (
                    f"{field}.task_definition.{name} is missing; the {role} needs it to know "
                    f"exactly which task it works on."))
    if role == "critic" and packet.critic_params is not None:
        critic = packet.critic_params
        if (critic.iteration_number or 1) > 1 and not any(
                not _blank(item.objection) for item in critic.previous_objections):
            lint.add("AGENT_PARAMS_INCOMPLETE", "critic_params.previous_objections", (
                f"This is critique iteration {critic.iteration_number} but "
                f"previous_objections is empty; pass the earlier objections and responses."))


def _empty(value: object) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, list | dict | tuple):
        return not value
    return False


def _check_tasks(lint: _Lint) -> None:
    packet = lint.packet
    definitions: list[tuple[str, TaskDefinition]] = []
    for name in ("executor_params", "verifier_params"):
        params = getattr(packet, name)
        if params is not None:
            definitions.extend((name, item) for item in params.task_definitions)
    if lint.role == "executor":
        count = sum(1 for name, _ in definitions if name == "executor_params")
        stray = packet.extra.get("tasks")
        if isinstance(stray, list):
            count = max(count, len(stray))
        if count > 1:
            lint.add("MULTIPLE_TASKS", "executor_params.task_definition", (
                f"This executor delegation holds {count} tasks; send exactly one task per "
                f"executor delegation and delegate the others separately."))
    ids = [(f"{name}.task_definition.id", item.id) for name, item in definitions[:1]]
    if packet.task is not None:
        ids.append(("task.id", packet.task.id))
    if packet.task_id is not None:
        for field, other in ids:
            if other is not None and other != packet.task_id:
                lint.add("TASK_ID_MISMATCH", field, (
                    f"{field} is {other!r} but task_id is {packet.task_id!r}; they name the "
                    f"same task, make them equal."))


def _check_base_params(lint: _Lint) -> None:
    packet = lint.packet
    phase = packet.current_phase
    needs_task = lint.role in ("executor", "verifier") or phase in ("execute", "verify")
    for field in BASE_PARAM_FIELDS:
        value = getattr(packet, field)
        if field == "task_id":
            if needs_task and _blank(value):
                lint.add("BASE_PARAMS_INCOMPLETE", field, (
                    "task_id is empty; from the execute phase on every delegation names the "
                    "task it works on (e.g. \"task-003\")."))
            continue
        if field == "feature_description" and value == "" and phase in (None, "init", "research"):
            continue  # seed 001: empty string before research
        if _blank(value):
            lint.add("BASE_PARAMS_INCOMPLETE", field, _BASE_PARAM_HINTS[field])


_BASE_PARAM_HINTS: dict[str, str] = {
    "feature_name": "feature_name is missing: give the user's request verbatim.",
    "feature_description": "feature_description is missing: give the expanded description "
                           "from research (an empty string before research).",
    "current_phase": "current_phase is missing: one of init, research, plan, critique, "
                     "execute, verify, complete.",
    "current_state_summary": "current_state_summary is missing: a compressed snapshot such "
                             "as \"Phase: execute, Task: task-003 (3/7 done), Last: task-002 "
                             "verified PASS\".",
    "plan_path": "plan_path is missing: the plan file's path (\".agloop/plan.yaml\"), even if "
                 "it does not exist yet.",
    "state_path": "state_path is missing: the state file's path (\".agloop/state.json\").",
    "log_path": "log_path is missing: the log file's path (\".agloop/log.json\").",
}


def _check_executor(lint: _Lint) -> None:
    packet = lint.packet
    if lint.role in ("executor", "verifier"):
        spec = packet.specification_adherence
        if spec is None:
            lint.add("SPEC_ADHERENCE_MISSING", "specification_adherence", (
                "Add specification_adherence with required_patterns and forbidden_patterns "
                "(and tech_choices) so the subagent cannot substitute a familiar pattern for "
                "the specified one."))
        else:
            for name in ("required_patterns", "forbidden_patterns"):
                if not getattr(spec, name):
                    lint.add("SPEC_ADHERENCE_MISSING", f"specification_adherence.{name}", (
                        f"specification_adherence.{name} is empty; list the patterns the "
                        f"work {'must' if name == 'required_patterns' else 'must not'} use."))
    if lint.role != "executor":
        return
    checklist = packet.anti_laziness_checklist
    if not checklist:
        lint.add("ANTI_LAZINESS_MISSING", "anti_laziness_checklist", (
            "Add seed 001's anti-laziness checklist (all ten standard items, then any "
            "task-specific ones); it is part of every executor delegation."))
    else:
        missing = _missing_checklist_items(checklist)
        if missing:
            listed = "; ".join(f"\"{item}\"" for item in missing)
            lint.add("ANTI_LAZINESS_INCOMPLETE", "anti_laziness_checklist", (
                f"The checklist lacks {len(missing)} of the ten standard items: {listed}. "
                f"Add them before the task-specific items."))
    params = packet.executor_params
    if params is None:
        return
    definition = params.task_definition
    files = list(definition.files_to_read) if definition is not None else []
    if not files and packet.context is not None:
        files = list(packet.context.relevant_files)
    if not files:
        lint.add("CONTEXT_INSUFFICIENT", "executor_params.task_definition.files_to_read", (
            "No files to read: list the files the executor should study first (the "
            "patterns to follow, the services it calls) in task_definition.files_to_read."))
    if _empty(params.context_map):
        lint.add("CONTEXT_INSUFFICIENT", "executor_params.context_map", (
            "No context_map: pass the relevant part of the research context map "
            "(primary_files, patterns_to_follow) so the executor follows existing patterns."))


def _missing_checklist_items(checklist: list[str]) -> list[str]:
    return list(_missing_for(tuple(checklist)))


@lru_cache(maxsize=256)
def _missing_for(checklist: tuple[str, ...]) -> tuple[str, ...]:
    # Checklists repeat across delegations (the standard list plus a few task items), so
    # the semantic comparison is done once per distinct checklist.
    missing = []
    for item, patterns in _CHECKLIST_PATTERNS:
        if not any(all(pattern.search(line) for pattern in patterns) for line in checklist):
            missing.append(item)
    return tuple(missing)


def _check_retry(lint: _Lint) -> None:
    packet = lint.packet
    failure = packet.previous_failure
    summary = packet.current_state_summary or ""
    retry = packet.attempt > 1 or bool(_RETRY_RE.search(summary))
    if failure is None:
        if retry:
            lint.add("PREVIOUS_FAILURE_MISSING", "previous_failure", (
                f"This is a retry (attempt {packet.attempt}) but previous_failure is empty; "
                f"attach the failure report, the specific failures and fix instructions so "
                f"the fresh subagent does not repeat the same mistake."))
        return
    if failure.attempt_number is None:
        lint.add("PREVIOUS_FAILURE_INCOMPLETE", "previous_failure.attempt_number", (
            "previous_failure.attempt_number is missing: say which attempt this is (2 for "
            "the first retry)."))
    if not failure.specific_failures:
        lint.add("PREVIOUS_FAILURE_INCOMPLETE", "previous_failure.specific_failures", (
            "previous_failure.specific_failures is empty: list what exactly failed, e.g. "
            "\"page_size > 100 returns 500 instead of 400\"."))
    if _blank(failure.fix_instructions):
        lint.add("PREVIOUS_FAILURE_INCOMPLETE", "previous_failure.fix_instructions", (
            "previous_failure.fix_instructions is empty: say specifically how to fix it, "
            "e.g. \"Add zod validation for page_size: z.number().min(1).max(100)\"."))
    attempt = packet.metadata.attempt if packet.metadata is not None else None
    if (attempt is not None and failure.attempt_number is not None
            and attempt != failure.attempt_number):
        lint.add("ATTEMPT_MISMATCH", "metadata.attempt", (
            f"metadata.attempt is {attempt} but previous_failure.attempt_number is "
            f"{failure.attempt_number}; make them the same attempt number."))


def _check_verifier(lint: _Lint) -> None:
    if lint.role != "verifier":
        return
    packet = lint.packet
    depth, why = review_depth_reason(packet)
    if packet.review_depth is None:
        lint.add("REVIEW_DEPTH_MISSING", "verifier_params.review_depth", (
            f"Set review_depth before delegating to the verifier; seed 001's decision tree "
            f"gives '{depth}' ({why})."))
    elif packet.review_depth != depth:
        lint.add("REVIEW_DEPTH_MISMATCH", "verifier_params.review_depth", (
            f"review_depth is '{packet.review_depth}' but seed 001's decision tree gives "
            f"'{depth}' ({why}). Use '{depth}' unless you have a reason the tree does not "
            f"see."))


# -- seed 000 anti-patterns and seed 003 contract ------------------------------------------

def _check_payload(lint: _Lint, limit: int) -> None:
    packet = lint.packet
    size = _approximate_size(lint)
    if size <= limit:
        return
    size = len(packet.canonical_json().encode("utf-8"))  # the exact figure for the message
    if size <= limit:
        return
    sizes = {name: len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
             for name, value in packet.to_dict().items()}
    biggest = max(sizes, key=lambda name: sizes[name])
    lint.add("PAYLOAD_BLOAT", biggest, (
        f"The packet is {size:,} bytes, over the {limit:,}-byte limit; {biggest} alone is "
        f"{sizes[biggest]:,} bytes. Pass file paths or URIs to the data (e.g. in "
        f"context.relevant_files) instead of the data itself."))


def _approximate_size(lint: _Lint) -> int:
    """Bytes of the packet's bulky parts: free-form data and long text.

    Serializing the whole packet costs more than all other checks together; the typed
    fields around these parts add a bounded few hundred bytes, so this is a lower bound
    close enough to decide "under the limit" on the hot path (the exact size is computed
    only when it might be over).
    """
    packet = lint.packet
    bulky: list[object] = [packet.input_data, packet.extra, packet.expected_output_schema,
                           packet.success_criteria, packet.anti_laziness_checklist]
    for name in lint.present:
        params = getattr(packet, name)
        bulky.extend(value for key, value in vars(params).items() if key in _BULKY_PARAMS)
        if params.model_extra:
            bulky.append(params.model_extra)
    context = packet.context
    if context is not None:
        bulky.extend((context.original_request, context.completed_steps,
                      context.intermediate_results, context.decisions, context.summary))
    size = sum(len(text) for text in (packet.goal, packet.instruction_set,
                                      packet.feature_description, packet.current_state_summary)
               if text)
    # pydantic-core's serializer: several times faster than the json module here
    return size + len(to_json(bulky, fallback=str))


_BULKY_PARAMS = frozenset({"research_findings", "context_map", "latest_guidance",
                           "executor_result", "acceptance_criteria", "focus_areas"})


def _passes_context(lint: _Lint) -> bool:
    packet = lint.packet
    if packet.input_data or lint.present or packet.previous_failure is not None:
        return True
    context = packet.context
    return context is not None and bool(
        context.original_request or context.completed_steps or context.intermediate_results
        or context.relevant_files or context.decisions or context.summary)


def _check_contract(lint: _Lint) -> None:
    packet = lint.packet
    if packet.timeout_s is None and packet.budget.max_runtime_s is None:
        lint.add("NO_TIMEOUT", "timeout_s", (
            "Add a timeout (timeout_s) so a stuck subagent ends with ERR_TIMEOUT instead of "
            "waiting forever."))
    if _blank(packet.goal):
        lint.add("GOAL_MISSING", "goal", (
            "Add a goal that says what to achieve and what not to do, e.g. \"compare three "
            "candidate solutions, output a risk matrix with sources, and perform no external "
            "write operations\"."))
    if not _passes_context(lint):
        hint = ""
        if packet.allowed_inputs:
            hint = f" allowed_inputs lists {', '.join(packet.allowed_inputs)} but none is passed."
        lint.add("IMPLICIT_STATE", "input_data", (
            "No context is passed: the subagent does not share the parent's conversation. "
            "Put what it needs in input_data or context (original request, completed steps, "
            f"relevant files).{hint}"))
    if packet.expected_output_schema is None and not lint.agloop:
        lint.add("OUTPUT_SCHEMA_MISSING", "expected_output_schema", (
            "Add expected_output_schema (JSON Schema or shorthand such as {\"summary\": "
            "\"string\"}) so the result is validated before anyone uses it."))
    budget = packet.budget
    if (budget.max_model_calls is None and budget.max_tokens is None
            and budget.max_runtime_s is None and budget.max_cost_usd is None
            and budget.max_concurrency is None and budget.max_iterations is None):
        lint.add("BUDGET_MISSING", "budget", (
            "Set a budget (e.g. max_model_calls, max_tokens, max_cost_usd) so the delegation "
            "cannot grow without bound."))
    if packet.allowed_inputs is None:
        lint.add("ALLOWED_INPUTS_MISSING", "allowed_inputs", (
            "List allowed_inputs (the names of the inputs this subagent may receive) so no "
            "private data or token is passed by accident."))
    else:
        allowed = set(packet.allowed_inputs)
        for key in packet.input_data:
            if key not in allowed:
                lint.add("INPUT_NOT_ALLOWED", f"input_data.{key}", (
                    f"input_data.{key} is not in allowed_inputs "
                    f"({', '.join(packet.allowed_inputs) or 'empty'}); remove it or add it to "
                    f"allowed_inputs."))
    for path in _secret_paths(packet.input_data, "input_data", 0) if packet.input_data else ():
        lint.add("SECRET_IN_INPUT", path, (
            f"{path} looks like a credential. Remove it: secrets come from server settings "
            f"and never travel in packets, events or logs."))


def _secret_paths(value: object, path: str, depth: int) -> list[str]:
    if depth > _SECRET_SCAN_DEPTH or not isinstance(value, dict):
        return []
    found = []
    for key, item in value.items():
        where = f"{path}.{key}"
        if (isinstance(key, str) and isinstance(item, str) and len(item) >= _SECRET_MIN_LENGTH
                and _SECRET_KEY_RE.search(key)):
            found.append(where)
        elif isinstance(item, dict):
            found.extend(_secret_paths(item, where, depth + 1))
    return found


def _check_capabilities(lint: _Lint, approval_required: Iterable[str] | None) -> None:
    required = (APPROVAL_REQUIRED_CAPABILITIES if approval_required is None
                else frozenset(approval_required))
    for index, capability in enumerate(lint.packet.capabilities):
        field = f"capabilities[{index}]"
        if capability in required:
            lint.add("APPROVAL_REQUIRED_CAPABILITY", field, (
                f"'{capability}' needs explicit approval: every use will wait in the approval "
                f"inbox for a person. Remove it if the task can do without."))
        if capability not in KNOWN_CAPABILITIES:
            near = difflib.get_close_matches(capability, sorted(KNOWN_CAPABILITIES), n=1)
            hint = f" Did you mean '{near[0]}'?" if near else ""
            lint.add("UNKNOWN_CAPABILITY", field, (
                f"'{capability}' is not a known capability, so no tool provides it.{hint} "
                f"Known: {', '.join(sorted(KNOWN_CAPABILITIES))}."))


_PLACEHOLDER_FIELDS = ("goal", "instruction_set", "feature_name", "feature_description",
                       "current_state_summary")


def _check_placeholders(lint: _Lint) -> None:
    packet = lint.packet
    values = packet.__dict__
    fields: list[tuple[str, object]] = []
    for name in _PLACEHOLDER_FIELDS:
        value = values[name]
        # every placeholder holds "{", "..." or "…": most text is ruled out without a call
        if isinstance(value, str) and ("{" in value or "..." in value or "…" in value):
            fields.append((name, value))
    for name in lint.present:
        params = getattr(packet, name)
        fields.extend((f"{name}.{key}", value) for key, value in vars(params).items()
                      if _is_placeholder(value))
        definition = params.task_definition if isinstance(params, TaskParams) else None
        if definition is not None:
            fields.extend((f"{name}.task_definition.{key}", getattr(definition, key))
                          for key in ("title", "description"))
    for field, value in fields:
        if _is_placeholder(value):
            lint.add("UNFILLED_PLACEHOLDER", field, (
                f"{field} is still the template placeholder {str(value).strip()!r}; fill in "
                f"the real value."))


def _is_placeholder(value: object) -> bool:
    """seed 001's template slots ("{verbatim user request}") and its elisions ("...")."""
    if not isinstance(value, str):
        return False
    text = value.strip()
    if text in ("...", "…"):
        return True
    return text[:1] == "{" and _PLACEHOLDER_RE.match(text) is not None


def _check_unknown_fields(lint: _Lint) -> None:
    packet = lint.packet
    for key in packet.extra:
        near = difflib.get_close_matches(key, sorted(HandoffPacket.model_fields), n=1)
        hint = f" Did you mean '{near[0]}'?" if near else ""
        lint.add("UNKNOWN_FIELD", f"extra.{key}", (
            f"'{key}' is not a packet field; it is kept in extra but nothing reads it.{hint}"))
    for path, part in _typed_parts(packet):
        for key in part.model_extra or {}:
            near = difflib.get_close_matches(key, sorted(type(part).model_fields), n=1)
            hint = f" Did you mean '{near[0]}'?" if near else ""
            lint.add("UNKNOWN_FIELD", f"{path}.{key}", (
                f"'{key}' is not a field of {path}; it is kept but nothing reads it.{hint}"))


def _typed_parts(packet: HandoffPacket) -> list[tuple[str, BaseModel]]:
    parts: list[tuple[str, BaseModel]] = []
    for name in _PART_FIELDS:
        part = getattr(packet, name)
        if part is None:
            continue
        parts.append((name, part))
        if isinstance(part, TaskParams):
            if part.task_definition is not None:
                parts.append((f"{name}.task_definition", part.task_definition))
            parts.extend((f"{name}.tasks[{index}]", task) for index, task in enumerate(part.tasks))
        elif isinstance(part, PlannerParams) and part.revision_feedback is not None:
            parts.append((f"{name}.revision_feedback", part.revision_feedback))
        elif isinstance(part, CriticParams):
            parts.extend((f"{name}.previous_objections[{index}]", objection)
                         for index, objection in enumerate(part.previous_objections))
    return parts


_PART_FIELDS: tuple[str, ...] = (
    "previous_failure", "specification_adherence", "task", "context", "metadata",
    *ROLE_PARAMS_FIELDS.values())


def _check_iterations(lint: _Lint) -> None:
    if lint.packet.max_iterations == 1:
        lint.add("NO_SELF_CORRECTION", "max_iterations", (
            "max_iterations is 1, so a failed first attempt cannot self-correct (seed 000 "
            "allows one self-correction); use at least 2."))
