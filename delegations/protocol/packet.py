"""The hand-off packet: one canonical model for every seed's way of delegating (DESIGN §2.3).

:class:`HandoffPacket` is the canonical, snake_case form. :func:`parse_packet` accepts what
the seeds write and normalizes it:

- seed 000 ``delegate_task`` arguments (``subagent_type``, ``instruction_set``,
  ``input_data``, ``max_iterations``, ``termination_trigger``), its parent-request example
  (``payload`` -> ``input_data``, ``success_criteria``), and a whole tool call
  (``{"name": "delegate_task", "arguments": {...}}``);
- seed 001 delegations: base params nested under ``base_params`` or flat, one
  ``<role>_params`` block (``subagent_type`` is inferred from it), the anti-laziness
  checklist (a list, or the seed's markdown block as one string), specification
  adherence, previous failure and review depth;
- seed 002 ``HandoffPackage`` (``task`` / ``context`` / ``metadata`` / ``expectations``,
  camelCase);
- seed 003 contracts (``goal``, ``allowedInputs``, ``expectedOutput`` schema, budgets under
  ``budget`` / ``budgets`` / ``resourceBoundaries`` / ``limits`` or flat, capability scope,
  ``completionCriteria``);
- seed 004 ``sessions_spawn`` parameters (``task`` text, ``label``, ``agentId``, ``model``,
  ``thinking``, ``runTimeoutSeconds``, ``cleanup``).

Keys of the packet and of its typed parts are converted from camelCase to snake_case;
free-form data (``input_data``, intermediate results, context maps, schemas) is never
touched.

Unknown keys are kept, never dropped silently: unknown top-level keys go to
``packet.extra`` under the spelling the input used (an unknown key inside a recognized
block under its dotted path, e.g. ``"capabilityScope.max_searches"``); unknown keys inside
a typed part stay on that part (pydantic ``extra="allow"``, visible in ``model_extra`` and
in the serialized packet). Lint reports
each one as ``UNKNOWN_FIELD`` so a misspelt field is noticed. ``HandoffPacket.model_validate``
takes the canonical form only and rejects unknown top-level keys.

Derived values (only when the packet does not say): ``goal`` from ``task.description``,
seed 004's ``task`` text, the role's ``task_definition`` (description, else title),
``feature_name`` or ``instruction_set``, in that order; ``task_id`` from ``task.id``;
``subagent_type`` from the one ``<role>_params`` block present, else from
``metadata.target_agent`` when that names a subagent type. ``review_depth`` and
``verifier_params.review_depth`` are kept equal (either spelling fills the other).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from datetime import date, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails

from .budgets import BUDGET_AXES, Budget
from .criteria import criterion_issues
from .errors import ErrorCode, Issue, ProtocolError
from .schemas import join_path, normalize_schema_issues


class SubagentType(StrEnum):
    """DESIGN §2.2: seed 000's four types plus seed 001's agloop roles."""

    CODER = "coder"
    RESEARCHER = "researcher"
    REVIEWER = "reviewer"
    EXECUTOR = "executor"
    PLANNER = "planner"
    CRITIC = "critic"
    VERIFIER = "verifier"


SUBAGENT_TYPES: tuple[str, ...] = tuple(member.value for member in SubagentType)
AGLOOP_ROLES: tuple[str, ...] = ("researcher", "planner", "critic", "executor", "verifier")
ROLE_PARAMS_FIELDS: dict[str, str] = {role: f"{role}_params" for role in AGLOOP_ROLES}
# seed 001 "Base Parameters": the eight fields every agloop delegation carries.
BASE_PARAM_FIELDS: tuple[str, ...] = (
    "task_id", "feature_name", "feature_description", "current_phase",
    "current_state_summary", "plan_path", "state_path", "log_path",
)
CURRENT_PHASES: tuple[str, ...] = (
    "init", "research", "plan", "critique", "execute", "verify", "complete")
REVIEW_DEPTHS: tuple[str, ...] = ("full", "standard", "lightweight")

ReviewDepth = Literal["full", "standard", "lightweight"]
Phase = Literal["init", "research", "plan", "critique", "execute", "verify", "complete"]


def _no_bool(value: Any) -> Any:
    # pydantic's lax mode reads True as 1; a boolean count is always a mistake.
    if isinstance(value, bool):
        raise ValueError("expected a number, not true/false")
    return value


Count = Annotated[int, BeforeValidator(_no_bool)]
Number = Annotated[int | float, BeforeValidator(_no_bool)]
Criterion = str | dict[str, Any]


class _Part(BaseModel):
    """A typed part of the packet; unknown keys are kept (see the module docstring)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


class SpecificationAdherence(_Part):
    """seed 001 "Specification Adherence"."""

    required_patterns: list[str] = Field(default_factory=list)
    forbidden_patterns: list[str] = Field(default_factory=list)
    tech_choices: list[str] = Field(default_factory=list)


class PreviousFailure(_Part):
    """seed 001 ``previous_failure``: filled on a fresh-context retry."""

    attempt_number: Count | None = Field(default=None, ge=1)
    failure_report: str = ""
    specific_failures: list[str] = Field(default_factory=list)
    fix_instructions: str = ""


class TaskDefinition(_Part):
    """seed 001 ``task_definition`` (plus the plan fields the review-depth tree reads)."""

    id: str | None = None
    title: str | None = None
    description: str | None = None
    files_to_modify: list[str] = Field(default_factory=list)
    files_to_read: list[str] = Field(default_factory=list)
    estimated_effort: str | None = None    # "small" | "medium" | "large" (seed 001 plans)
    priority: str | None = None            # "high"/"critical" count as high-priority
    critical_path: bool | None = None      # many other tasks depend on it


class RevisionFeedback(_Part):
    """seed 001 planner ``revision_feedback`` (non-null on revision, from the critic)."""

    iteration: Count | None = None
    objection: str | None = None
    suggested_fix: str | None = None
    previous_plan_path: str | None = None


class PreviousObjection(_Part):
    """seed 001 critic ``previous_objections`` item."""

    iteration: Count | None = None
    objection: str | None = None
    response: str | None = None
    resolved: bool | None = None
    objection_category: str | None = None
    severity: str | None = None


class ResearcherParams(_Part):
    complexity_level: Literal["simple", "medium", "complex"] | None = None
    research_mode: Literal["codebase_only", "codebase_plus_latest_guidance"] | None = None
    focus_areas: list[str] = Field(default_factory=list)
    known_patterns: list[str] = Field(default_factory=list)
    workspace_root: str | None = None


class PlannerParams(_Part):
    research_findings: Any = None
    context_map: Any = None
    latest_guidance: Any = None
    constraints: list[str] = Field(default_factory=list)
    revision_feedback: RevisionFeedback | None = None


class CriticParams(_Part):
    plan_yaml_path: str | None = None
    iteration_number: Count | None = Field(default=None, ge=1)
    max_iterations: Count | None = Field(default=None, ge=1)
    previous_objections: list[PreviousObjection] = Field(default_factory=list)
    feature_name: str | None = None
    research_findings: Any = None


class TaskParams(_Part):
    task_definition: TaskDefinition | None = None
    # A monolithic delegation (seed 001 failure mode 2) lists several tasks; they are kept
    # here so lint can report MULTIPLE_TASKS instead of the parser hiding them.
    tasks: list[TaskDefinition] = Field(default_factory=list)
    acceptance_criteria: list[str] = Field(default_factory=list)

    @property
    def task_definitions(self) -> list[TaskDefinition]:
        first = [self.task_definition] if self.task_definition is not None else []
        return first + self.tasks


class ExecutorParams(TaskParams):
    context_map: Any = None


class VerifierParams(TaskParams):
    executor_result: dict[str, Any] | None = None
    review_depth: ReviewDepth | None = None


class TaskSpec(_Part):
    """seed 002 ``task``."""

    id: str | None = None
    type: str | None = None
    description: str | None = None
    requirements: list[str] = Field(default_factory=list)


class HandoffContext(_Part):
    """seed 002 ``context`` (+ ``summary``, added by the direct hand-off pattern)."""

    original_request: str | None = None
    completed_steps: list[Any] = Field(default_factory=list)
    intermediate_results: dict[str, Any] = Field(default_factory=dict)
    relevant_files: list[str] = Field(default_factory=list)
    decisions: list[Any] = Field(default_factory=list)
    summary: str | None = None


class HandoffMetadata(_Part):
    """seed 002 ``metadata``; dates are kept as the ISO text they came as."""

    source_agent: str | None = None
    target_agent: str | None = None
    timestamp: str | None = None
    priority: Number | None = None
    deadline: str | None = None
    attempt: Count | None = Field(default=None, ge=1)


_NO_BUDGET = Budget()


class HandoffPacket(BaseModel):
    """One delegation, in canonical form. See the module docstring for the spellings."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # seed 000 delegate_task
    task_id: str | None = None
    subagent_type: SubagentType | None = None
    skill: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][\w.\-]*(@[\w.\-+]+)?$")
    goal: str | None = None
    instruction_set: str | None = None
    input_data: dict[str, Any] = Field(default_factory=dict)
    max_iterations: Count = Field(default=5, ge=1)
    termination_trigger: str | None = None
    success_criteria: list[Criterion] = Field(default_factory=list)
    # seed 003 contract
    expected_output_schema: dict[str, Any] | None = None
    allowed_inputs: list[str] | None = None
    timeout_s: float | None = Field(default=None, gt=0)
    budget: Budget = _NO_BUDGET
    capabilities: list[str] = Field(default_factory=list)
    depth: Count = Field(default=0, ge=0)
    max_depth: Count = Field(default=3, ge=0)
    allow_nested: bool = False
    # seed 004 sessions_spawn
    label: str | None = None
    agent_id: str | None = None
    model: str | None = None
    thinking: str | None = None
    cleanup: Literal["keep", "delete"] = "keep"
    # seed 001
    previous_failure: PreviousFailure | None = None
    review_depth: ReviewDepth | None = None
    feature_name: str | None = None
    feature_description: str | None = None
    current_phase: Phase | None = None
    current_state_summary: str | None = None
    plan_path: str | None = None
    state_path: str | None = None
    log_path: str | None = None
    researcher_params: ResearcherParams | None = None
    planner_params: PlannerParams | None = None
    critic_params: CriticParams | None = None
    executor_params: ExecutorParams | None = None
    verifier_params: VerifierParams | None = None
    anti_laziness_checklist: list[str] | None = None
    specification_adherence: SpecificationAdherence | None = None
    # seed 002
    task: TaskSpec | None = None
    context: HandoffContext | None = None
    metadata: HandoffMetadata | None = None
    # unknown top-level keys, kept verbatim
    extra: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _review_depth_in_one_place(self) -> HandoffPacket:
        # seed 001 writes review_depth inside verifier_params; the runner reads the top
        # level. Either spelling fills the other so both always agree.
        params = self.verifier_params
        if params is None:
            return self
        if self.review_depth is None:
            self.review_depth = params.review_depth
        elif params.review_depth is None:
            params.review_depth = self.review_depth
        elif params.review_depth != self.review_depth:
            raise ValueError(
                f"review_depth is {self.review_depth!r} but verifier_params.review_depth is "
                f"{params.review_depth!r}; give it once")
        return self

    # -- serialization -------------------------------------------------------------
    def to_dict(self, *, include_defaults: bool = False) -> dict[str, Any]:
        """JSON-ready dict; by default without fields left at their defaults (canonical)."""
        return self.model_dump(mode="json", exclude_defaults=not include_defaults)

    def canonical_json(self) -> str:
        """Sorted keys, no whitespace, defaults left out: equivalent spellings give equal text."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False, allow_nan=False)

    def packet_hash(self) -> str:
        """sha256 hex of :meth:`canonical_json` (a run's input hash, seed 003)."""
        return hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()

    # -- reading helpers -----------------------------------------------------------
    @property
    def role_params(self) -> BaseModel | None:
        """The ``<role>_params`` block of this packet's own subagent type, if any."""
        if self.subagent_type is None or self.subagent_type not in ROLE_PARAMS_FIELDS:
            return None
        value: BaseModel | None = getattr(self, ROLE_PARAMS_FIELDS[self.subagent_type])
        return value

    @property
    def present_role_params(self) -> list[str]:
        """Names of the ``<role>_params`` fields that are set, in role order."""
        return [name for name in ROLE_PARAMS_FIELDS.values() if getattr(self, name) is not None]

    @property
    def attempt(self) -> int:
        """Which attempt this is (1 = first): metadata.attempt, else previous_failure's."""
        if self.metadata is not None and self.metadata.attempt is not None:
            return self.metadata.attempt
        if self.previous_failure is not None and self.previous_failure.attempt_number:
            return self.previous_failure.attempt_number
        return 1

    @property
    def may_delegate(self) -> bool:
        """Whether a run of this packet may spawn children.

        The root (depth 0) is the main agent and may; a subagent may only when its packet
        says ``allow_nested`` (seed 004: sub-agents cannot spawn their own by default).
        Either way the children would be at depth + 1, which must stay <= max_depth.
        """
        return (self.depth == 0 or self.allow_nested) and self.depth < self.max_depth


# ---------------------------------------------------------------------------------
# parse_packet: every seed spelling -> HandoffPacket
# ---------------------------------------------------------------------------------

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SNAKE_CACHE: dict[str, str] = {}
_CANONICAL_FIELDS = frozenset(HandoffPacket.model_fields)
_MAX_ISSUE_INPUT = 60

# top-level spellings (after snake-casing) -> canonical field
_TOP_ALIASES: dict[str, str] = {
    "payload": "input_data",
    "input": "input_data",
    "instructions": "instruction_set",
    "system_prompt": "instruction_set",
    "objective": "goal",
    "agent_type": "subagent_type",
    "role": "subagent_type",
    "skill_ref": "skill",
    "output_schema": "expected_output_schema",
    "expected_output": "expected_output_schema",
    "output_format": "expected_output_schema",
    "timeout_seconds": "timeout_s",
    "timeout": "timeout_s",
    "depth_limit": "max_depth",
    "allow_nesting": "allow_nested",
    "allowed_capabilities": "capabilities",
}
_CRITERIA_KEYS = ("success_criteria", "completion_criteria", "acceptance_criteria", "criteria")
_BUDGET_CONTAINERS = frozenset({
    "budget", "budgets", "resource_boundaries", "resources", "resource_limits", "limits"})
_BUDGET_ALIASES: dict[str, str] = {
    "max_runtime_seconds": "max_runtime_s", "max_runtime_sec": "max_runtime_s",
    "max_runtime": "max_runtime_s", "max_calls": "max_model_calls",
    "max_total_tokens": "max_tokens", "total_tokens": "max_tokens",
    "max_cost": "max_cost_usd", "max_external_cost": "max_cost_usd",
    "max_external_cost_usd": "max_cost_usd", "max_parallel": "max_concurrency",
    "max_concurrent": "max_concurrency",
}
# Budget axes that may also sit flat at the top level (max_iterations may not: there it
# is delegate_task's own loop limit).
_FLAT_BUDGET_KEYS = frozenset(
    (set(BUDGET_AXES) - {"max_iterations"}) | set(_BUDGET_ALIASES) | {"max_runtime_ms"})
_SCOPE_KEYS = frozenset({"scope", "capability_scope"})
_SCOPE_FIELDS: dict[str, str] = {
    "capabilities": "capabilities", "allowed": "capabilities", "tools": "capabilities",
    "allowed_capabilities": "capabilities", "depth": "depth", "max_depth": "max_depth",
    "depth_limit": "max_depth", "allow_nested": "allow_nested",
}
_TOOL_CALL_NAMES = frozenset({"delegate_task", "sessions_spawn"})
_CHECKLIST_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])?\s*(?:\[[ xX]?\]\s*)?")


def _snake(key: str) -> str:
    """camelCase / kebab-case -> snake_case (memoized: the same few keys repeat)."""
    found = _SNAKE_CACHE.get(key)
    if found is None:
        found = _CAMEL_BOUNDARY.sub("_", key).replace("-", "_").lower()
        if len(_SNAKE_CACHE) < 4096:
            _SNAKE_CACHE[key] = found
    return found


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_ISSUE_INPUT else text[: _MAX_ISSUE_INPUT - 3] + "..."


class _Normalizer:
    """One parse: builds the canonical dict and collects every issue on the way."""

    def __init__(self) -> None:
        self.issues: list[Issue] = []
        self.out: dict[str, Any] = {}
        # canonical field (or "budget.<axis>") -> the spelling the input used, so that
        # validation issues name what the person actually wrote
        self.origin: dict[str, str] = {}
        self.extra: dict[str, Any] = {}
        self.criteria: list[Criterion] = []
        self.criteria_from: str | None = None
        self.budget: dict[str, Any] = {}
        self.attempt: tuple[Any, str] | None = None   # a top-level "attempt" (seed 002 spelling)

    # -- helpers ---------------------------------------------------------------------
    def put(self, field: str, value: Any, source: str) -> None:
        """Set a canonical field; the same field given twice must agree."""
        if field in self.out:
            if self.out[field] != value:
                first = self.origin.get(field, field)
                self.issues.append(Issue(source, (
                    f"gives {field} as {_short(value)} but {first} already gave "
                    f"{_short(self.out[field])}; give it once")))
            return
        self.out[field] = value
        if source != field:
            self.origin[field] = source

    def put_budget(self, axis: str, value: Any, source: str) -> None:
        key = _BUDGET_ALIASES.get(axis, axis)
        if key == "max_runtime_ms":
            seconds = self.milliseconds(value, source)
            if seconds is None:
                return
            key, value = "max_runtime_s", seconds
        if key in self.budget and self.budget[key] != value:
            self.issues.append(Issue(source, (
                f"gives budget.{key} as {_short(value)} but it was already "
                f"{_short(self.budget[key])}; give it once")))
            return
        self.budget[key] = value
        self.origin[f"budget.{key}"] = source

    def milliseconds(self, value: Any, source: str) -> float | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.issues.append(Issue(source, (
                f"must be a number of milliseconds (got {_short(value)})")))
            return None
        return value / 1000

    def add_criteria(self, value: Any, source: str) -> None:
        if value is None:
            return
        items = [value] if isinstance(value, str | dict) else value
        if not isinstance(items, list):
            self.issues.append(Issue(source, (
                f"must be a list of criteria (strings or objects); got {_short(value)}")))
            return
        if self.criteria_from is None:
            self.criteria_from = source
        for item in items:
            if item not in self.criteria:
                self.criteria.append(item)

    def snake_dict(self, value: Any, source: str,
                   aliases: dict[str, str] | None = None) -> dict[str, Any] | None:
        """Keys of one typed part to snake_case; a non-object is left for pydantic to report."""
        if not isinstance(value, dict):
            return None
        out: dict[str, Any] = {}
        for raw_key, item in value.items():
            if not isinstance(raw_key, str):
                self.issues.append(Issue(source, f"keys must be strings (got {_short(raw_key)})"))
                continue
            key = _snake(raw_key)
            if aliases:
                key = aliases.get(key, key)
            if key in out and out[key] != item:
                self.issues.append(Issue(f"{source}.{raw_key}", (
                    f"repeats {key} with a different value; give it once")))
                continue
            out[key] = item
        return out

    # -- the pieces ------------------------------------------------------------------
    def budget_block(self, value: Any, source: str) -> None:
        if isinstance(value, Budget):
            value = value.as_dict(include_unlimited=False)
        if not isinstance(value, dict):
            self.issues.append(Issue(source, (
                f"must be an object of limits such as {{\"max_tokens\": 20000}}; got "
                f"{_short(value)}")))
            return
        for raw_axis, item in value.items():
            if not isinstance(raw_axis, str):
                self.issues.append(Issue(source, f"keys must be strings (got {_short(raw_axis)})"))
                continue
            self.put_budget(_snake(raw_axis), item, f"{source}.{raw_axis}")

    def scope_block(self, value: Any, source: str) -> None:
        if isinstance(value, list):
            self.put("capabilities", value, source)
            return
        block = self.snake_dict(value, source)
        if block is None:
            self.issues.append(Issue(source, (
                f"must be a list of capabilities or an object with 'capabilities'; got "
                f"{_short(value)}")))
            return
        for key, item in block.items():
            field = _SCOPE_FIELDS.get(key)
            if field is None:
                self.extra[f"{source}.{key}"] = item
            else:
                self.put(field, item, f"{source}.{key}")

    def expectations_block(self, value: Any, source: str) -> None:
        block = self.snake_dict(value, source)
        if block is None:
            self.issues.append(Issue(source, (
                "must be an object with outputFormat, successCriteria and timeoutMs")))
            return
        for key, item in block.items():
            where = f"{source}.{key}"
            if key in ("output_format", "output_schema", "expected_output"):
                self.put("expected_output_schema", item, where)
            elif key in _CRITERIA_KEYS:
                self.add_criteria(item, where)
            elif key == "timeout_ms":
                seconds = self.milliseconds(item, where)
                if seconds is not None:
                    self.put("timeout_s", seconds, where)
            elif key in ("timeout_s", "timeout_seconds", "timeout"):
                self.put("timeout_s", item, where)
            else:
                self.extra[f"{source}.{key}"] = item

    def task_block(self, value: Any, source: str) -> None:
        if isinstance(value, str):  # seed 004: task is the work assignment text
            self.put("goal", value, source)
            return
        self.put("task", self.snake_dict(value, source) if isinstance(value, dict) else value,
                 source)

    def role_params(self, field: str, value: Any, source: str) -> None:
        block = self.snake_dict(value, source)
        if block is None:
            self.put(field, value, source)
            return
        definition = block.get("task_definition")
        if isinstance(definition, list):
            # a list of tasks: one is fine; several are kept for lint (MULTIPLE_TASKS)
            tasks = [self.snake_dict(item, f"{source}.task_definition") or item
                     for item in definition]
            block["task_definition"] = tasks[0] if tasks else None
            block["tasks"] = tasks[1:] + list(block.get("tasks") or [])
        elif isinstance(definition, dict):
            block["task_definition"] = self.snake_dict(definition, f"{source}.task_definition")
        if isinstance(block.get("tasks"), list):
            block["tasks"] = [self.snake_dict(item, f"{source}.tasks") or item
                              for item in block["tasks"]]
        feedback = block.get("revision_feedback")
        if isinstance(feedback, dict):
            block["revision_feedback"] = self.snake_dict(feedback, f"{source}.revision_feedback")
        objections = block.get("previous_objections")
        if isinstance(objections, list):
            block["previous_objections"] = [
                self.snake_dict(item, f"{source}.previous_objections") or item
                for item in objections]
        criteria = block.get("acceptance_criteria")
        if isinstance(criteria, str):
            block["acceptance_criteria"] = [criteria]
        self.put(field, block, source)

    def previous_failure(self, value: Any, source: str) -> None:
        block = self.snake_dict(value, source, {"attempt": "attempt_number"})
        if block is None:
            self.put("previous_failure", value, source)
            return
        fix = block.get("fix_instructions")
        if isinstance(fix, list) and all(isinstance(item, str) for item in fix):
            block["fix_instructions"] = "\n".join(fix)
        failures = block.get("specific_failures")
        if isinstance(failures, str):
            block["specific_failures"] = [failures]
        self.put("previous_failure", block, source)

    def metadata_block(self, value: Any, source: str) -> None:
        block = self.snake_dict(value, source)
        if block is None:
            self.put("metadata", value, source)
            return
        for key in ("timestamp", "deadline"):
            if isinstance(block.get(key), datetime | date):
                block[key] = block[key].isoformat()
        self.put("metadata", block, source)

    def checklist(self, value: Any, source: str) -> None:
        if isinstance(value, str):
            # seed 001 prints the checklist as a markdown block: one item per bullet line
            items = []
            for line in value.splitlines():
                if not line.lstrip().startswith(("-", "*", "+")) and not line.strip()[:1].isdigit():
                    continue
                text = _CHECKLIST_BULLET.sub("", line, count=1).strip()
                if text:
                    items.append(text)
            value = items
        self.put("anti_laziness_checklist", value, source)

    def base_params(self, value: Any, source: str) -> None:
        block = self.snake_dict(value, source)
        if block is None:
            self.issues.append(Issue(source, "must be an object of seed 001 base parameters"))
            return
        for key, item in block.items():
            self.top(key, item, f"{source}.{key}")

    # -- one top-level key -------------------------------------------------------------
    def top(self, key: str, value: Any, source: str) -> None:
        route = _ROUTES.get(key)
        if route is None:
            route = _route(key)
        route[1](self, route[0], value, source)


def _h_budget(norm: _Normalizer, key: str, value: Any, source: str) -> None:
    norm.budget_block(value, source)


def _h_scope(norm: _Normalizer, key: str, value: Any, source: str) -> None:
    norm.scope_block(value, source)


def _h_criteria(norm: _Normalizer, key: str, value: Any, source: str) -> None:
    norm.add_criteria(value, source)


def _h_timeout_ms(norm: _Normalizer, key: str, value: Any, source: str) -> None:
    seconds = norm.milliseconds(value, source)
    if seconds is not None:
        norm.put("timeout_s", seconds, source)


def _h_run_timeout(norm: _Normalizer, key: str, value: Any, source: str) -> None:
    # seed 004 (OpenClaw): runTimeoutSeconds 0 means "no timeout"
    if value == 0 and not isinstance(value, bool):
        return
    norm.put("timeout_s", value, source)


def _h_expectations(norm: _Normalizer, key: str, value: Any, source: str) -> None:
    norm.expectations_block(value, source)


def _h_task(norm: _Normalizer, key: str, value: Any, source: str) -> None:
    norm.task_block(value, source)


def _h_role(norm: _Normalizer, key: str, value: Any, source: str) -> None:
    norm.role_params(key, value, source)


def _h_previous_failure(norm: _Normalizer, key: str, value: Any, source: str) -> None:
    if value is not None:
        norm.previous_failure(value, source)


def _h_part(norm: _Normalizer, key: str, value: Any, source: str) -> None:
    norm.put(key, norm.snake_dict(value, source) if isinstance(value, dict) else value, source)


def _h_metadata(norm: _Normalizer, key: str, value: Any, source: str) -> None:
    norm.metadata_block(value, source)


def _h_checklist(norm: _Normalizer, key: str, value: Any, source: str) -> None:
    norm.checklist(value, source)


def _h_base(norm: _Normalizer, key: str, value: Any, source: str) -> None:
    norm.base_params(value, source)


def _h_attempt(norm: _Normalizer, key: str, value: Any, source: str) -> None:
    norm.attempt = (value, source)


def _h_extra(norm: _Normalizer, key: str, value: Any, source: str) -> None:
    # a canonical packet's own extra dict: keep its keys as they are
    if isinstance(value, dict):
        for extra_key, item in value.items():
            norm.extra[extra_key] = item
    else:
        norm.issues.append(Issue(source, f"must be an object (got {_short(value)})"))


def _h_allowed_inputs(norm: _Normalizer, key: str, value: Any, source: str) -> None:
    if isinstance(value, str):
        value = [value]
    elif isinstance(value, dict):  # {"name": "why it may be passed"}: the names are the list
        value = list(value)
    norm.put("allowed_inputs", value, source)


def _h_put(norm: _Normalizer, key: str, value: Any, source: str) -> None:
    norm.put(key, value, source)


def _h_flat_budget(norm: _Normalizer, key: str, value: Any, source: str) -> None:
    norm.put_budget(key, value, source)


def _h_unknown(norm: _Normalizer, key: str, value: Any, source: str) -> None:
    # kept under the spelling (and path) the input used, so a person finds it
    norm.extra[source] = value


_Handler = Callable[[_Normalizer, str, Any, str], None]
_HANDLERS: dict[str, _Handler] = {
    **{name: _h_budget for name in _BUDGET_CONTAINERS},
    **{name: _h_scope for name in _SCOPE_KEYS},
    **{name: _h_criteria for name in _CRITERIA_KEYS},
    "timeout_ms": _h_timeout_ms,
    "run_timeout_seconds": _h_run_timeout,
    "expectations": _h_expectations,
    "task": _h_task,
    **{name: _h_role for name in ROLE_PARAMS_FIELDS.values()},
    "previous_failure": _h_previous_failure,
    "specification_adherence": _h_part,
    "context": _h_part,
    "metadata": _h_metadata,
    "anti_laziness_checklist": _h_checklist,
    "base_params": _h_base,
    "attempt": _h_attempt,
    "extra": _h_extra,
    "allowed_inputs": _h_allowed_inputs,
}


# snake_case key -> (canonical key, handler), memoized: the same few keys repeat
_ROUTES: dict[str, tuple[str, _Handler]] = {}


def _route(key: str) -> tuple[str, _Handler]:
    canonical = _TOP_ALIASES.get(key, key)
    handler = _HANDLERS.get(canonical)
    if handler is None:
        if canonical in _CANONICAL_FIELDS:
            handler = _h_put
        elif canonical in _FLAT_BUDGET_KEYS:
            handler = _h_flat_budget
        else:
            handler = _h_unknown
    route = (canonical, handler)
    if len(_ROUTES) < 4096:
        _ROUTES[key] = route
    return route


def _load(data: dict[str, Any] | str | bytes | bytearray) -> dict[str, Any]:
    if isinstance(data, bytes | bytearray):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(ErrorCode.INVALID_PACKET,
                                f"The packet is not UTF-8 text: {exc}. Send JSON.",
                                issues=[Issue("", "not UTF-8 text")]) from None
    if isinstance(data, str):
        try:
            data = json.loads(data, parse_constant=_reject_constant)
        except ValueError as exc:
            raise ProtocolError(
                ErrorCode.INVALID_PACKET,
                f"The packet is not valid JSON: {exc}. Send one JSON object.",
                issues=[Issue("", f"not valid JSON: {exc}")]) from None
    if not isinstance(data, dict):
        raise ProtocolError(
            ErrorCode.INVALID_PACKET,
            f"A packet is a JSON object; got {type(data).__name__}.",
            issues=[Issue("", f"expected an object, got {type(data).__name__}")])
    return _unwrap_tool_call(data)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _unwrap_tool_call(data: dict[str, Any]) -> dict[str, Any]:
    """A whole delegate_task / sessions_spawn call -> its arguments."""
    if data.get("name") not in _TOOL_CALL_NAMES:
        return data
    arguments = data.get("arguments", data.get("input", data.get("parameters")))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError as exc:
            raise ProtocolError(
                ErrorCode.INVALID_PACKET,
                f"The {data['name']} call's arguments are not valid JSON: {exc}.",
                issues=[Issue("arguments", f"not valid JSON: {exc}")]) from None
    return arguments if isinstance(arguments, dict) else data


def _derive(out: dict[str, Any], issues: list[Issue]) -> None:
    """Fill goal / task_id / subagent_type from what the packet says elsewhere."""
    kind = out.get("subagent_type")
    if isinstance(kind, str) and kind.strip().lower() in SUBAGENT_TYPES:
        out["subagent_type"] = kind.strip().lower()
    verifier = out.get("verifier_params")
    nested_depth = verifier.get("review_depth") if isinstance(verifier, dict) else None
    if nested_depth is not None and out.get("review_depth") not in (None, nested_depth):
        issues.append(Issue("verifier_params.review_depth", (
            f"is {_short(nested_depth)} but review_depth is {_short(out['review_depth'])}; "
            "give the review depth once")))
        del verifier["review_depth"]  # type: ignore[union-attr]
    task = out.get("task")
    task = task if isinstance(task, dict) else {}
    if out.get("task_id") is None and isinstance(task.get("id"), str):
        out["task_id"] = task["id"]
    if out.get("subagent_type") is None:
        present = [role for role, field in ROLE_PARAMS_FIELDS.items() if out.get(field) is not None]
        metadata = out.get("metadata")
        target = metadata.get("target_agent") if isinstance(metadata, dict) else None
        if len(present) == 1:
            out["subagent_type"] = present[0]
        elif not present and isinstance(target, str) and target in SUBAGENT_TYPES:
            out["subagent_type"] = target
    if out.get("goal") is None:
        goal = _goal_from(out, task)
        if goal:
            out["goal"] = goal


def _goal_from(out: dict[str, Any], task: dict[str, Any]) -> str | None:
    if isinstance(task.get("description"), str) and task["description"].strip():
        return str(task["description"])
    for field in ("executor_params", "verifier_params"):
        params = out.get(field)
        definition = params.get("task_definition") if isinstance(params, dict) else None
        if isinstance(definition, dict):
            for key in ("description", "title"):
                text = definition.get(key)
                # seed 001 elides the verifier's description as "..."; the title says more
                if isinstance(text, str) and text.strip() not in ("", "...", "…"):
                    return text
    for field in ("feature_name", "instruction_set"):
        text = out.get(field)
        if isinstance(text, str) and text.strip():
            return text
    return None


_UNION_TAGS = frozenset({"str", "int", "float", "bool", "dict[str,any]", "list[any]", "none"})
_EXPECTED_KIND: dict[str, str] = {
    "string_type": "a string", "dict_type": "an object", "model_type": "an object",
    "model_attributes_type": "an object", "list_type": "a list", "int_type": "an integer",
    "int_parsing": "an integer", "int_from_float": "a whole number",
    "float_type": "a number", "float_parsing": "a number", "bool_type": "true or false",
    "bool_parsing": "true or false",
}
_FIELD_HINTS: dict[str, str] = {
    "skill": "must be a skill name or 'name@version' (letters, digits, '.', '-', '_')",
}


def _clean_loc(loc: tuple[int | str, ...]) -> list[int | str]:
    return [part for part in loc
            if isinstance(part, int) or (part not in _UNION_TAGS and "[" not in part)]


def _path(parts: Iterable[int | str]) -> str:
    return join_path("", parts)


def _validation_issues(exc: ValidationError, origin: dict[str, str]) -> list[Issue]:
    grouped: dict[str, list[ErrorDetails]] = {}
    for error in exc.errors(include_url=False):
        parts = _clean_loc(error["loc"])
        head = [p for p in parts[:2] if isinstance(p, str)]
        if len(head) == 2 and f"{head[0]}.{head[1]}" in origin:
            path = _path([origin[f"{head[0]}.{head[1]}"], *parts[2:]])
        elif parts and isinstance(parts[0], str) and parts[0] in origin:
            path = _path([origin[parts[0]], *parts[1:]])
        else:
            path = _path(parts)
        grouped.setdefault(path, []).append(error)
    issues = []
    for path, errors in grouped.items():
        issues.append(Issue(path, _message(path, errors)))
    return issues


def _message(path: str, errors: list[ErrorDetails]) -> str:
    error = errors[0]
    kind = error["type"]
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        if path.startswith("budget") or ".max_" in path:
            return f"is not a budget limit; use {', '.join(BUDGET_AXES)}"
        return "is not a field of the packet"
    if path in _FIELD_HINTS and kind == "string_pattern_mismatch":
        return f"{_FIELD_HINTS[path]} (got {_short(error.get('input'))})"
    got = f" (got {_short(error.get('input'))})" if "input" in error else ""
    if len(errors) > 1:
        kinds = [_EXPECTED_KIND.get(item["type"]) for item in errors]
        named = [k for k in dict.fromkeys(kinds) if k]
        if named:
            return f"must be {' or '.join(named)}{got}"
    text = str(error["msg"])
    for prefix, replacement in (("Input should be", "must be"), ("Value error, ", ""),
                                ("String should", "must"), ("List should", "must"),
                                ("Assertion failed, ", "")):
        if text.startswith(prefix):
            text = replacement + text[len(prefix):]
            break
    return f"{text}{got}"


def parse_packet(data: dict[str, Any] | str | bytes | bytearray | HandoffPacket) -> HandoffPacket:
    """Any seed's spelling of a delegation -> :class:`HandoffPacket`.

    Raises ``ProtocolError(ERR_INVALID_PACKET)`` whose ``issues`` list every problem found,
    each with the field path as the input spelled it.
    """
    if isinstance(data, HandoffPacket):
        return data
    raw = _load(data)
    norm = _Normalizer()
    for raw_key, value in raw.items():
        if not isinstance(raw_key, str):
            norm.issues.append(Issue("", f"keys must be strings (got {_short(raw_key)})"))
            continue
        norm.top(_snake(raw_key), value, raw_key)
    out = norm.out
    if norm.criteria:
        out["success_criteria"] = norm.criteria
        if norm.criteria_from and norm.criteria_from != "success_criteria":
            norm.origin["success_criteria"] = norm.criteria_from
        _check_structured_criteria(norm)
    if norm.budget:
        out["budget"] = norm.budget
    if norm.attempt is not None:
        _attempt_into_metadata(norm, *norm.attempt)
    _normalize_output_schema(norm)
    if norm.extra:
        out["extra"] = norm.extra
    _derive(out, norm.issues)
    try:
        packet = HandoffPacket.model_validate(out)
    except ValidationError as exc:
        norm.issues.extend(_validation_issues(exc, norm.origin))
        packet = None
    if norm.issues:
        first = norm.issues[0]
        where = f"{first.field}: " if first.field else ""
        count = len(norm.issues)
        raise ProtocolError(
            ErrorCode.INVALID_PACKET,
            f"The delegation packet is not valid ({count} problem{'s' if count > 1 else ''}); "
            f"first: {where}{first.message}. Fix the listed fields and send it again.",
            issues=norm.issues)
    assert packet is not None  # no issues means validation succeeded
    return packet


def _check_structured_criteria(norm: _Normalizer) -> None:
    """A malformed structured criterion (unknown kind, bad regex...) is a packet error."""
    source = norm.origin.get("success_criteria", "success_criteria")
    for index, criterion in enumerate(norm.criteria):
        if isinstance(criterion, dict):
            norm.issues.extend(criterion_issues(criterion, f"{source}[{index}]"))


def _attempt_into_metadata(norm: _Normalizer, value: Any, source: str) -> None:
    metadata = norm.out.setdefault("metadata", {})
    if not isinstance(metadata, dict):
        return  # pydantic reports the bad metadata itself
    if metadata.get("attempt") is not None and metadata["attempt"] != value:
        norm.issues.append(Issue(source, (
            f"gives attempt {_short(value)} but metadata.attempt is "
            f"{_short(metadata['attempt'])}; give it once")))
        return
    metadata["attempt"] = value
    norm.origin["metadata.attempt"] = source


def _normalize_output_schema(norm: _Normalizer) -> None:
    schema = norm.out.get("expected_output_schema")
    if schema is None:
        return
    source = norm.origin.get("expected_output_schema", "expected_output_schema")
    if isinstance(schema, str):
        norm.issues.append(Issue(source, (
            "must be a JSON Schema object or a shorthand such as {\"summary\": \"string\"}, "
            "not free text (seed 003: the expected output is a schema); describe the "
            "task in goal instead")))
        del norm.out["expected_output_schema"]
        return
    normalized, issues = normalize_schema_issues(schema, source)
    if issues:
        norm.issues.extend(issues)
        del norm.out["expected_output_schema"]
    else:
        norm.out["expected_output_schema"] = normalized
