"""Is this delegation well formed?

:func:`lint_packet` runs every check on one :class:`HandoffPacket` (and, given the
parent's packet, the checks that compare a child with its parent) and returns
:class:`Finding` s in a deterministic order: errors first, then warnings, then info; within
a severity in the order of :data:`CHECKS`, and within a check in field order.

Errors block a run (the runner rejects the packet); warnings and info don't. Severities
are set so that a minimal but sane packet (a goal, machine-verifiable criteria, a
timeout) gets no errors, while a delegation that cannot work or that widens its scope
does (depth beyond the limit, scope or budget beyond the parent's, an executor with
nothing to verify against).

Where the checks come from:

- ``agloop_checks``: the agloop delegation protocol's ten checks of a well-formed
  delegation, for agloop delegations (base params, role params, the anti-laziness
  checklist, specification adherence, retries, review depth).
- ``contract_checks``: delegation contracts (goal, allowed inputs, expected output
  schema, resource boundaries, completion criteria; budgets and capabilities that shrink
  down the chain; approval-required capabilities) and the hand-off protocol's
  anti-patterns (recursive loops / depth, implicit state, vague criteria, payload bloat,
  silent failure without a timeout).
- ``review``: :func:`review_depth`, the agloop review-depth decision tree.
- ``findings``: the codes, their severities, and :func:`rejection_message`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..budgets import left_after, narrow
from ..packet import HandoffPacket, parse_packet
from .agloop_checks import (
    STANDARD_CHECKLIST,
    check_base_params,
    check_executor,
    check_feature_name,
    check_placeholders,
    check_retry,
    check_role_params,
    check_tasks,
    check_verifier,
)
from .context import LintContext
from .contract_checks import (
    check_capabilities,
    check_contract,
    check_criteria,
    check_depth,
    check_iterations,
    check_parent_scope,
    check_payload,
    check_unknown_fields,
)
from .findings import (
    CHECKS,
    Finding,
    Severity,
    errors,
    finding_order,
    has_errors,
    rejection_message,
)
from .review import DOC_CONFIG_SUFFIXES, SECURITY_KEYWORDS, review_depth, review_depth_reason

__all__ = [
    "CHECKS", "DOC_CONFIG_SUFFIXES", "SECURITY_KEYWORDS", "STANDARD_CHECKLIST", "Finding",
    "Severity", "errors", "has_errors", "lint_packet", "rejection_message", "review_depth",
    "review_depth_reason",
]


def lint_packet(packet: HandoffPacket | dict[str, Any] | str,
                parent: HandoffPacket | dict[str, Any] | str | None = None, *,
                payload_limit_bytes: int = 65536, max_depth: int | None = None,
                approval_required: Iterable[str] | None = None,
                input_schema: dict[str, Any] | None = None) -> list[Finding]:
    """Every finding for ``packet`` (see :data:`CHECKS`), errors first, deterministic.

    ``parent`` enables the chain checks (depth, nesting, budget, timeout, capabilities,
    feature name). Budgets are compared with ``parent.budget`` as given: a runner that has
    metered the parent passes a copy whose budget is what is left
    (``budgets.remaining``). ``max_depth`` is the server's limit, ``approval_required`` its set of
    approval-required capabilities (default: network_outbound, file_delete, financial_tx);
    ``input_schema`` the skill's, which says what inputs exist (a criterion's ``source``).
    Packets given as dict/JSON are parsed first (ProtocolError when invalid).
    """
    packet = parse_packet(packet)
    parent_packet = parse_packet(parent) if parent is not None else None
    lint = LintContext(packet, parent_packet, input_schema)
    check_depth(lint, max_depth)
    if parent_packet is not None:
        check_parent_scope(lint, parent_packet)
    check_criteria(lint)
    check_feature_name(lint)
    check_role_params(lint)
    check_tasks(lint)
    check_payload(lint, payload_limit_bytes)
    check_contract(lint)
    check_capabilities(lint, approval_required)
    if lint.agloop:
        check_base_params(lint)
    check_executor(lint)
    check_retry(lint)
    check_verifier(lint)
    check_placeholders(lint)
    check_unknown_fields(lint)
    check_iterations(lint)
    findings = lint.findings
    planned = packet.planned_children
    if planned:   # none in most hand-offs: then there is no budget to narrow for them
        available = narrow(packet.budget, parent_packet.budget) if parent_packet is not None else packet.budget
        for index, child in enumerate(planned):
            # a planned child is judged as it will run: one level down, against this packet
            # with what its siblings leave of the budget (the tree editor's figure)
            placed = child.model_copy(update={"depth": packet.depth + 1})
            siblings = [sibling.budget for sibling in planned[:index] + planned[index + 1:]]
            view = packet.model_copy(update={"budget": left_after(available, siblings)})
            findings += [finding._replace(field=f"planned_children[{index}].{finding.field}".rstrip("."))
                         for finding in lint_packet(placed, view, payload_limit_bytes=payload_limit_bytes,
                                                    max_depth=max_depth, approval_required=approval_required)]
    if len(findings) > 1:
        findings.sort(key=finding_order)
    return findings
