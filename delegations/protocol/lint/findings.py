"""What lint reports: severities, every finding code, and the order findings come in."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any, NamedTuple


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
    # the hand-off protocol's "Recursive Loops" anti-pattern, and OpenClaw sub-agents' nesting
    "DEPTH_LIMIT_EXCEEDED": (_E, "depth is beyond max_depth (the packet's, the parent's or "
                                "the server's, whichever is lowest; the hand-off protocol "
                                "recommends 3)."),
    "DEPTH_NOT_INCREMENTED": (_E, "A child's depth must be its parent's depth + 1, or "
                                 "delegation can loop without limit (a hand-off protocol "
                                 "anti-pattern)."),
    "NESTING_NOT_ALLOWED": (_E, "The parent is itself a subagent whose packet does not "
                               "allow_nested, so it may not spawn children (as with OpenClaw "
                               "sub-agents)."),
    # delegation contracts: scope shrinks down the chain
    "BUDGET_EXCEEDS_PARENT": (_E, "A budget axis asks for more than the parent's budget "
                                 "allows (in a delegation contract, budgets shrink down the "
                                 "chain)."),
    "TIMEOUT_EXCEEDS_PARENT": (_E, "The child's timeout is longer than the parent's."),
    "CAPABILITY_EXCEEDS_PARENT": (_E, "A capability the parent does not have (in a delegation "
                                     "contract, capabilities shrink down the chain)."),
    # the agloop delegation protocol's checks 4, 2, 3, 10
    "CRITERIA_MISSING": (_E, "An executor or verifier delegation has no acceptance criteria "
                            "(agloop check 4): there is nothing to verify against."),
    "CONFIDENCE_OUT_OF_RANGE": (_E, "A confident criterion's lowest probability is not between 0 and 1."),
    "CONFIDENT_NOT_A_LABEL": (_E, "A confident criterion names an output field that is not an enum or a "
                                  "boolean: no model can give a probability for it."),
    "CRITERION_SOURCE_UNKNOWN": (_E, "A criterion checks the answer against an input the delegation does not "
                                     "have (not in its skill's input schema, nor given)."),
    "INVALID_CRITERION": (_E, "A structured success criterion is malformed and cannot be "
                             "evaluated."),
    "FEATURE_NAME_NOT_VERBATIM": (_E, "feature_name differs from the root's original user "
                                     "request; the agloop delegation protocol says never "
                                     "paraphrase (check 2)."),
    "ROLE_PARAMS_MISMATCH": (_E, "The packet carries <role>_params of another role than its "
                                "subagent_type, or of several roles."),
    "MULTIPLE_TASKS": (_E, "An executor delegation holds more than one task (agloop check "
                          "10, failure mode 'monolithic delegation')."),
    # the hand-off protocol's "Large Payload Bloat" anti-pattern
    "PAYLOAD_BLOAT": (_E, "The packet is larger than the payload limit; pass file paths or "
                         "URIs instead of the data (the hand-off protocol's 'Large Payload "
                         "Bloat' anti-pattern)."),
    # the hand-off protocol's "Silent Failure", the parts of a delegation contract
    "NO_TIMEOUT": (_W, "No timeout_s and no budget.max_runtime_s: a stuck subagent would "
                      "leave its parent waiting forever (the hand-off protocol's 'Silent "
                      "Failure' anti-pattern)."),
    "GOAL_MISSING": (_E, "No goal (delegation contract part 1): say what the subagent must "
                        "achieve."),
    "IMPLICIT_STATE": (_W, "No context is passed (no input_data, context, role params or "
                          "previous failure): the subagent does not know the parent's "
                          "history (the hand-off protocol's implicit-state anti-pattern)."),
    "VAGUE_CRITERIA": (_W, "A success criterion is not machine-verifiable (the hand-off "
                          "protocol's 'Vague Success Criteria' anti-pattern)."),
    "GROUNDING_INPUT_MISSING": (_W, "A success criterion checks the answer against an input "
                                   "that input_data does not give: the run cannot meet it."),
    "COMPLETION_CRITERIA_MISSING": (_W, "No success/completion criteria at all (delegation "
                                       "contract part 5)."),
    "OUTPUT_SCHEMA_MISSING": (_W, "No expected output schema (delegation contract part 3). "
                                 "Not reported for agloop roles, whose output contract the "
                                 "agloop delegation protocol fixes."),
    "BUDGET_MISSING": (_W, "No resource boundaries at all (delegation contract part 4)."),
    "INPUT_NOT_ALLOWED": (_W, "input_data passes a key that allowed_inputs does not list "
                             "(delegation contract part 2)."),
    "SECRET_IN_INPUT": (_W, "input_data looks like it carries a credential; secrets come "
                           "from server settings, never from packets (a delegation-contract "
                           "rule)."),
    "APPROVAL_REQUIRED_CAPABILITY": (_W, "A capability in scope needs explicit approval: "
                                        "each use will wait for a human (the hand-off "
                                        "protocol's approval rules)."),
    "UNKNOWN_CAPABILITY": (_W, "A capability the system does not know; no tool provides it."),
    "MAX_DEPTH_ABOVE_LIMIT": (_W, "max_depth is above the parent's or the server's limit "
                                 "and will be capped."),
    # the agloop delegation protocol's checks 1, 3, 5, 6, 7, 8, 9
    "BASE_PARAMS_INCOMPLETE": (_W, "An agloop base parameter is missing or empty (check 1)."),
    "AGENT_PARAMS_MISSING": (_W, "An agloop delegation without its <role>_params block "
                                "(check 3)."),
    "AGENT_PARAMS_INCOMPLETE": (_W, "A required field of the role's params is missing "
                                   "(check 3)."),
    "ANTI_LAZINESS_MISSING": (_W, "An executor delegation without the anti-laziness "
                                 "checklist (check 5)."),
    "ANTI_LAZINESS_INCOMPLETE": (_W, "The executor's checklist lacks items of the agloop "
                                    "delegation protocol's complete ten-item checklist "
                                    "(check 5)."),
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
    "REVIEW_DEPTH_MISMATCH": (_W, "review_depth disagrees with the agloop review-depth "
                                 "decision tree."),
    "TASK_ID_MISMATCH": (_W, "task_id differs from the task definition's id."),
    "UNFILLED_PLACEHOLDER": (_W, "A value is still a template placeholder such as "
                                "\"{verbatim user request}\" or the elision \"...\"."),
    "UNKNOWN_FIELD": (_W, "A field no part of the system reads (kept, but probably misspelt)."),
    "ALLOWED_INPUTS_MISSING": (_I, "No allowed_inputs: the contract does not say which "
                                  "context may be passed (delegation contract part 2)."),
    "NO_SELF_CORRECTION": (_I, "max_iterations is 1: no turn is left for the one "
                              "self-correction the hand-off protocol allows."),
    "ALLOW_NESTED_UNUSABLE": (_I, "allow_nested is set but the packet is already at its "
                                 "depth limit, so it cannot delegate."),
}
_CHECK_ORDER = {code: index for index, code in enumerate(CHECKS)}


def finding_order(finding: Finding) -> tuple[int, int]:
    """Sort key of the report: errors first, then warnings, then info; then CHECKS order."""
    return _SEVERITY_RANK[finding.severity], _CHECK_ORDER[finding.code]


def has_errors(findings: Iterable[Finding]) -> bool:
    """Whether any finding blocks the run."""
    return any(finding.severity == Severity.ERROR for finding in findings)


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [finding for finding in findings if finding.severity == Severity.ERROR]


def rejection_message(errors: Sequence[Finding] | Sequence[Mapping[str, Any]]) -> str:
    """What a run rejected for lint errors says: how many there are, and the first.

    ``errors`` (at least one) are findings, or their :meth:`Finding.as_dict` form as a run
    record stores them.
    """
    first = errors[0]
    if isinstance(first, Finding):
        code, field, message = first.code, first.field, first.message
    else:
        code, field, message = first["code"], first["field"], first["message"]
    count = len(errors)
    return (f"The delegation was rejected ({count} lint error{'s' if count > 1 else ''}); "
            f"first: {code} at {field}: {message}")
