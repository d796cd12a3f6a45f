"""The hand-off packet: one canonical model for every dialect of delegating.

:class:`HandoffPacket` (``models``) is the canonical, snake_case form. :func:`parse_packet`
(``parsing``, with ``normalizer`` reading each key) accepts what each dialect writes and
normalizes it:

- the hand-off protocol's ``delegate_task`` arguments (``subagent_type``,
  ``instruction_set``, ``input_data``, ``max_iterations``, ``termination_trigger``), its
  parent-request example (``payload`` -> ``input_data``, ``success_criteria``), and a
  whole tool call (``{"name": "delegate_task", "arguments": {...}}``);
- agloop delegations (the agloop delegation protocol): base params nested under
  ``base_params`` or flat, one ``<role>_params`` block (``subagent_type`` is inferred
  from it), the anti-laziness checklist (a list, or the protocol's markdown block as one
  string), specification adherence, previous failure and review depth;
- the HandoffPackage format (``task`` / ``context`` / ``metadata`` / ``expectations``,
  camelCase);
- delegation contracts (``goal``, ``allowedInputs``, ``expectedOutput`` schema, budgets
  under ``budget`` / ``budgets`` / ``resourceBoundaries`` / ``limits`` or flat, capability
  scope, ``completionCriteria``);
- OpenClaw sub-agents' ``sessions_spawn`` parameters (``task`` text, ``label``,
  ``agentId``, ``model``, ``thinking``, ``runTimeoutSeconds``, ``cleanup``).

Keys of the packet and of its typed parts are converted from camelCase to snake_case;
free-form data (``input_data``, intermediate results, context maps, schemas) is never
touched.

Unknown keys are kept, never dropped silently: unknown top-level keys go to
``packet.extra`` under the spelling the input used (an unknown key inside a recognized
block under its dotted path, e.g. ``"capabilityScope.max_searches"``); unknown keys inside
a typed part stay on that part (pydantic ``extra="allow"``, visible in ``model_extra`` and
in the serialized packet). Lint reports each one as ``UNKNOWN_FIELD`` so a misspelt field
is noticed. ``HandoffPacket.model_validate`` takes the canonical form only and rejects
unknown top-level keys.

Derived values (only when the packet does not say): ``goal`` from ``task.description``,
the ``sessions_spawn`` ``task`` text, the role's ``task_definition`` (description, else
title), ``feature_name`` or ``instruction_set``, in that order; ``task_id`` from
``task.id``; ``subagent_type`` from the one ``<role>_params`` block present, else from
``metadata.target_agent`` when that names a subagent type. ``review_depth`` and
``verifier_params.review_depth`` are kept equal (either spelling fills the other).
"""

from .models import (
    AGLOOP_ROLES,
    BASE_PARAM_FIELDS,
    CURRENT_PHASES,
    REVIEW_DEPTHS,
    ROLE_PARAMS_FIELDS,
    SUBAGENT_TYPES,
    Count,
    CriticParams,
    ExecutorParams,
    HandoffContext,
    HandoffMetadata,
    HandoffPacket,
    Number,
    Phase,
    PlannerParams,
    PreviousFailure,
    PreviousObjection,
    ResearcherParams,
    ReviewDepth,
    RevisionFeedback,
    SpecificationAdherence,
    SubagentType,
    TaskDefinition,
    TaskParams,
    TaskSpec,
    VerifierParams,
)
from .parsing import parse_packet

__all__ = [
    "AGLOOP_ROLES", "BASE_PARAM_FIELDS", "CURRENT_PHASES", "REVIEW_DEPTHS", "ROLE_PARAMS_FIELDS",
    "SUBAGENT_TYPES", "Count", "CriticParams", "ExecutorParams", "HandoffContext",
    "HandoffMetadata", "HandoffPacket", "Number", "Phase", "PlannerParams", "PreviousFailure",
    "PreviousObjection", "ResearcherParams", "ReviewDepth", "RevisionFeedback",
    "SpecificationAdherence", "SubagentType", "TaskDefinition", "TaskParams", "TaskSpec",
    "VerifierParams", "parse_packet",
]
