"""Machine-verifiable success criteria, against the hand-off protocol's "Vague Success
Criteria" anti-pattern.

A criterion is either a structured dict (``forms``) or a line of free text that parses
into one (``grammar``); :func:`parse_criterion` reads either, and returns None for vague
text, which lint reports as ``VAGUE_CRITERIA``. :func:`evaluate_criteria`
(``evaluation``) checks a result against every criterion and reports each one, met or
not, with a detail saying why.
"""

from .evaluation import (
    CANNOT_SCORE,
    LABEL_SCORES,
    CriteriaReport,
    CriterionResult,
    check,
    criteria_summary,
    evaluate_criteria,
    label_score,
    locate,
    missing_inputs,
    percent,
    report_lists,
    resolve,
    result_text,
    unchecked_fields,
)
from .forms import (
    GROUNDING_KINDS,
    TYPE_ALIASES,
    Criterion,
    CriterionKind,
    describe,
    output_field,
    value_has_type,
)
from .grammar import criterion_issues, criterion_reading, parse_criterion, readable_criteria

__all__ = [
    "CANNOT_SCORE", "GROUNDING_KINDS", "LABEL_SCORES", "TYPE_ALIASES", "CriteriaReport", "Criterion",
    "CriterionKind", "CriterionResult", "check", "criteria_summary", "criterion_issues", "criterion_reading", "describe",
    "evaluate_criteria", "label_score", "locate", "missing_inputs", "output_field", "parse_criterion", "percent",
    "readable_criteria", "report_lists", "resolve", "result_text", "unchecked_fields", "value_has_type",
]
