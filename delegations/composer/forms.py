"""The composer's form: a hand-off packet as sections of fields, and back.

Most fields map one-to-one onto a place in the packet (:data:`PACKET_FIELDS`: the form
field ``budget__max_tokens`` is ``packet["budget"]["max_tokens"]``); a role's parameters
count only for the role picked. The input data is a JSON textarea, or when the packet
names a skill one field per property of its ``input_schema`` (:mod:`.schema_fields`).
Success criteria are free-text lines plus structured rows (:mod:`.criteria_rows`).

Nothing is lost between a packet and the form: what the form has no field for (a
previous failure, metadata, a key nothing reads) stays in the "other fields" JSON,
and :func:`packet_from_form` puts it back. ``packet_from_form(initial_from_packet(p))``
gives ``p`` back for any canonical packet ``p``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.forms import BoundField

from delegations.protocol.a2a_client import RemoteAgentConfig
from delegations.protocol.capabilities import CAPABILITY_INFO
from delegations.protocol.criteria import criterion_reading
from delegations.protocol.lint import STANDARD_CHECKLIST
from delegations.protocol.packet import (
    AGLOOP_ROLES,
    CURRENT_PHASES,
    REVIEW_DEPTHS,
    SUBAGENT_TYPES,
    HandoffPacket,
)
from delegations.run_pages.forms import PASTE_LIMIT, RunStartForm
from skills.models import Skill

from .criteria_rows import (
    CRITERIA_PREFIX,
    BaseCriterionFormSet,
    CriterionForm,
    CriterionFormSet,
    choices,
    row_from_criterion,
)
from .schema_fields import (
    SEPARATOR,
    JSONLinesField,
    JSONValueField,
    LayoutItem,
    LinesField,
    NumberField,
    initial_from_input_data,
    input_data_from_cleaned,
    schema_fields,
)

STANDARD_CHECKLIST_ITEMS: list[str] = [item for item, _ in STANDARD_CHECKLIST]
NAME_FROM_GOAL_CHARS = 80   # an unnamed delegation is named by its goal's first words


class CapabilitiesField(forms.MultipleChoiceField):
    """Checkboxes of the capabilities offered. A capability the packet already asks for is
    kept even when it is not offered: lint says what is wrong with it."""

    widget = forms.CheckboxSelectMultiple

    def valid_value(self, value: Any) -> bool:
        return isinstance(value, str) and bool(value.strip())


@dataclass(frozen=True, slots=True)
class PacketField:
    """A form field standing for one place in the packet."""

    path: tuple[str, ...]
    section: str
    make: Callable[[], forms.Field]
    role: str | None = None   # counts only when this role is picked

    @property
    def name(self) -> str:
        return SEPARATOR.join(self.path)


def _text(label: str, help_text: str = "", *, rows: int = 0, required: bool = False) -> Callable[[], forms.Field]:
    widget = forms.Textarea(attrs={"rows": rows}) if rows else forms.TextInput
    return partial(forms.CharField, required=required, label=label, help_text=help_text, widget=widget,
                   max_length=PASTE_LIMIT)


def _lines(label: str, help_text: str = "One per line.") -> Callable[[], forms.Field]:
    return partial(LinesField, required=False, label=label, help_text=help_text)


def _json(label: str, help_text: str = "As JSON.", expect: type | None = None) -> Callable[[], forms.Field]:
    return partial(JSONValueField, required=False, label=label, help_text=help_text, expect=expect)


def _choice(label: str, values: tuple[str, ...], help_text: str = "") -> Callable[[], forms.Field]:
    return partial(forms.ChoiceField, required=False, label=label, help_text=help_text,
                   choices=choices(values))


def _count(label: str, help_text: str = "", minimum: int = 0) -> Callable[[], forms.Field]:
    return partial(forms.IntegerField, required=False, label=label, help_text=help_text, min_value=minimum)


def _amount(label: str, help_text: str = "") -> Callable[[], forms.Field]:
    return partial(NumberField, required=False, label=label, help_text=help_text, min_value=0)


def _task_definition(role: str) -> list[PacketField]:
    block = f"{role}_params"
    return [
        PacketField((block, "task_definition", "id"), role, _text("Task id"), role),
        PacketField((block, "task_definition", "title"), role, _text("Task title"), role),
        PacketField((block, "task_definition", "description"), role, _text("Task description", rows=3), role),
        PacketField((block, "task_definition", "files_to_modify"), role, _lines("Files to modify"), role),
        PacketField((block, "task_definition", "files_to_read"), role, _lines("Files to read"), role),
        PacketField((block, "acceptance_criteria"), role,
                    _lines("Acceptance criteria", "One per line; each is confirmed with evidence."), role),
    ]


PACKET_FIELDS: tuple[PacketField, ...] = (
    PacketField(("goal",), "task", _text(
        "Goal", "What the subagent must achieve, in one or two sentences. It runs as written.",
        rows=3, required=True)),
    PacketField(("instruction_set",), "task", _text(
        "Instruction set", "How to go about it: the subagent's system-level instructions.", rows=5)),
    PacketField(("subagent_type",), "task", _choice(
        "Role", SUBAGENT_TYPES, "Which kind of subagent does the work; agloop roles have their own parameters.")),
    PacketField(("skill",), "task", partial(forms.CharField, required=False, widget=forms.HiddenInput)),
    # the agloop base parameters
    PacketField(("task_id",), "base", _text("Task id", "Required from the execute phase on.")),
    PacketField(("feature_name",), "base", _text("Feature name", "The user's request, verbatim.", rows=2)),
    PacketField(("feature_description",), "base", _text("Feature description", rows=3)),
    PacketField(("current_phase",), "base", _choice("Current phase", CURRENT_PHASES)),
    PacketField(("current_state_summary",), "base", _text("Current state summary", rows=2)),
    PacketField(("plan_path",), "base", _text("Plan path")),
    PacketField(("state_path",), "base", _text("State path")),
    PacketField(("log_path",), "base", _text("Log path")),
    # the agloop roles' parameters
    PacketField(("researcher_params", "complexity_level"), "researcher", _choice(
        "Complexity", ("simple", "medium", "complex"), "1, 2 or 3 research passes."), "researcher"),
    PacketField(("researcher_params", "research_mode"), "researcher", _choice(
        "Research mode", ("codebase_only", "codebase_plus_latest_guidance")), "researcher"),
    PacketField(("researcher_params", "focus_areas"), "researcher", _lines("Focus areas"), "researcher"),
    PacketField(("researcher_params", "known_patterns"), "researcher", _lines("Known patterns"), "researcher"),
    PacketField(("researcher_params", "workspace_root"), "researcher", _text(
        "Workspace root", "The absolute path of the workspace."), "researcher"),
    PacketField(("planner_params", "research_findings"), "planner", _json(
        "Research findings", "The researcher's full output, as JSON."), "planner"),
    PacketField(("planner_params", "context_map"), "planner", _json("Context map"), "planner"),
    PacketField(("planner_params", "latest_guidance"), "planner", _json("Latest guidance"), "planner"),
    PacketField(("planner_params", "constraints"), "planner", _lines("Constraints"), "planner"),
    PacketField(("planner_params", "revision_feedback"), "planner", _json(
        "Revision feedback", "The critic's objection when this is a revision, as JSON.", dict), "planner"),
    PacketField(("critic_params", "plan_yaml_path"), "critic", _text("Plan to review (path)"), "critic"),
    PacketField(("critic_params", "iteration_number"), "critic", _count("Iteration", minimum=1), "critic"),
    PacketField(("critic_params", "max_iterations"), "critic", _count("Max iterations", minimum=1), "critic"),
    PacketField(("critic_params", "feature_name"), "critic", _text(
        "Feature name", "The original request, verbatim.", rows=2), "critic"),
    PacketField(("critic_params", "research_findings"), "critic", _json("Research findings"), "critic"),
    PacketField(("critic_params", "previous_objections"), "critic", _json(
        "Previous objections", "A JSON list of earlier objections.", list), "critic"),
    *_task_definition("executor"),
    PacketField(("executor_params", "context_map"), "executor", _json(
        "Context map", "Files and patterns to follow, as JSON."), "executor"),
    *_task_definition("verifier"),
    PacketField(("verifier_params", "executor_result"), "verifier", _json(
        "Executor result", "The executor's output to verify, as JSON.", dict), "verifier"),
    PacketField(("review_depth",), "verifier", _choice(
        "Review depth", REVIEW_DEPTHS, "Leave empty to see what the review-depth tree suggests."), "verifier"),
    # input and context
    PacketField(("allowed_inputs",), "input", _lines(
        "Allowed inputs", "The input keys the subagent may be given, one per line.")),
    PacketField(("context", "original_request"), "context", _text("Original request", rows=2)),
    PacketField(("context", "summary"), "context", _text("Summary so far", rows=2)),
    PacketField(("context", "completed_steps"), "context", partial(
        JSONLinesField, required=False, label="Completed steps",
        help_text="One per line; a line starting with { is read as JSON.")),
    PacketField(("context", "decisions"), "context", partial(
        JSONLinesField, required=False, label="Decisions made",
        help_text="One per line; a line starting with { is read as JSON.")),
    PacketField(("context", "relevant_files"), "context", _lines("Relevant files")),
    PacketField(("context", "intermediate_results"), "context", _json("Intermediate results", expect=dict)),
    # expectations
    PacketField(("expected_output_schema",), "expectations", _json(
        "Expected output schema", 'JSON Schema, or the short form {"answer": "integer"}.', dict)),
    PacketField(("termination_trigger",), "expectations", _text(
        "Termination trigger", "The condition that signals the work is done.")),
    # budget and time
    PacketField(("budget", "max_model_calls"), "budget", _count("Max model calls")),
    PacketField(("budget", "max_tokens"), "budget", _count("Max tokens")),
    PacketField(("budget", "max_cost_usd"), "budget", _amount("Max cost (USD)")),
    PacketField(("budget", "max_runtime_s"), "budget", _amount("Max runtime (seconds)")),
    PacketField(("budget", "max_concurrency"), "budget", _count("Max concurrent children", minimum=1)),
    PacketField(("timeout_s",), "budget", partial(
        NumberField, required=False, label="Timeout (seconds)", min_value=0.001,
        help_text="Without one, a stuck subagent leaves its parent waiting forever.")),
    PacketField(("max_iterations",), "budget", partial(
        forms.IntegerField, required=False, label="Max iterations", min_value=1, initial=5,
        help_text="Turns the subagent gets; one more than 1 leaves room to correct itself.")),
    # scope, constraints, nesting
    PacketField(("capabilities",), "scope", partial(CapabilitiesField, required=False, label="Capabilities")),
    PacketField(("anti_laziness_checklist",), "rules", _lines(
        "Anti-laziness checklist", "One rule per line; the agloop protocol's standard ten are filled in.")),
    PacketField(("specification_adherence", "required_patterns"), "rules", _lines("Required patterns")),
    PacketField(("specification_adherence", "forbidden_patterns"), "rules", _lines("Forbidden patterns")),
    PacketField(("specification_adherence", "tech_choices"), "rules", _lines("Technology choices")),
    PacketField(("allow_nested",), "nesting", partial(
        forms.BooleanField, required=False, label="May delegate further",
        help_text="Let this subagent spawn subagents of its own.")),
    PacketField(("max_depth",), "nesting", partial(
        forms.IntegerField, required=False, label="Max depth", min_value=0, initial=3,
        help_text="How deep delegation may go below the root (3 is the hand-off protocol's advice).")),
)
_BY_NAME = {spec.name: spec for spec in PACKET_FIELDS}
_DEFAULTS = {name: info.default for name, info in HandoffPacket.model_fields.items()
             if name in ("max_iterations", "max_depth", "allow_nested")}

SECTIONS: tuple[tuple[str, str, str], ...] = (
    ("task", "Goal and role", ""),
    ("base", "Base parameters", "What every agloop delegation carries."),
    *((role, f"{role.capitalize()} parameters", "What this agloop role needs.") for role in AGLOOP_ROLES),
    ("input", "Input data", "What the subagent is given to work on."),
    ("context", "Context", "What happened before, so the subagent does not start blind."),
    ("expectations", "Expectations", "What comes back, and how to tell it is right."),
    ("budget", "Budget and time", "Leave an axis empty for no limit on it."),
    ("scope", "Capabilities", "What the subagent may do. Nothing is allowed that is not ticked."),
    ("rules", "Constraints", "Rules the work must follow."),
    ("nesting", "Nesting", ""),
)
OTHER_FIELD = "other"
INPUT_FIELD = "input_data"
CRITERIA_TEXT = "success_criteria_text"
CRITERIA_ROWS = "criteria_rows"


# -- packet <-> cleaned data -------------------------------------------------------------

def _empty(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _get(data: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = data
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _set(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        data = data.setdefault(key, {})
    data[path[-1]] = value


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` laid on top, objects merged key by key (``over`` wins)."""
    merged = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def remainder(data: dict[str, Any], shown: dict[str, Any]) -> dict[str, Any]:
    """What of ``data`` is not in ``shown`` (key by key, into objects)."""
    rest: dict[str, Any] = {}
    for key, value in data.items():
        if key not in shown:
            rest[key] = value
        elif isinstance(value, dict) and isinstance(shown[key], dict):
            inner = remainder(value, shown[key])
            if inner:
                rest[key] = inner
    return rest


def _active(spec: PacketField, role: str | None) -> bool:
    return spec.role is None or spec.role == role


def packet_from_form(cleaned: dict[str, Any]) -> dict[str, Any]:
    """The packet the cleaned form data stands for (what is empty is left out)."""
    role = cleaned.get("subagent_type") or None
    built: dict[str, Any] = {}
    for spec in PACKET_FIELDS:
        value = cleaned.get(spec.name)
        if not _active(spec, role) or _empty(value) or _DEFAULTS.get(spec.name, ...) == value:
            continue
        _set(built, spec.path, value)
    if not _empty(cleaned.get(INPUT_FIELD)):
        built["input_data"] = cleaned[INPUT_FIELD]
    criteria = [*(cleaned.get(CRITERIA_TEXT) or []), *(cleaned.get(CRITERIA_ROWS) or [])]
    if criteria:
        built["success_criteria"] = criteria
    packet = merge(cleaned.get(OTHER_FIELD) or {}, built)
    if packet.get("review_depth") and isinstance(packet.get("verifier_params"), dict):
        # the packet keeps review_depth in both places, and they must agree
        packet["verifier_params"]["review_depth"] = packet["review_depth"]
    return packet


def _fits(spec: PacketField, value: Any) -> bool:
    """Whether the form field gives ``value`` back exactly."""
    form_field = spec.make()
    try:
        return bool(form_field.clean(form_field.prepare_value(value)) == value)
    except ValidationError:
        return False


def _split_criteria(criteria: list[Any]) -> tuple[list[Any], list[dict[str, Any]]]:
    """Free-text lines first, then rows: the order the form gives them back in. When the
    packet's own order is different, every criterion goes in the lines (JSON for a dict)."""
    cut = next((index for index, item in enumerate(criteria) if not isinstance(item, str)), len(criteria))
    text, rows = criteria[:cut], criteria[cut:]
    lines = JSONLinesField(required=False)
    if all(CriterionForm.represents(row) for row in rows) and lines.clean(lines.prepare_value(text)) == text:
        return text, rows
    return criteria, []


def initial_from_packet(packet: dict[str, Any]) -> dict[str, Any]:
    """Initial form values for a canonical packet (``HandoffPacket.to_dict()``)."""
    role = packet.get("subagent_type")
    initial: dict[str, Any] = {}
    for spec in PACKET_FIELDS:
        value = _get(packet, spec.path)
        if _active(spec, role) and value is not None and _fits(spec, value):
            initial[spec.name] = value
    if isinstance(packet.get("input_data"), dict):
        initial[INPUT_FIELD] = packet["input_data"]
    criteria = packet.get("success_criteria")
    if isinstance(criteria, list):
        initial[CRITERIA_TEXT], initial[CRITERIA_ROWS] = _split_criteria(criteria)
    initial[OTHER_FIELD] = remainder(packet, packet_from_form(initial))
    return initial


def new_initial(skill: Skill | None = None, role: str | None = None) -> dict[str, Any]:
    """Where a new delegation starts: a timeout and a budget, and the skill's role, output
    schema and capabilities (or the role picked; an executor also gets the standard
    checklist, which the agloop protocol gives executors). The goal and the input stay empty, and nothing else is filled in: what the
    model is told is what the skill says and what the person writes (a pre-filled coding
    checklist or allowed_inputs list changed a price lookup's answer)."""
    initial: dict[str, Any] = {
        "subagent_type": role or "", "timeout_s": 300,
        "budget__max_model_calls": 20, "budget__max_tokens": 50_000,
    }
    if skill is not None:
        initial.update({
            "skill": skill.ref, "subagent_type": skill.subagent_type or role or "",
            "expected_output_schema": skill.output_schema or None,
            "capabilities": list(skill.capabilities or []),
        })
    elif role == "executor":
        initial["anti_laziness_checklist"] = STANDARD_CHECKLIST_ITEMS
    return initial


def remote_skill_initial(ref: str, agent: RemoteAgentConfig) -> dict[str, Any]:
    """Where a delegation to a remote agent's skill (``<agent>/<skill>``) starts: a new
    delegation's timeout and budget, the skill, and the agent's capability, without which
    no run of it starts. The goal is the person's: it is what the agent is sent."""
    return {**new_initial(), "skill": ref, "capabilities": [agent.capability]}


# -- the form ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Section:
    key: str
    title: str
    description: str
    fields: list[BoundField]
    roles: tuple[str, ...]   # shown only for these roles (all when empty)
    advanced: bool = False   # folded under "Advanced"


# What a delegation started from a skill is not shown up front: the skill sets it, or it
# belongs to agloop delegations. It stays folded under "Advanced", and empty unless the
# person fills it. Without a skill, the agloop sections are folded unless the role is one.
_SKILL_ADVANCED_SECTIONS = frozenset({"base", *AGLOOP_ROLES, "context", "rules", "nesting"})
_SKILL_ADVANCED_FIELDS = frozenset({"instruction_set", "subagent_type", "allowed_inputs",
                                    "termination_trigger", "max_iterations", "budget__max_concurrency",
                                    "budget__max_runtime_s", "budget__max_cost_usd"})
_AGLOOP_SECTIONS = frozenset({"base", *AGLOOP_ROLES, "rules"})


@dataclass(frozen=True, slots=True)
class CapabilityChoice:
    name: str
    description: str
    needs_approval: bool
    checked: bool
    known: bool


@dataclass(frozen=True, slots=True)
class ParentScope:
    """What the delegation above this one in its tree has: a child never gets more."""
    name: str
    capabilities: tuple[str, ...]


class ComposerForm(forms.Form):
    """The whole packet, plus the delegation's name and the version an edit is based on.
    ``parent`` limits the capabilities offered, and refuses more, to what the parent has."""

    required_css_class = "required"

    name = forms.CharField(required=False, max_length=200, label="Name",
                           help_text="How the delegation is listed. Needed to save it.")
    template = forms.BooleanField(required=False, label="Keep as a template",
                                  help_text="A starting point to copy rather than to run as it is.")
    base_version = forms.IntegerField(required=False, widget=forms.HiddenInput)
    copied_from = forms.IntegerField(required=False, widget=forms.HiddenInput)   # the template started from
    input_data = JSONValueField(required=False, label="Input data", expect=dict,
                                help_text='A JSON object, e.g. {"query": "Current price of TSLA"}.')
    success_criteria_text = JSONLinesField(
        required=False, label="Success criteria (free text)",
        help_text='One per line, machine-checkable: "JSON is schema-valid", "Word count > 500", '
                  '"Tests pass". A line starting with { is a structured criterion in JSON.')
    other = JSONValueField(required=False, label="Other packet fields", expect=dict,
                           help_text="Everything in the packet this form has no field for, as JSON.")

    def __init__(self, data: Any = None, *, skill: Skill | None = None, initial: dict[str, Any] | None = None,
                 parent: ParentScope | None = None, **kwargs: Any) -> None:
        initial = dict(initial or {})
        kwargs.setdefault("label_suffix", "")
        self.skill, self.parent = skill, parent
        self.input_fields = schema_fields(skill.input_schema) if skill is not None else None
        if self.input_fields is not None:
            initial = self._spread_input(initial)
        super().__init__(data, initial=initial, **kwargs)
        for spec in PACKET_FIELDS:
            self.fields[spec.name] = spec.make()
        if self.input_fields is not None:
            del self.fields[INPUT_FIELD]
            self.fields.update(self.input_fields.fields)
        self._offer_capabilities(data, initial)
        rows = [row_from_criterion(row) for row in initial.get(CRITERIA_ROWS) or []]
        self.criteria = cast(BaseCriterionFormSet,
                             CriterionFormSet(data, initial=rows, prefix=CRITERIA_PREFIX,
                                              form_kwargs={"label_suffix": ""}))

    def _spread_input(self, initial: dict[str, Any]) -> dict[str, Any]:
        """Input values onto the schema's fields; input keys the schema lacks go to "other"."""
        assert self.input_fields is not None
        input_data = initial.pop(INPUT_FIELD, None) or {}
        spread = initial_from_input_data(input_data, self.input_fields)
        unknown = remainder(input_data, input_data_from_cleaned(spread, self.input_fields))
        if unknown:
            initial[OTHER_FIELD] = merge(initial.get(OTHER_FIELD) or {}, {"input_data": unknown})
        return {**initial, **spread}

    def _offer_capabilities(self, data: Any, initial: dict[str, Any]) -> None:
        offered = list(self.skill.capabilities or []) if self.skill is not None else list(CAPABILITY_INFO)
        if self.parent is not None:
            offered = [name for name in offered if name in self.parent.capabilities]
        asked = data.getlist("capabilities") if hasattr(data, "getlist") else initial.get("capabilities") or []
        names = offered + [name for name in asked if name not in offered]
        self.capability_names = names
        field = self.fields["capabilities"]
        assert isinstance(field, CapabilitiesField)
        field.choices = [(name, name) for name in names]
        declared = f"the capabilities {self.skill.ref} declares" if self.skill is not None else ""
        if self.parent is not None:
            field.help_text = (f"Only what {self.parent.name} has{' among ' + declared if declared else ''}: "
                               "a child never gets more than its parent.")
        elif declared and names:   # with none, the list says so itself
            field.help_text = declared[0].upper() + declared[1:] + "."

    def clean_capabilities(self) -> list[str]:
        chosen = list(self.cleaned_data.get("capabilities") or [])
        beyond = [name for name in chosen if self.parent is not None and name not in self.parent.capabilities]
        if beyond and self.parent is not None:
            raise ValidationError(
                f"{', '.join(beyond)} {'is' if len(beyond) == 1 else 'are'} beyond what {self.parent.name} has "
                f"({', '.join(self.parent.capabilities) or 'no capabilities'}); a child gets at most its "
                "parent's capabilities. Untick it, or give the parent the capability first.")
        return chosen

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.input_fields is not None:
            cleaned[INPUT_FIELD] = input_data_from_cleaned(cleaned, self.input_fields)
        if self.criteria.is_valid():
            cleaned[CRITERIA_ROWS] = self.criteria.criteria()
        else:
            raise ValidationError("A structured success criterion has a problem; it is marked below.")
        return cleaned

    # -- what the template draws ----------------------------------------------------
    def role(self) -> str:
        return str(self["subagent_type"].value() or "")

    def sections(self) -> list[Section]:
        """The sections shown up front, in order."""
        return self._sections(advanced=False)

    def advanced_sections(self) -> list[Section]:
        """What this delegation does not need shown (see ``_folded``), for the template to fold."""
        return self._sections(advanced=True)

    def advanced_open(self) -> bool:
        """Whether the folded part holds something: an error, or a value other than where a new
        delegation starts (the role a skill names is the skill's, not the person's)."""
        start = new_initial(self.skill) if self.skill is not None else {}
        other = self[OTHER_FIELD]   # folded with them for a skill
        if self.skill is not None and (other.errors or str(other.value() or "").strip() not in ("", "{}")):
            return True
        return any(field.errors or (_filled(field) and str(field.value()) != str(start.get(field.name)))
                   for section in self.advanced_sections() for field in section.fields)

    def _sections(self, *, advanced: bool) -> list[Section]:
        by_section: dict[str, list[BoundField]] = {}
        for spec in PACKET_FIELDS:
            if (not isinstance(self.fields[spec.name].widget, forms.HiddenInput) and spec.name != "capabilities"
                    and self._folded(spec) == advanced):
                by_section.setdefault(spec.section, []).append(self[spec.name])
        always = () if advanced else ("task", "input", "expectations", "scope")
        return [Section(key, title, description, by_section.get(key, []), _roles(key), advanced)
                for key, title, description in SECTIONS if by_section.get(key) or key in always]

    def _folded(self, spec: PacketField) -> bool:
        if self.skill is not None:
            return spec.section in _SKILL_ADVANCED_SECTIONS or spec.name in _SKILL_ADVANCED_FIELDS
        return spec.section in _AGLOOP_SECTIONS and self.role() not in AGLOOP_ROLES

    def output_fields(self) -> list[str]:
        """The top-level fields of the skill's output schema, for a one-line summary."""
        schema = self.skill.output_schema if self.skill is not None else None
        return list((schema or {}).get("properties") or {})

    def own_criteria_open(self) -> bool:
        """Whether the person's own criteria hold something (shown unfolded then)."""
        rows = [row for row in self.criteria if row.has_changed() or row.errors]
        return bool(self[CRITERIA_TEXT].value() or self.initial.get(CRITERIA_ROWS) or rows
                    or self.errors.get(CRITERIA_TEXT) or self.criteria.non_form_errors())

    def skill_criteria(self) -> list[str]:
        """The skill's own success criteria, which every run of it is checked against."""
        if self.skill is None:
            return []
        criteria = (self.skill.manifest or {}).get("success_criteria") or []
        return [criterion_reading(criterion) for criterion in criteria]

    def input_layout(self) -> list[tuple[LayoutItem, BoundField | None]]:
        """The skill's input fields in order, with fieldsets for objects."""
        if self.input_fields is None:
            return []
        return [(item, self[item.name] if item.kind == "field" else None) for item in self.input_fields.layout]

    def capability_choices(self) -> list[CapabilityChoice]:
        checked = set(self["capabilities"].value() or [])
        approval = set(settings.HANDOFF_APPROVAL_REQUIRED_CAPABILITIES)
        return [CapabilityChoice(
                    name, CAPABILITY_INFO[name].description if name in CAPABILITY_INFO else
                    "Handoff has no tool for this capability, so a run cannot use it.",
                    name in approval, name in checked, name in CAPABILITY_INFO)
                for name in self.capability_names]

    def anchor(self, field_path: str) -> str:
        """The id of the input a finding about ``field_path`` (dotted, maybe with [n]) is
        about, or of the nearest field above it; "" when the form shows nothing for it."""
        parts = [part.split("[")[0] for part in field_path.split(".") if part]
        while parts:
            name = _ANCHOR_ALIASES.get(SEPARATOR.join(parts), SEPARATOR.join(parts))
            if parts[0] == INPUT_FIELD and self.input_fields is not None:
                name = self.input_fields.name_at(tuple(parts[1:])) or (OTHER_FIELD if len(parts) == 1 else "")
            if name in self.fields:
                suffix = "_0" if name == "capabilities" else ""
                return f"{self[name].auto_id}{suffix}"
            parts.pop()
        return ""

    def delegation_name(self) -> str:
        """The name typed, or for a run of an unnamed delegation the goal's first line."""
        name = str(self.cleaned_data.get("name") or "").strip()
        goal = str(self.cleaned_data.get("goal") or "").strip().splitlines()
        if name or not goal:
            return name
        line = goal[0]
        if len(line) > NAME_FROM_GOAL_CHARS:   # cut at a word, not inside one
            line = line[:NAME_FROM_GOAL_CHARS].rsplit(" ", 1)[0].rstrip(",;:.-– ") + "…"
        return line


def _filled(field: BoundField) -> bool:
    """Whether a field holds more than its default (``max_iterations`` starts at 5)."""
    value, default = field.value(), field.field.initial
    return not _empty(value) and value != default and str(value) != str(default)


def _roles(key: str) -> tuple[str, ...]:
    return (key,) if key in AGLOOP_ROLES else AGLOOP_ROLES if key == "base" else ()


_ANCHOR_ALIASES = {
    "success_criteria": CRITERIA_TEXT, "verifier_params__review_depth": "review_depth",
    "budget": "budget__max_model_calls", "context": "context__original_request",
    "specification_adherence": "specification_adherence__required_patterns",
    "executor_params": "executor_params__task_definition__id",
    "verifier_params": "verifier_params__task_definition__id",
    "researcher_params": "researcher_params__complexity_level",
    "planner_params": "planner_params__research_findings",
    "critic_params": "critic_params__plan_yaml_path", "extra": OTHER_FIELD,
    "previous_failure": OTHER_FIELD, "metadata": OTHER_FIELD, "depth": "max_depth",
}


class AdapterForm(RunStartForm):
    """The run form's choice of model, without its packet: the composer supplies that."""

    packet = None  # type: ignore[assignment]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        config = self.fields["adapter_config"]
        config.widget.attrs["rows"] = 2   # most runs leave it empty
        config.help_text = 'Optional JSON, e.g. {"model": "smollm2-135m"} for local or {"script": [...]} for scripted.'


class ImportForm(forms.Form):
    """A packet to fill the form with, in any dialect, pasted or as a file."""

    packet_json = forms.CharField(
        required=False, max_length=PASTE_LIMIT, label="Packet",
        widget=forms.Textarea(attrs={"rows": 14, "spellcheck": "false", "class": "mono"}),
        help_text="Any dialect: delegate_task arguments, an agloop delegation, a HandoffPackage, a "
                  "delegation contract or sessions_spawn parameters.")
    packet_file = forms.FileField(required=False, label="…or upload a .json file")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        upload = cleaned.get("packet_file")
        if upload is not None:
            if upload.size > PASTE_LIMIT:
                raise ValidationError(f"The file is larger than {PASTE_LIMIT // 1024} KB.")
            try:
                cleaned["packet_json"] = upload.read().decode("utf-8-sig")   # as Notepad saves it too
            except UnicodeDecodeError:
                raise ValidationError("The file is not UTF-8 text.") from None
        if not str(cleaned.get("packet_json") or "").strip():
            raise ValidationError("Paste a packet or choose a file.")
        return cleaned
