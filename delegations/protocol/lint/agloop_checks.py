"""The agloop delegation protocol's ten checks of a well-formed delegation.

They apply to agloop delegations: packets with its base params (other than ``task_id``)
or a ``<role>_params`` block (see :class:`LintContext`). The protocol says "All 7
base_params fields" but lists eight: the seven that must be populated are all but
``task_id``, which it makes null during research, planning and critique; ``task_id`` is
required from execute/verify on (and for executor and verifier delegations), and
``feature_description`` may be empty before research is done.

Check 1 is :func:`check_base_params`; 2 :func:`check_feature_name`; 3
:func:`check_role_params`; 4 is ``CRITERIA_MISSING`` among the contract checks; 5, 6 and
7 :func:`check_executor`; 8 :func:`check_retry`; 9 :func:`check_verifier`; 10
:func:`check_tasks`. :func:`check_placeholders` finds template slots left unfilled.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ..packet import AGLOOP_ROLES, BASE_PARAM_FIELDS, ROLE_PARAMS_FIELDS, TaskDefinition, TaskParams
from .context import LintContext, is_blank
from .review import review_depth_reason

# The agloop "Complete Checklist": each standard item and the words that show a
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
_PLACEHOLDER_RE = re.compile(r"^\s*\{[^{}:,]+\}\s*$")
_RETRY_RE = re.compile(r"\bretr(?:y|ies|ying|ied)\b", re.IGNORECASE)


def check_feature_name(lint: LintContext) -> None:
    packet, parent = lint.packet, lint.parent
    reference: tuple[str, str] | None = None
    if parent is not None and not is_blank(parent.feature_name):
        reference = (str(parent.feature_name), "the parent's feature_name")
    elif packet.context is not None and not is_blank(packet.context.original_request):
        reference = (str(packet.context.original_request), "context.original_request")
    elif (parent is not None and parent.context is not None
          and not is_blank(parent.context.original_request)):
        reference = (str(parent.context.original_request), "the parent's original request")
    names = [("feature_name", packet.feature_name)]
    if packet.critic_params is not None:
        names.append(("critic_params.feature_name", packet.critic_params.feature_name))
        if reference is None and not is_blank(packet.feature_name):
            reference = (str(packet.feature_name), "feature_name")
    if reference is None:
        return
    expected, source = reference
    for field, value in names:
        if is_blank(value) or value == expected:
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


def check_role_params(lint: LintContext) -> None:
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
            f"This is an agloop {role} delegation without {field}; add the role's "
            f"parameters (see the agloop delegation protocol's {role} delegation template)."))
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
                not is_blank(item.objection) for item in critic.previous_objections):
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


def check_tasks(lint: LintContext) -> None:
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


def check_base_params(lint: LintContext) -> None:
    packet = lint.packet
    phase = packet.current_phase
    needs_task = lint.role in ("executor", "verifier") or phase in ("execute", "verify")
    for field in BASE_PARAM_FIELDS:
        value = getattr(packet, field)
        if field == "task_id":
            if needs_task and is_blank(value):
                lint.add("BASE_PARAMS_INCOMPLETE", field, (
                    "task_id is empty; from the execute phase on every delegation names the "
                    "task it works on (e.g. \"task-003\")."))
            continue
        if field == "feature_description" and value == "" and phase in (None, "init", "research"):
            continue  # the agloop protocol leaves it "" before research
        if is_blank(value):
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


def check_executor(lint: LintContext) -> None:
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
            "Add the agloop anti-laziness checklist (all ten standard items, then any "
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


def check_retry(lint: LintContext) -> None:
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
    if is_blank(failure.fix_instructions):
        lint.add("PREVIOUS_FAILURE_INCOMPLETE", "previous_failure.fix_instructions", (
            "previous_failure.fix_instructions is empty: say specifically how to fix it, "
            "e.g. \"Add zod validation for page_size: z.number().min(1).max(100)\"."))
    attempt = packet.metadata.attempt if packet.metadata is not None else None
    if (attempt is not None and failure.attempt_number is not None
            and attempt != failure.attempt_number):
        lint.add("ATTEMPT_MISMATCH", "metadata.attempt", (
            f"metadata.attempt is {attempt} but previous_failure.attempt_number is "
            f"{failure.attempt_number}; make them the same attempt number."))


def check_verifier(lint: LintContext) -> None:
    if lint.role != "verifier":
        return
    packet = lint.packet
    depth, why = review_depth_reason(packet)
    if packet.review_depth is None:
        lint.add("REVIEW_DEPTH_MISSING", "verifier_params.review_depth", (
            f"Set review_depth before delegating to the verifier; the agloop review-depth "
            f"decision tree gives '{depth}' ({why})."))
    elif packet.review_depth != depth:
        lint.add("REVIEW_DEPTH_MISMATCH", "verifier_params.review_depth", (
            f"review_depth is '{packet.review_depth}' but the agloop review-depth decision "
            f"tree gives '{depth}' ({why}). Use '{depth}' unless you have a reason the tree "
            f"does not see."))


_PLACEHOLDER_FIELDS = ("goal", "instruction_set", "feature_name", "feature_description",
                       "current_state_summary")


def check_placeholders(lint: LintContext) -> None:
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
    """The agloop templates' slots ("{verbatim user request}") and their elisions ("...")."""
    if not isinstance(value, str):
        return False
    text = value.strip()
    if text in ("...", "…"):
        return True
    return text[:1] == "{" and _PLACEHOLDER_RE.match(text) is not None
