"""Delegation-contract checks and the hand-off protocol's anti-patterns.

A delegation contract has five parts: a goal (1), the inputs it may be given (2), the
expected output schema (3), resource boundaries (4) and completion criteria (5); budgets
and capabilities only shrink down the chain, and approval-required capabilities are
flagged. The hand-off protocol's anti-patterns: recursive loops (depth), implicit state,
vague success criteria, large payload bloat, silent failure without a timeout, and no
turn left for self-correction. Fields nothing reads (probably misspelt) are reported too.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_json

from ..budgets import exceeds
from ..capabilities import APPROVAL_REQUIRED_CAPABILITIES, KNOWN_CAPABILITIES
from ..criteria import GROUNDING_KINDS, CriterionKind, missing_inputs, output_field, parse_criterion
from ..criteria.grounding import FETCHED_PAGES
from ..criteria.shaping import label_values
from ..errors import ProtocolError
from ..packet import ROLE_PARAMS_FIELDS, CriticParams, HandoffPacket, PlannerParams, TaskParams
from .context import LintContext, is_blank

_SECRET_KEY_RE = re.compile(
    r"(?:^|_)(?:api_?key|secret|secret_key|password|passwd|access_token|refresh_token|"
    r"auth_token|bearer|private_key|credentials?|token)$", re.IGNORECASE)
_SECRET_SCAN_DEPTH = 3
_SECRET_MIN_LENGTH = 8


@lru_cache(maxsize=4096)
def _is_vague_text(text: str) -> bool:
    return parse_criterion(text) is None


# -- recursive loops (the hand-off protocol) and nesting (OpenClaw sub-agents) ------------

def check_depth(lint: LintContext, server_max: int | None) -> None:
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
    if parent.depth > 0 and not parent.allow_nested and not parent.planned_children:
        lint.add("NESTING_NOT_ALLOWED", "depth", (
            f"The parent is a subagent (depth {parent.depth}) whose packet does not set "
            f"allow_nested, so it cannot spawn children. Delegate from the parent's own "
            f"parent, or set allow_nested on the parent's packet."))


# -- scope shrinks down the chain ----------------------------------------------------------

def check_parent_scope(lint: LintContext, parent: HandoffPacket) -> None:
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


def check_criteria(lint: LintContext) -> None:
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
    _check_criteria_targets(lint)
    for name in missing_inputs(packet.success_criteria, packet.input_data):
        lint.add("GROUNDING_INPUT_MISSING", f"input_data.{name}", (
            f"A success criterion checks the answer against input_data.{name}, which is not "
            f"given: give {name}, or the run will fail with ERR_INSUFFICIENT_CONTEXT whatever "
            "the subagent answers."))

def _check_criteria_targets(lint: LintContext) -> None:
    """What a criterion names must exist: ``confident`` an enum or boolean output field with
    a probability between 0 and 1; a grounding criterion's ``source`` an input the skill's
    input schema declares or the packet's ``allowed_inputs`` list (or gives). Without
    either, an input not given is GROUNDING_INPUT_MISSING's warning: the run then fails
    with ERR_INSUFFICIENT_CONTEXT naming it."""
    packet = lint.packet
    properties = (packet.expected_output_schema or {}).get("properties")
    declared = (lint.input_schema or {}).get("properties") if lint.input_schema else None
    known = isinstance(declared, dict) or packet.allowed_inputs is not None
    inputs = set(declared) if isinstance(declared, dict) else set()
    inputs |= set(packet.input_data) | set(packet.allowed_inputs or ())
    for index, raw in enumerate(packet.success_criteria):
        field = f"success_criteria[{index}]"
        try:
            criterion = parse_criterion(raw, field)
        except ProtocolError:
            continue   # reported above (INVALID_CRITERION)
        if criterion is None:
            continue
        if criterion.kind is CriterionKind.CONFIDENT:
            _check_confident(lint, field, criterion.params, properties)
        elif criterion.kind in GROUNDING_KINDS and known:
            for key in ("source", "words_of"):
                source = criterion.params.get(key)
                top = source.split(".")[0].split("[")[0] if isinstance(source, str) else None
                if top and top != FETCHED_PAGES and top not in inputs:
                    names = ", ".join(sorted(inputs)) or "none"
                    lint.add("CRITERION_SOURCE_UNKNOWN", field, (
                        f"This criterion checks the answer against the input `{source}`, which this "
                        f"delegation has no input named (its inputs: {names}). Name one of them."))


def _check_confident(lint: LintContext, field: str, params: dict[str, Any], properties: Any) -> None:
    path, minimum = str(params.get("path") or ""), params.get("min")
    if not isinstance(minimum, int | float) or not 0 <= minimum <= 1:
        lint.add("CONFIDENCE_OUT_OF_RANGE", field, (
            f"The lowest probability for `{path}` must be between 0 and 1 (got {minimum!r}); "
            "write 80% as 0.8."))
    name = output_field(path)
    spec = properties.get(name) if isinstance(properties, dict) else None
    if spec is None:
        lint.add("CONFIDENT_NOT_A_LABEL", field, (
            f"A confident criterion needs `{name}` to be an output field with a few allowed values, "
            "and the expected output schema has no such field; add it as an enum or a boolean."))
    elif not label_values(spec):
        lint.add("CONFIDENT_NOT_A_LABEL", field, (
            f"`{name}` is not a label (an enum or a boolean output field), so no model can give a "
            f"probability for its value; use confident on a label, or another kind of criterion "
            "for this field."))


# -- payload bloat, implicit state, the contract's parts, capabilities ---------------------

def check_payload(lint: LintContext, limit: int) -> None:
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


def _approximate_size(lint: LintContext) -> int:
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


def _passes_context(lint: LintContext) -> bool:
    packet = lint.packet
    if packet.input_data or lint.present or packet.previous_failure is not None:
        return True
    context = packet.context
    return context is not None and bool(
        context.original_request or context.completed_steps or context.intermediate_results
        or context.relevant_files or context.decisions or context.summary)


def check_contract(lint: LintContext) -> None:
    packet = lint.packet
    if packet.timeout_s is None and packet.budget.max_runtime_s is None:
        lint.add("NO_TIMEOUT", "timeout_s", (
            "Add a timeout (timeout_s) so a stuck subagent ends with ERR_TIMEOUT instead of "
            "waiting forever."))
    if is_blank(packet.goal):
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


def check_capabilities(lint: LintContext, approval_required: Iterable[str] | None) -> None:
    required = (APPROVAL_REQUIRED_CAPABILITIES if approval_required is None
                else frozenset(approval_required))
    for index, capability in enumerate(lint.packet.capabilities):
        field = f"capabilities[{index}]"
        if capability in required:
            # a skill's capability is what the skill needs: removing it is no advice
            advice = ("An approval rule can decide such requests without asking." if lint.packet.skill
                      else "Remove it if the task can do without.")
            lint.add("APPROVAL_REQUIRED_CAPABILITY", field, (
                f"'{capability}' needs explicit approval: every use will wait in the approval "
                f"inbox for a person. {advice}"))
        if capability not in KNOWN_CAPABILITIES:
            near = difflib.get_close_matches(capability, sorted(KNOWN_CAPABILITIES), n=1)
            hint = f" Did you mean '{near[0]}'?" if near else ""
            lint.add("UNKNOWN_CAPABILITY", field, (
                f"'{capability}' is not a known capability, so no tool provides it.{hint} "
                f"Known: {', '.join(sorted(KNOWN_CAPABILITIES))}."))


# -- fields nothing reads, room to self-correct ---------------------------------------------

def check_unknown_fields(lint: LintContext) -> None:
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


def check_iterations(lint: LintContext) -> None:
    if lint.packet.max_iterations == 1:
        lint.add("NO_SELF_CORRECTION", "max_iterations", (
            "max_iterations is 1, so a failed first attempt cannot self-correct (the hand-off "
            "protocol allows one self-correction); use at least 2."))
