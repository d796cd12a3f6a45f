"""Machine-verifiable success criteria, against the hand-off protocol's "Vague Success
Criteria" anti-pattern.

A criterion is either a structured dict (``forms``) or a line of free text that parses
into one (``grammar``); :func:`parse_criterion` reads either, and returns None for vague
text, which lint reports as ``VAGUE_CRITERIA``. :func:`evaluate_criteria`
(``evaluation``) checks a result against every criterion and reports each one, met or
not, with a detail saying why.
"""

from .evaluation import (
    CriteriaReport,
    CriterionResult,
    check,
    evaluate_criteria,
    locate,
    missing_inputs,
    resolve,
    result_text,
)
from .forms import GROUNDING_KINDS, TYPE_ALIASES, Criterion, CriterionKind, describe, value_has_type
from .grammar import criterion_issues, parse_criterion

__all__ = [
    "GROUNDING_KINDS", "TYPE_ALIASES", "CriteriaReport", "Criterion", "CriterionKind", "CriterionResult", "check",
    "criterion_issues", "describe", "evaluate_criteria", "locate", "missing_inputs", "parse_criterion", "resolve",
    "result_text", "value_has_type",
]
