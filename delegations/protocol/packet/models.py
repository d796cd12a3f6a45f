"""The hand-off packet in canonical form: :class:`HandoffPacket` and its typed parts.

Each field group comes from one dialect of delegating (the hand-off protocol's
``delegate_task``, delegation contracts, OpenClaw sub-agents' ``sessions_spawn``, the
agloop delegation protocol, the HandoffPackage format); :func:`parse_packet` reads every
dialect's spelling into this one model. Unknown keys inside a typed part stay on that
part (pydantic ``extra="allow"``); unknown top-level keys live in ``extra``.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..budgets import Budget
from ..number_limits import Count, Depth, Number, Seconds


class SubagentType(StrEnum):
    """The hand-off protocol's four subagent types plus the agloop delegation protocol's roles."""

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
# The agloop "Base Parameters": the eight fields every agloop delegation carries.
BASE_PARAM_FIELDS: tuple[str, ...] = (
    "task_id", "feature_name", "feature_description", "current_phase",
    "current_state_summary", "plan_path", "state_path", "log_path",
)
CURRENT_PHASES: tuple[str, ...] = (
    "init", "research", "plan", "critique", "execute", "verify", "complete")
REVIEW_DEPTHS: tuple[str, ...] = ("full", "standard", "lightweight")

ReviewDepth = Literal["full", "standard", "lightweight"]
Phase = Literal["init", "research", "plan", "critique", "execute", "verify", "complete"]


Criterion = str | dict[str, Any]


class _Part(BaseModel):
    """A typed part of the packet; unknown keys are kept (see the package docstring)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


class SpecificationAdherence(_Part):
    """The agloop "Specification Adherence" block."""

    required_patterns: list[str] = Field(default_factory=list)
    forbidden_patterns: list[str] = Field(default_factory=list)
    tech_choices: list[str] = Field(default_factory=list)


class PreviousFailure(_Part):
    """The agloop ``previous_failure``: filled on a fresh-context retry."""

    attempt_number: Count | None = Field(default=None, ge=1)
    failure_report: str = ""
    specific_failures: list[str] = Field(default_factory=list)
    fix_instructions: str = ""


class TaskDefinition(_Part):
    """The agloop ``task_definition`` (plus the plan fields the review-depth tree reads)."""

    id: str | None = None
    title: str | None = None
    description: str | None = None
    files_to_modify: list[str] = Field(default_factory=list)
    files_to_read: list[str] = Field(default_factory=list)
    estimated_effort: str | None = None    # "small" | "medium" | "large" (agloop plans)
    priority: str | None = None            # "high"/"critical" count as high-priority
    critical_path: bool | None = None      # many other tasks depend on it


class RevisionFeedback(_Part):
    """The agloop planner's ``revision_feedback`` (non-null on revision, from the critic)."""

    iteration: Count | None = None
    objection: str | None = None
    suggested_fix: str | None = None
    previous_plan_path: str | None = None


class PreviousObjection(_Part):
    """One item of the agloop critic's ``previous_objections``."""

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
    # A monolithic delegation (agloop failure mode 2) lists several tasks; they are kept
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
    """The HandoffPackage format's ``task``."""

    id: str | None = None
    type: str | None = None
    description: str | None = None
    requirements: list[str] = Field(default_factory=list)


class HandoffContext(_Part):
    """The HandoffPackage format's ``context`` (+ ``summary``, added by the direct hand-off pattern)."""

    original_request: str | None = None
    completed_steps: list[Any] = Field(default_factory=list)
    intermediate_results: dict[str, Any] = Field(default_factory=dict)
    relevant_files: list[str] = Field(default_factory=list)
    decisions: list[Any] = Field(default_factory=list)
    summary: str | None = None


class A2ATaskContext(_Part):
    """Where a task that came over A2A sits: the caller's ``contextId`` and the tasks it
    follows (``referenceTaskIds``, a retry's). Handoff's A2A server writes it and reads it
    back for the task and for ListTasks' contextId filter."""

    context_id: str | None = None
    reference_task_ids: list[str] = Field(default_factory=list)


class HandoffMetadata(_Part):
    """The HandoffPackage format's ``metadata``; dates are kept as the ISO text they came as."""

    source_agent: str | None = None
    target_agent: str | None = None
    timestamp: str | None = None
    priority: Number | None = None
    deadline: str | None = None
    attempt: Count | None = Field(default=None, ge=1)
    a2a: A2ATaskContext | None = None


_NO_BUDGET = Budget()


class HandoffPacket(BaseModel):
    """One delegation, in canonical form. See the package docstring for the spellings."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # the hand-off protocol's delegate_task
    task_id: str | None = None
    subagent_type: SubagentType | None = None
    # name@version, or <agent>/<skill> for a remote A2A agent's skill
    skill: str | None = Field(default=None, pattern=r"^([a-z0-9][a-z0-9-]*/)?[A-Za-z0-9][\w.\-]*(@[\w.\-+]+)?$")
    goal: str | None = None
    instruction_set: str | None = None
    input_data: dict[str, Any] = Field(default_factory=dict)
    max_iterations: Count = Field(default=5, ge=1)
    termination_trigger: str | None = None
    success_criteria: list[Criterion] = Field(default_factory=list)
    # delegation contracts
    expected_output_schema: dict[str, Any] | None = None
    allowed_inputs: list[str] | None = None
    timeout_s: Seconds | None = Field(default=None, gt=0)
    budget: Budget = _NO_BUDGET
    capabilities: list[str] = Field(default_factory=list)
    depth: Depth = Field(default=0, ge=0)
    max_depth: Depth = Field(default=3, ge=0)
    allow_nested: bool = False
    # OpenClaw sub-agents' sessions_spawn
    label: str | None = None
    agent_id: str | None = None
    model: str | None = None
    thinking: str | None = None
    cleanup: Literal["keep", "delete"] = "keep"
    # the agloop delegation protocol
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
    # the HandoffPackage format
    task: TaskSpec | None = None
    context: HandoffContext | None = None
    metadata: HandoffMetadata | None = None
    # a composed tree: the children this delegation plans, each with a unique label; the
    # parent's model delegates to one by naming its label (runner.acceptance.child_scope)
    planned_children: list[HandoffPacket] = Field(default_factory=list)
    # unknown top-level keys, kept verbatim
    extra: dict[str, Any] = Field(default_factory=dict)

    def planned_child(self, label: object) -> HandoffPacket | None:
        """The planned child a ``delegate_task`` call names by its label, if any."""
        return next((child for child in self.planned_children if child.label == label), None)

    @model_validator(mode="after")
    def _planned_children_have_labels(self) -> HandoffPacket:
        labels = [child.label for child in self.planned_children]
        if any(not label for label in labels):
            raise ValueError("planned_children: every planned child needs a label (the name "
                             "its parent's model delegates to)")
        repeated = sorted({label for label in labels if labels.count(label) > 1 and label})
        if repeated:
            raise ValueError(f"planned_children: labels must be unique; {', '.join(repeated)} "
                             "is given more than once")
        return self

    @model_validator(mode="after")
    def _review_depth_in_one_place(self) -> HandoffPacket:
        # agloop delegations write review_depth inside verifier_params; the runner reads
        # the top level. Either spelling fills the other so both always agree.
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
        """sha256 hex of :meth:`canonical_json` (a run's input hash, as delegation contracts ask)."""
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
        says ``allow_nested`` (as with OpenClaw sub-agents, which cannot spawn their own by
        default) or plans children of its own. Either way the children would be at
        depth + 1, which must stay <= max_depth.
        """
        return ((self.depth == 0 or self.allow_nested or bool(self.planned_children))
                and self.depth < self.max_depth)
