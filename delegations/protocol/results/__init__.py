"""Results: one canonical :class:`ResponsePackage` read from every dialect a subagent uses.

Dialects, recorded in ``ResponsePackage.dialect`` (``dialects`` reads the JSON ones,
``result_block`` the markdown one, ``parsing`` decides which a text is):

``yield_control`` (the hand-off protocol)
    The ``yield_control`` tool's arguments, as a dict, as JSON text, wrapped in a tool
    call (``{"name": "yield_control", "arguments": {...} | "<json>"}``, OpenAI's
    ``{"function": {...}}``, Anthropic's ``{"type": "tool_use", "input": {...}}``), or a
    JSON object inside prose or a ```json fence. Statuses SUCCESS, PARTIAL_COMPLETION,
    FAILURE, BLOCKED_AWAITING_CLARIFICATION (any case). ``output_payload`` must be an
    object; it is required for SUCCESS and PARTIAL_COMPLETION (the hand-off protocol
    marks it required) and defaults to ``{}`` otherwise. Every canonical field is accepted
    too, in snake_case or camelCase, including the agloop executor_output fields
    (files_modified, files_deleted, acceptance_criteria_confirmation, summary, warnings).
``result_block`` (the agloop delegation protocol)
    A ``## RESULT`` markdown block, possibly after prose (the last marker wins). Bullets
    ``**Status**`` (COMPLETE->SUCCESS, PARTIAL->PARTIAL_COMPLETION, FAILED->FAILURE),
    ``**Failed Reason**`` (a FailedReason), ``**Files Modified**``/``**Files Deleted**``
    (``[a, b]``, ``"none"``, ``a, b`` or sub-bullets), ``**Key Decisions**``,
    ``**Deliverables**``, ``**Blockers**``, ``**Warnings**``, ``**Open Questions**``
    (inline text, ``[a; b]`` or sub-bullets), ``**Needs Followup**`` (``agent: reason``;
    the first becomes ``handoff``), ``**Summary**``; other bullets go to output_payload
    under their snake_case name. A ```json fence in the prose holding an
    ``executor_output`` (or any ``*_output``) object supplies output_payload and its
    fields (acceptance_criteria_confirmation, summary, warnings...). Without a Summary
    bullet the prose before the block is the summary. JSON objects whose status is
    COMPLETE/PARTIAL/FAILED are read with the same mapping and the same dialect name.
``envelope`` (delegation contracts' result envelope)
    ``status`` completed->SUCCESS, needs_input/blocked->BLOCKED_AWAITING_CLARIFICATION,
    failed->FAILURE; ``summary`` (required string), ``evidence`` [{source, artifactId}]
    (each item needs a source or an artifact/tool call id), ``openQuestions``,
    ``artifacts``, ``handoff`` {recommendedRole, reason}. A completed envelope without
    evidence is accepted with a warning (success criteria decide whether that is enough).
``announce`` (OpenClaw sub-agents)
    ``status`` success->SUCCESS, error->FAILURE, timeout->FAILURE with error_report.code
    ERR_TIMEOUT; ``unknown`` (and anything else) is invalid. ``result``/``summary`` is the
    summary (an object result becomes output_payload), ``error`` the error details,
    ``notes`` the log summary, runtime and token usage go to ``metrics``. Also read when
    wrapped as ``{"announce": {...}}``.

A canonical dict (``ResponsePackage.model_dump()``, which carries ``dialect``) is read
back unchanged, so results round-trip through JSON.

FAILURE always carries an ``error_report``: when a dialect gives none, one is made from
what it does give (failed reason, blockers, error text) and a warning says so. Codes
without a better source are derived from the failed reason (CONTEXT_INSUFFICIENT ->
ERR_INSUFFICIENT_CONTEXT, TOOL_FAILURE -> ERR_TOOL_FAILURE, otherwise ``ERR_<REASON>``)
or ``ERR_UNSPECIFIED``.

:func:`parse_result` raises only ``ProtocolError(ERR_INVALID_RESULT)`` whatever it is
given, with a message naming the field and what was expected.
"""

from .dialects import parse_result_dict
from .models import (
    CANONICAL_FIELDS,
    CriterionConfirmation,
    ErrorReport,
    Evidence,
    Followup,
    Handoff,
    ResponsePackage,
    ResultDialect,
    ResultStatus,
)
from .parsing import MAX_RESULT_CHARS, parse_result, parse_result_text
from .reader import code_for_reason, followup_from_text
from .result_block import find_result_marker, parse_result_block

__all__ = [
    "CANONICAL_FIELDS", "MAX_RESULT_CHARS", "CriterionConfirmation", "ErrorReport", "Evidence",
    "Followup", "Handoff", "ResponsePackage", "ResultDialect", "ResultStatus", "code_for_reason",
    "find_result_marker", "followup_from_text", "parse_result", "parse_result_block",
    "parse_result_dict", "parse_result_text",
]
