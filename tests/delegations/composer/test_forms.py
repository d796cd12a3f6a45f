"""The composer form: a packet into fields and back, for every role and for a skill."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from django import forms
from django.http import QueryDict

from delegations.composer.forms import (
    STANDARD_CHECKLIST_ITEMS,
    ComposerForm,
    initial_from_packet,
    new_initial,
    packet_from_form,
)
from delegations.protocol.packet import parse_packet
from skills.models import Skill
from tests.protocol import protocol_examples as examples
from tests.skills.factories import add_skill

NESTED_SCHEMA = {
    "type": "object",
    "required": ["query", "address"],
    "properties": {
        "query": {"type": "string"},
        "limit": {"type": "integer", "minimum": 1},
        "address": {"type": "object", "required": ["city"], "properties": {
            "city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]+$"}}},
        "sources": {"type": "array", "items": {"type": "string"}},
    },
}


def submitted(form: ComposerForm) -> QueryDict:
    """What a browser sends for the rendered form, criterion rows included."""
    data = QueryDict(mutable=True)
    subforms: list[forms.Form] = [form, *form.criteria.forms]
    for name, value in form.criteria.management_form.initial.items():
        data[f"{form.criteria.prefix}-{name}"] = str(value)
    for subform in subforms:
        for field in subform:
            value, widget = field.value(), field.field.widget
            if isinstance(widget, forms.CheckboxInput):
                if value:
                    data[field.html_name] = "on"
            elif isinstance(widget, forms.NullBooleanSelect):
                data[field.html_name] = {True: "true", False: "false"}.get(value, "unknown")
            elif isinstance(value, list):
                data.setlist(field.html_name, [str(item) for item in value])
            elif value is not None:
                data[field.html_name] = str(value)
    return data


def round_trip(packet: dict[str, Any], skill: Skill | None = None) -> dict[str, Any]:
    form = ComposerForm(skill=skill, initial=initial_from_packet(packet))
    again = ComposerForm(submitted(form), skill=skill)
    assert again.is_valid(), again.errors
    return packet_from_form(again.cleaned_data)


def canonical(packet: dict[str, Any]) -> dict[str, Any]:
    return parse_packet(packet).to_dict()


@pytest.mark.parametrize("name", [
    "AGLOOP_RESEARCHER", "AGLOOP_PLANNER", "AGLOOP_CRITIC", "AGLOOP_EXECUTOR", "AGLOOP_VERIFIER",
    "HANDOFF_DELEGATE_TASK_ARGS", "HANDOFF_PACKAGE", "DELEGATION_CONTRACT", "OPENCLAW_SPAWN_PARAMS",
])
def test_a_protocol_example_comes_back_exactly(name):
    packet = canonical(getattr(examples, name))
    assert round_trip(packet) == packet


@pytest.mark.parametrize("role", ["coder", "reviewer"])
def test_the_hand_off_protocol_roles_come_back_exactly(role):
    packet = canonical({**examples.HANDOFF_DELEGATE_TASK_ARGS, "subagent_type": role, "goal": "Review auth.py",
                        "success_criteria": ["Tests pass", {"kind": "files_modified", "paths": ["src/auth.py"]}],
                        "capabilities": ["fs_read", "fs_write"], "allow_nested": True, "max_depth": 2,
                        "budget": {"max_tokens": 1000, "max_cost_usd": 0.5}, "timeout_s": 90})
    assert round_trip(packet) == packet


def test_a_skill_with_a_nested_input_schema_comes_back_exactly(db):
    skill = add_skill("geo", "1.0.0", input_schema=NESTED_SCHEMA, capabilities=["search"])
    packet = canonical({"skill": "geo@1.0.0", "goal": "Find shops near the address", "input_data": {
        "query": "bike shops", "limit": 5, "address": {"city": "Oslo", "zip": "0150"},
        "sources": ["maps", "yelp"], "unlisted": {"kept": True}}, "capabilities": ["search"]})
    form = ComposerForm(skill=skill, initial=initial_from_packet(packet))
    assert form["input__address__city"].value() == "Oslo"
    assert form["other"].value() == '{\n  "input_data": {\n    "unlisted": {\n      "kept": true\n    }\n  }\n}'
    assert round_trip(packet, skill) == packet


def test_structured_criteria_come_back_as_rows_and_odd_ones_as_json_lines():
    criteria = ["Word count > 500", {"kind": "regex", "field": "summary", "pattern": "USD", "ignore_case": True},
                {"kind": "range", "path": "price", "min": 0, "max": 10000, "max_exclusive": True}]
    initial = initial_from_packet(canonical({"goal": "Price it", "success_criteria": criteria}))
    assert initial["success_criteria_text"] == ["Word count > 500"] and len(initial["criteria_rows"]) == 2
    out_of_order = [criteria[1], "Word count > 500", {"kind": "field", "field": "price"}]
    initial = initial_from_packet(canonical({"goal": "Price it", "success_criteria": out_of_order}))
    assert initial["success_criteria_text"] == out_of_order and initial["criteria_rows"] == []
    packet = canonical({"goal": "Price it", "success_criteria": out_of_order})
    assert round_trip(packet) == packet


def test_grounding_criteria_are_rows_like_the_others_and_round_trip():
    criteria = [{"kind": "appears_in", "path": "price", "source": "quote_text"},
                {"kind": "words_absent", "words_of": "question", "source": "context",
                 "when": {"path": "found", "value": False}}]
    packet = canonical({"goal": "Answer it", "success_criteria": criteria})
    initial = initial_from_packet(packet)
    assert initial["criteria_rows"] == criteria
    assert round_trip(packet) == packet
    posted = QueryDict(mutable=True)
    posted.update({"goal": "Answer it", "criterion-TOTAL_FORMS": "1", "criterion-INITIAL_FORMS": "0",
                   "criterion-0-kind": "quoted_from", "criterion-0-path": "evidence",
                   "criterion-0-source": "review", "criterion-0-when_path": "found",
                   "criterion-0-when_value": "true"})
    bound = ComposerForm(posted)
    assert bound.is_valid(), bound.errors
    assert packet_from_form(bound.cleaned_data)["success_criteria"] == [
        {"kind": "quoted_from", "path": "evidence", "source": "review", "when": {"path": "found", "value": True}}]


def test_a_criterion_row_without_a_kind_asks_for_one():
    form = ComposerForm(initial={"goal": "Price it"})
    data = submitted(form)
    data["criterion-0-pattern"] = "USD"
    bound = ComposerForm(data)
    assert not bound.is_valid()
    assert bound.criteria.forms[0].non_field_errors() == ["Pick a kind for this criterion, or clear the row."]


def test_invalid_json_is_an_error_at_its_field_and_the_text_is_kept():
    data = submitted(ComposerForm(initial={"goal": "Price it"}))
    data["expected_output_schema"] = '{"price": number}'
    bound = ComposerForm(data)
    assert not bound.is_valid()
    assert bound.errors["expected_output_schema"] == [
        "This is not valid JSON: Expecting value at line 1, column 11."]
    assert bound["expected_output_schema"].value() == '{"price": number}'


def test_the_goal_is_required():
    data = submitted(ComposerForm(initial={}))
    assert ComposerForm(data).errors["goal"] == ["This field is required."]


def test_only_the_picked_roles_parameters_count():
    data = submitted(ComposerForm(initial=initial_from_packet(canonical(examples.AGLOOP_EXECUTOR))))
    data["subagent_type"] = "coder"
    bound = ComposerForm(data)
    assert bound.is_valid(), bound.errors
    assert "executor_params" not in packet_from_form(bound.cleaned_data)


def test_protocol_defaults_are_left_out():
    form = ComposerForm(initial={"goal": "Price it"})
    bound = ComposerForm(submitted(form))
    assert bound.is_valid(), bound.errors
    assert packet_from_form(bound.cleaned_data) == {"goal": "Price it"}


def test_a_new_delegation_starts_with_the_standard_checklist_and_no_goal():
    initial = new_initial(role="executor")
    assert initial["anti_laziness_checklist"] == STANDARD_CHECKLIST_ITEMS
    assert "goal" not in initial and initial["subagent_type"] == "executor"


def test_a_new_delegation_from_a_skill_takes_its_schemas_and_capabilities(db):
    skill = add_skill("geo", "1.0.0", input_schema=NESTED_SCHEMA, output_schema={"shops": "array"},
                      capabilities=["search"])
    form = ComposerForm(skill=skill, initial=new_initial(skill))
    assert form["skill"].value() == "geo@1.0.0" and form["subagent_type"].value() == "researcher"
    assert form["expected_output_schema"].value().startswith('{\n  "type": "object"')
    assert [choice.name for choice in form.capability_choices()] == ["search"]


def test_a_new_delegation_from_a_skill_fills_in_nothing_the_person_did_not_choose(db):
    skill = add_skill("geo", "1.0.0", input_schema=NESTED_SCHEMA, output_schema={"shops": "array"})
    initial = new_initial(skill)
    packet = packet_from_form({**initial, "goal": "Find shops"})
    # no coding checklist, no allowed_inputs list, no example input, no criteria of its own
    assert set(packet) == {"goal", "skill", "subagent_type", "expected_output_schema", "capabilities",
                           "timeout_s", "budget"}
    form = ComposerForm(skill=skill, initial=initial)
    folded = {field.name for section in form.advanced_sections() for field in section.fields}
    assert {"anti_laziness_checklist", "allowed_inputs", "feature_name", "instruction_set"} <= folded
    assert not form.advanced_open()
    assert [section.key for section in form.sections()] == ["task", "input", "expectations", "budget", "scope"]


def test_capabilities_the_packet_asks_for_are_kept_even_when_not_offered():
    packet = canonical({"goal": "Price it", "capabilities": ["fs_read", "teleport"]})
    form = ComposerForm(initial=initial_from_packet(packet))
    choices = {choice.name: choice for choice in form.capability_choices()}
    assert choices["teleport"].checked and not choices["teleport"].known
    assert choices["network_outbound"].needs_approval and not choices["fs_read"].needs_approval
    assert round_trip(packet) == packet


def test_findings_point_at_the_field_they_are_about():
    form = ComposerForm(initial={"goal": "Price it", "subagent_type": "executor"})
    assert form.anchor("goal") == "id_goal"
    assert form.anchor("success_criteria[2]") == "id_success_criteria_text"
    assert form.anchor("executor_params.task_definition.files_to_read") == (
        "id_executor_params__task_definition__files_to_read")
    assert form.anchor("verifier_params.review_depth") == "id_review_depth"
    assert form.anchor("capabilities[1]") == "id_capabilities_0"
    assert form.anchor("extra.colour") == "id_other"
    assert form.anchor("parent") == ""


def test_the_checklist_prefill_is_editable():
    initial = new_initial(role="executor")
    data = submitted(ComposerForm(initial={**initial, "goal": "Implement the endpoint"}))
    data["anti_laziness_checklist"] = "Run the linter before handing back\nKeep the public API as it is"
    bound = ComposerForm(data)
    assert bound.is_valid(), bound.errors
    assert packet_from_form(bound.cleaned_data)["anti_laziness_checklist"] == [
        "Run the linter before handing back", "Keep the public API as it is"]


def test_the_form_does_not_change_the_packet_it_was_given():
    packet = canonical(examples.AGLOOP_VERIFIER)
    before = copy.deepcopy(packet)
    round_trip(packet)
    assert packet == before
