"""The hand-off packet: every dialect's spelling parses into one canonical packet."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delegations.protocol.budgets import Budget
from delegations.protocol.errors import ErrorCode, ProtocolError
from delegations.protocol.number_limits import MAX_SECONDS
from delegations.protocol.packet import (
    HandoffPacket,
    PreviousFailure,
    SubagentType,
    TaskDefinition,
    parse_packet,
)
from tests.protocol import protocol_examples as examples

ALL_EXAMPLE_PACKETS = {
    "handoff_parent_request": examples.HANDOFF_PARENT_REQUEST,
    "handoff_delegate_task": examples.HANDOFF_DELEGATE_TASK_ARGS,
    "agloop_researcher": examples.AGLOOP_RESEARCHER,
    "agloop_planner": examples.AGLOOP_PLANNER,
    "agloop_critic": examples.AGLOOP_CRITIC,
    "agloop_executor": examples.AGLOOP_EXECUTOR,
    "agloop_executor_flat": examples.agloop_executor_flat(),
    "agloop_executor_retry": examples.agloop_executor_retry(),
    "agloop_verifier": examples.AGLOOP_VERIFIER,
    "handoff_package": examples.HANDOFF_PACKAGE,
    "delegation_contract": examples.DELEGATION_CONTRACT,
    "delegation_contract_flat": examples.DELEGATION_CONTRACT_FLAT,
    "openclaw_spawn": examples.OPENCLAW_SPAWN_PARAMS,
}


def issues_of(data: Any) -> dict[str, str]:
    with pytest.raises(ProtocolError) as caught:
        parse_packet(data)
    assert caught.value.code == ErrorCode.INVALID_PACKET
    return {issue.field: issue.message for issue in caught.value.issues}


# -- the hand-off protocol --------------------------------------------------------------------

def test_it_reads_the_hand_off_protocols_parent_request_payload_as_input_data() -> None:
    packet = parse_packet(examples.HANDOFF_PARENT_REQUEST)
    assert packet.task_id == "99ea-42"
    assert packet.subagent_type == SubagentType.RESEARCHER
    assert packet.input_data == {"query": "Current price of TSLA",
                                 "sources": ["yahoo_finance", "bloomberg"]}
    assert packet.success_criteria == ["Return a float value", "Specify currency"]
    assert "payload" not in packet.to_dict()


def test_it_keeps_every_delegate_task_argument() -> None:
    packet = parse_packet(examples.HANDOFF_DELEGATE_TASK_ARGS)
    assert packet.subagent_type == "researcher"
    assert packet.instruction_set == examples.HANDOFF_DELEGATE_TASK_ARGS["instruction_set"]
    assert packet.input_data["query"] == "Current price of TSLA"
    assert packet.max_iterations == 5
    assert packet.termination_trigger == "yield_control called with the price"


def test_it_derives_the_goal_from_the_instruction_set_when_nothing_better_is_given() -> None:
    packet = parse_packet(examples.HANDOFF_DELEGATE_TASK_ARGS)
    assert packet.goal == examples.HANDOFF_DELEGATE_TASK_ARGS["instruction_set"]


def test_it_unwraps_a_whole_delegate_task_tool_call_with_json_text_arguments() -> None:
    call = {"name": "delegate_task", "arguments": json.dumps(examples.HANDOFF_DELEGATE_TASK_ARGS)}
    assert parse_packet(call) == parse_packet(examples.HANDOFF_DELEGATE_TASK_ARGS)


def test_it_rejects_a_tool_call_whose_arguments_are_not_json() -> None:
    assert "arguments" in issues_of({"name": "delegate_task", "arguments": "{oops"})


# -- the agloop delegation protocol -----------------------------------------------------------

@pytest.mark.parametrize(("example", "role"), [
    (examples.AGLOOP_RESEARCHER, "researcher"),
    (examples.AGLOOP_PLANNER, "planner"),
    (examples.AGLOOP_CRITIC, "critic"),
    (examples.AGLOOP_EXECUTOR, "executor"),
    (examples.AGLOOP_VERIFIER, "verifier"),
])
def test_it_infers_the_subagent_type_from_the_role_params_block(example: dict[str, Any],
                                                                role: str) -> None:
    packet = parse_packet(example)
    assert packet.subagent_type == role
    assert packet.role_params is not None
    assert packet.present_role_params == [f"{role}_params"]


def test_it_lifts_nested_base_params_to_the_top_level() -> None:
    packet = parse_packet(examples.AGLOOP_EXECUTOR)
    assert packet.task_id == "task-003"
    assert packet.feature_name == examples.FEATURE_NAME
    assert packet.current_phase == "execute"
    assert (packet.plan_path, packet.state_path, packet.log_path) == (
        ".agloop/plan.yaml", ".agloop/state.json", ".agloop/log.json")


def test_nested_and_flat_base_params_are_the_same_packet_with_the_same_hash() -> None:
    nested = parse_packet(examples.AGLOOP_EXECUTOR)
    flat = parse_packet(examples.agloop_executor_flat())
    assert nested == flat
    assert nested.packet_hash() == flat.packet_hash()


def test_it_types_the_executor_task_definition_and_keeps_the_context_map() -> None:
    params = parse_packet(examples.AGLOOP_EXECUTOR).executor_params
    assert params is not None
    definition = params.task_definition
    assert isinstance(definition, TaskDefinition)
    assert definition.id == "task-003"
    assert definition.files_to_modify == examples.AGLOOP_TASK_DEFINITION["files_to_modify"]
    assert definition.files_to_read == examples.AGLOOP_TASK_DEFINITION["files_to_read"]
    assert params.acceptance_criteria == examples.AGLOOP_ACCEPTANCE_CRITERIA
    assert params.context_map == examples.AGLOOP_EXECUTOR["executor_params"]["context_map"]


def test_it_keeps_the_goal_of_an_executor_as_its_task_description() -> None:
    packet = parse_packet(examples.AGLOOP_EXECUTOR)
    assert packet.goal == examples.AGLOOP_TASK_DEFINITION["description"]


def test_it_keeps_the_researchers_goal_as_the_verbatim_feature_name() -> None:
    assert parse_packet(examples.AGLOOP_RESEARCHER).goal == examples.FEATURE_NAME


def test_it_reads_specification_adherence_and_the_checklist() -> None:
    packet = parse_packet(examples.AGLOOP_EXECUTOR)
    assert packet.specification_adherence is not None
    assert packet.specification_adherence.forbidden_patterns == (
        examples.AGLOOP_EXECUTOR_SPEC["forbidden_patterns"])
    assert packet.specification_adherence.tech_choices == examples.AGLOOP_EXECUTOR_SPEC["tech_choices"]
    assert packet.anti_laziness_checklist == examples.AGLOOP_EXECUTOR_TEMPLATE_CHECKLIST
    assert packet.previous_failure is None


def test_it_splits_the_agloop_markdown_checklist_into_items() -> None:
    packet = parse_packet({**examples.AGLOOP_EXECUTOR,
                           "anti_laziness_checklist": examples.AGLOOP_CHECKLIST_MARKDOWN})
    assert packet.anti_laziness_checklist == (
        examples.AGLOOP_FULL_CHECKLIST + examples.AGLOOP_TASK_SPECIFIC_ITEMS)


def test_it_types_the_previous_failure_of_a_retry() -> None:
    packet = parse_packet(examples.agloop_executor_retry())
    assert packet.previous_failure == PreviousFailure(**examples.AGLOOP_PREVIOUS_FAILURE)
    assert packet.attempt == 2


def test_it_joins_fix_instructions_given_as_a_list() -> None:
    retry = examples.agloop_executor_retry()
    retry["previous_failure"]["fix_instructions"] = ["Validate page_size", "Return 400"]
    packet = parse_packet(retry)
    assert packet.previous_failure is not None
    assert packet.previous_failure.fix_instructions == "Validate page_size\nReturn 400"


def test_it_keeps_the_review_depth_in_both_places_whichever_spelling_is_used() -> None:
    nested = parse_packet(examples.AGLOOP_VERIFIER)
    moved = copy.deepcopy(examples.AGLOOP_VERIFIER)
    moved["review_depth"] = moved["verifier_params"].pop("review_depth")
    top = parse_packet(moved)
    assert nested.review_depth == "standard"
    assert nested.verifier_params is not None and nested.verifier_params.review_depth == "standard"
    assert top == nested and top.packet_hash() == nested.packet_hash()


def test_it_rejects_two_different_review_depths() -> None:
    data = {**examples.AGLOOP_VERIFIER, "review_depth": "full"}
    assert "verifier_params.review_depth" in issues_of(data)


def test_it_types_the_critics_previous_objections_and_the_planners_revision_feedback() -> None:
    critic = parse_packet(examples.AGLOOP_CRITIC).critic_params
    assert critic is not None and critic.previous_objections[0].resolved is True
    planner_data = copy.deepcopy(examples.AGLOOP_PLANNER)
    planner_data["planner_params"]["revision_feedback"] = examples.AGLOOP_REVISION_FEEDBACK
    planner = parse_packet(planner_data).planner_params
    assert planner is not None and planner.revision_feedback is not None
    assert planner.revision_feedback.previous_plan_path == ".agloop/plan.yaml"


def test_it_keeps_several_task_definitions_so_lint_can_report_them() -> None:
    data = copy.deepcopy(examples.AGLOOP_EXECUTOR)
    second = {**examples.AGLOOP_TASK_DEFINITION, "id": "task-004"}
    data["executor_params"]["task_definition"] = [examples.AGLOOP_TASK_DEFINITION, second]
    params = parse_packet(data).executor_params
    assert params is not None
    assert [task.id for task in params.task_definitions] == ["task-003", "task-004"]


def test_it_reads_a_one_item_task_definition_list_as_the_task() -> None:
    data = copy.deepcopy(examples.AGLOOP_EXECUTOR)
    data["executor_params"]["task_definition"] = [examples.AGLOOP_TASK_DEFINITION]
    assert parse_packet(data) == parse_packet(examples.AGLOOP_EXECUTOR)


def test_it_rejects_a_phase_the_agloop_protocol_does_not_name() -> None:
    data = examples.agloop_executor_flat()
    data["current_phase"] = "deploy"
    assert "current_phase" in issues_of(data)


# -- the HandoffPackage format ----------------------------------------------------------------

def test_it_normalizes_a_camel_case_handoff_package() -> None:
    packet = parse_packet(examples.HANDOFF_PACKAGE)
    assert packet.task is not None and packet.task.requirements == [
        "Cite each paper with its DOI", "Keep the summary under 300 words"]
    assert packet.context is not None
    assert packet.context.original_request == "What are the key papers on RAG and what do they say?"
    assert packet.context.relevant_files == ["notes/rag-candidates.md"]
    assert packet.context.intermediate_results == {
        "candidates": ["Lewis 2020", "Guu 2020", "Borgeaud 2022"]}
    assert packet.metadata is not None
    assert (packet.metadata.source_agent, packet.metadata.target_agent) == ("planner", "researcher")
    assert packet.metadata.attempt == 1 and packet.metadata.priority == 2


def test_it_reads_a_handoff_packages_expectations_as_schema_criteria_and_timeout() -> None:
    packet = parse_packet(examples.HANDOFF_PACKAGE)
    assert packet.expected_output_schema == examples.HANDOFF_PACKAGE["expectations"]["outputFormat"]
    assert packet.success_criteria == ["JSON is schema-valid", "Word count > 100"]
    assert packet.timeout_s == 120.0


def test_it_derives_goal_task_id_and_subagent_type_from_a_handoff_package() -> None:
    packet = parse_packet(examples.HANDOFF_PACKAGE)
    assert packet.goal == examples.HANDOFF_PACKAGE["task"]["description"]
    assert packet.task_id == "task-42"
    assert packet.subagent_type == "researcher"


def test_it_leaves_free_form_data_keys_untouched() -> None:
    data = copy.deepcopy(examples.HANDOFF_PACKAGE)
    data["context"]["intermediateResults"] = {"camelKey": {"innerKey": 1}}
    packet = parse_packet(data)
    assert packet.context is not None
    assert packet.context.intermediate_results == {"camelKey": {"innerKey": 1}}


def test_a_top_level_attempt_goes_to_metadata() -> None:
    packet = parse_packet({"goal": "retry the import", "attempt": 2})
    assert packet.metadata is not None and packet.metadata.attempt == 2
    assert packet.attempt == 2


# -- delegation contracts ---------------------------------------------------------------------

def test_it_reads_a_delegation_contract() -> None:
    packet = parse_packet(examples.DELEGATION_CONTRACT)
    assert packet.goal == examples.CONTRACT_GOAL
    assert packet.allowed_inputs == ["project_docs", "candidate_solutions"]
    assert packet.input_data == examples.DELEGATION_CONTRACT["inputData"]
    assert packet.expected_output_schema == examples.DELEGATION_CONTRACT["expectedOutput"]
    assert packet.budget == Budget(max_model_calls=20, max_tokens=50000, max_runtime_s=600,
                                   max_cost_usd=1.5, max_concurrency=2)
    assert packet.capabilities == ["fs_read", "search"]
    assert packet.success_criteria == ["JSON is schema-valid", "Include at least 2 sources"]


def test_flat_and_nested_budgets_give_the_same_hash() -> None:
    assert (parse_packet(examples.DELEGATION_CONTRACT).packet_hash()
            == parse_packet(examples.DELEGATION_CONTRACT_FLAT).packet_hash())


@pytest.mark.parametrize("container", ["budget", "budgets", "resourceBoundaries", "limits"])
def test_it_accepts_each_budget_container_name(container: str) -> None:
    packet = parse_packet({"goal": "g", container: {"maxTokens": 10, "maxRuntimeSeconds": 5}})
    assert packet.budget == Budget(max_tokens=10, max_runtime_s=5)


def test_it_normalizes_a_shorthand_expected_output_to_json_schema() -> None:
    packet = parse_packet({"goal": "price", "expected_output": {"price": "number",
                                                                "currency": "string"}})
    assert packet.expected_output_schema == {
        "type": "object",
        "properties": {"price": {"type": "number"}, "currency": {"type": "string"}},
        "required": ["price", "currency"],
    }


def test_it_rejects_a_free_text_expected_output() -> None:
    found = issues_of({"goal": "g", "expectedOutput": "a risk matrix"})
    assert "expectedOutput" in found and "schema" in found["expectedOutput"]


def test_it_rejects_an_invalid_json_schema_naming_the_spelling_used() -> None:
    found = issues_of({"goal": "g", "outputSchema": {"type": "strin"}})
    assert any(field.startswith("outputSchema") for field in found)


def test_it_accepts_a_capability_scope_as_a_plain_list() -> None:
    assert parse_packet({"goal": "g", "scope": ["fs_read"]}).capabilities == ["fs_read"]


def test_a_capability_scope_object_can_carry_the_depth_limits() -> None:
    packet = parse_packet({"goal": "g", "capabilityScope": {
        "capabilities": ["fs_read"], "maxDepth": 2, "allowNested": True}})
    assert (packet.capabilities, packet.max_depth, packet.allow_nested) == (["fs_read"], 2, True)


# -- OpenClaw sub-agents ----------------------------------------------------------------------

def test_it_reads_openclaw_spawn_parameters() -> None:
    packet = parse_packet(examples.OPENCLAW_SPAWN_PARAMS)
    assert packet.goal == examples.OPENCLAW_SPAWN_PARAMS["task"]
    assert (packet.label, packet.agent_id, packet.model, packet.thinking) == (
        "bug-triage", "main", "smollm2-135m", "low")
    assert packet.timeout_s == 300.0
    assert packet.cleanup == "keep"


def test_a_zero_run_timeout_means_no_timeout_as_in_openclaw() -> None:
    packet = parse_packet({**examples.OPENCLAW_SPAWN_PARAMS, "runTimeoutSeconds": 0})
    assert packet.timeout_s is None


def test_it_unwraps_a_sessions_spawn_call() -> None:
    call = {"name": "sessions_spawn", "arguments": examples.OPENCLAW_SPAWN_PARAMS}
    assert parse_packet(call) == parse_packet(examples.OPENCLAW_SPAWN_PARAMS)


def test_timeout_spellings_are_equivalent() -> None:
    hashes = {parse_packet({"goal": "g", key: value}).packet_hash() for key, value in (
        ("timeout_s", 30), ("timeoutMs", 30000), ("runTimeoutSeconds", 30),
        ("expectations", {"timeoutMs": 30000}))}
    assert len(hashes) == 1


def test_it_rejects_two_different_timeouts() -> None:
    found = issues_of({"goal": "g", "timeoutMs": 1000, "runTimeoutSeconds": 5})
    assert "runTimeoutSeconds" in found or "timeoutMs" in found


# -- unknown keys and errors ---------------------------------------------------------------

def test_it_keeps_unknown_top_level_keys_in_extra() -> None:
    packet = parse_packet({"goal": "g", "sucessCriteria": ["Tests pass"]})
    assert packet.extra == {"sucessCriteria": ["Tests pass"]}
    assert parse_packet(packet.canonical_json()) == packet


def test_it_keeps_unknown_keys_inside_a_typed_part() -> None:
    packet = parse_packet({"goal": "g", "context": {"summary": "s", "mood": "curious"}})
    assert packet.context is not None and packet.context.model_extra == {"mood": "curious"}
    assert packet.to_dict()["context"] == {"summary": "s", "mood": "curious"}


def test_model_validate_takes_only_the_canonical_form() -> None:
    canonical = parse_packet(examples.DELEGATION_CONTRACT).to_dict()
    assert HandoffPacket.model_validate(canonical) == parse_packet(examples.DELEGATION_CONTRACT)
    with pytest.raises(ValueError, match="allowedInputs"):
        HandoffPacket.model_validate({"goal": "g", "allowedInputs": ["a"]})


def test_it_lists_every_problem_with_its_field_path() -> None:
    found = issues_of({
        "timeoutMs": "soon",
        "subagent_type": "boss",
        "success_criteria": ["Tests pass", 7],
        "budget": {"maxTokens": -1, "maxPizzas": 2},
        "cleanup": "archive",
        "metadata": {"attempt": 0},
        "max_iterations": True,
        "skill": "bad name",
    })
    assert set(found) == {"timeoutMs", "subagent_type", "success_criteria[1]",
                          "budget.maxTokens", "budget.maxPizzas", "cleanup",
                          "metadata.attempt", "max_iterations", "skill"}
    assert "milliseconds" in found["timeoutMs"]
    assert "'coder'" in found["subagent_type"] and "boss" in found["subagent_type"]
    assert found["success_criteria[1]"].startswith("must be a string or an object")
    assert "greater than or equal to 0" in found["budget.maxTokens"]
    assert "max_tokens" in found["budget.maxPizzas"]
    assert "'keep' or 'delete'" in found["cleanup"]
    assert "true/false" in found["max_iterations"]
    assert "name@version" in found["skill"]


@pytest.mark.parametrize(("packet", "field"), [
    ({"timeout_s": True}, "timeout_s"),
    ({"runTimeoutSeconds": True}, "runTimeoutSeconds"),
    ({"budget": {"max_tokens": False}}, "budget.max_tokens"),
    ({"metadata": {"priority": True}}, "metadata.priority"),
])
def test_a_boolean_is_not_read_as_a_number(packet: dict[str, Any], field: str) -> None:
    assert issues_of({"goal": "g", **packet})[field].startswith("must be a number, not true/false")


@pytest.mark.parametrize(("packet", "field"), [
    ({"timeout_s": "120"}, "timeout_s"),
    ({"max_iterations": "5"}, "max_iterations"),
    ({"budget": {"max_tokens": "5000"}}, "budget.max_tokens"),
    ({"budget": {"maxCostUsd": "0.5"}}, "budget.maxCostUsd"),
    ({"max_runtime_s": "60"}, "max_runtime_s"),
    ({"max_depth": "3"}, "max_depth"),
    ({"metadata": {"attempt": "2"}}, "metadata.attempt"),
    ({"previous_failure": {"attempt_number": "2"}}, "previous_failure.attempt_number"),
])
def test_a_number_in_quotes_is_refused_saying_to_write_it_without(packet: dict[str, Any], field: str) -> None:
    message = issues_of({"goal": "g", **packet})[field]
    assert message.startswith("must be a number written without quotes, not text")


@pytest.mark.parametrize(("packet", "field", "most"), [
    ({"timeout_s": 86_401}, "timeout_s", "86,400"),
    ({"timeout_s": 1e308}, "timeout_s", "86,400"),
    ({"timeoutMs": 86_400_001}, "timeoutMs", "86,400,000 milliseconds"),
    ({"budget": {"max_runtime_s": 10**6}}, "budget.max_runtime_s", "86,400"),
    ({"budget": {"max_tokens": 10**30}}, "budget.max_tokens", "1,000,000,000"),
    ({"budget": {"max_model_calls": 10**9 + 1}}, "budget.max_model_calls", "1,000,000,000"),
    ({"budget": {"max_cost_usd": 1e308}}, "budget.max_cost_usd", "1,000,000"),
    ({"budget": {"max_concurrency": 10**6}}, "budget.max_concurrency", "1,000"),
    ({"budget": {"max_iterations": 10**30}}, "budget.max_iterations", "1,000,000,000"),
    ({"max_iterations": 10**30}, "max_iterations", "1,000,000,000"),
    ({"depth": 10**30}, "depth", "100"),
    ({"max_depth": 101}, "max_depth", "100"),
    ({"metadata": {"attempt": 10**30, "priority": -10**30}}, "metadata.attempt", "1,000,000,000"),
    ({"metadata": {"priority": 10**30}}, "metadata.priority", "1,000,000,000"),
])
def test_a_number_past_its_bound_is_refused_naming_the_bound(packet: dict[str, Any], field: str,
                                                             most: str) -> None:
    assert issues_of({"goal": "g", **packet})[field].startswith(f"must be at most {most}")


def test_numbers_at_their_bounds_are_taken() -> None:
    packet = parse_packet({"goal": "g", "timeout_s": 86_400, "max_iterations": 10**9, "max_depth": 100,
                           "budget": {"max_tokens": 10**9, "max_model_calls": 10**9,
                                      "max_runtime_s": 86_400, "max_cost_usd": 10**6,
                                      "max_concurrency": 1_000, "max_iterations": 10**9}})
    assert packet.timeout_s == 86_400 and packet.budget.max_tokens == 10**9
    assert packet.budget.max_cost_usd == 10**6 and packet.max_depth == 100


def test_the_error_message_says_how_many_problems_and_the_first() -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_packet({"cleanup": "archive", "depth": -1})
    assert "2 problems" in caught.value.message
    assert caught.value.as_dict()["code"] == "ERR_INVALID_PACKET"


def test_it_rejects_text_that_is_not_json() -> None:
    assert "" in issues_of("{not json")


def test_it_rejects_json_nested_past_what_the_parser_reads() -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_packet('{"goal": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert "nests arrays or objects too deeply" in caught.value.message
    assert [issue.message for issue in caught.value.issues] == ["not valid JSON: it nests arrays or objects too deeply to read"]


def test_it_rejects_tool_call_arguments_nested_past_what_the_parser_reads() -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_packet({"name": "delegate_task", "arguments": "[" * 100_000 + "]" * 100_000})
    assert "arguments are not valid JSON: it nests arrays or objects too deeply to read" in caught.value.message


def test_it_rejects_json_that_is_not_an_object() -> None:
    assert "" in issues_of("[1, 2]")


def test_it_rejects_nan_in_json_text() -> None:
    assert "" in issues_of('{"goal": "g", "input_data": {"x": NaN}}')


def test_it_reads_bytes() -> None:
    assert parse_packet(b'{"goal": "g"}').goal == "g"


def test_it_rejects_a_malformed_structured_criterion() -> None:
    found = issues_of({"goal": "g", "success_criteria": [{"kind": "telepathy"}]})
    assert any(field.startswith("success_criteria[0]") for field in found)


def test_it_reads_a_subagent_type_case_insensitively() -> None:
    assert parse_packet({"subagent_type": "Executor"}).subagent_type == "executor"


def test_criteria_from_several_spellings_are_merged_without_duplicates() -> None:
    packet = parse_packet({"goal": "g", "success_criteria": ["Tests pass"],
                           "completionCriteria": ["Tests pass", "Word count > 5"]})
    assert packet.success_criteria == ["Tests pass", "Word count > 5"]


# -- canonical form, hashes and round trips -------------------------------------------------

@pytest.mark.parametrize("name", sorted(ALL_EXAMPLE_PACKETS))
def test_every_example_packet_round_trips_through_canonical_json(name: str) -> None:
    packet = parse_packet(ALL_EXAMPLE_PACKETS[name])
    again = parse_packet(packet.canonical_json())
    assert again == packet
    assert again.canonical_json() == packet.canonical_json()


def test_canonical_json_has_sorted_keys_no_whitespace_and_no_defaults() -> None:
    text = parse_packet({"goal": "g", "max_iterations": 5, "cleanup": "keep",
                         "input_data": {"b": 1, "a": 2}}).canonical_json()
    assert text == '{"goal":"g","input_data":{"a":2,"b":1}}'


def test_packet_hash_is_the_sha256_of_the_canonical_json() -> None:
    packet = parse_packet(examples.DELEGATION_CONTRACT)
    assert packet.packet_hash() == hashlib.sha256(packet.canonical_json().encode()).hexdigest()
    assert packet.packet_hash() != parse_packet({**examples.DELEGATION_CONTRACT, "goal": "x"}).packet_hash()


def test_to_dict_can_include_the_defaults() -> None:
    full = parse_packet({"goal": "g"}).to_dict(include_defaults=True)
    assert full["max_iterations"] == 5 and full["max_depth"] == 3 and full["cleanup"] == "keep"


def test_parse_packet_returns_a_packet_it_is_given() -> None:
    packet = parse_packet(examples.DELEGATION_CONTRACT)
    assert parse_packet(packet) is packet


@pytest.mark.parametrize(("depth", "allow_nested", "max_depth", "expected"), [
    (0, False, 3, True),     # the root is the main agent
    (1, False, 3, False),    # a subagent may not spawn by default (as in OpenClaw)
    (1, True, 3, True),
    (3, True, 3, False),     # children would be beyond max_depth
])
def test_may_delegate_follows_depth_and_allow_nested(depth: int, allow_nested: bool,
                                                     max_depth: int, expected: bool) -> None:
    packet = parse_packet({"goal": "g", "depth": depth, "allow_nested": allow_nested,
                           "max_depth": max_depth})
    assert packet.may_delegate is expected


# -- property tests ----------------------------------------------------------------------------

# any text a packet may hold: no control characters but tab, newline and carriage return
# (delegations/protocol/text_limits.py refuses the others, tested there)
_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cc",), include_characters="\t\n\r"),
                max_size=30)
_json_leaf = st.none() | st.booleans() | st.integers(-10**6, 10**6) | _text | st.floats(
    allow_nan=False, allow_infinity=False, width=64)
_json = st.recursive(_json_leaf, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(_text, inner, max_size=3), max_leaves=10)
_budget = st.fixed_dictionaries({}, optional={
    "max_model_calls": st.integers(0, 1000), "max_tokens": st.integers(0, 10**6),
    "max_runtime_s": st.floats(0, MAX_SECONDS), "max_cost_usd": st.floats(0, 100),
    "max_concurrency": st.integers(1, 8), "max_iterations": st.integers(0, 50)})
_criteria = st.lists(st.sampled_from(["Tests pass", "Word count > 500", "Do a good job",
                                      "JSON is schema-valid", "Include at least 2 sources"]),
                     max_size=3)
_packets = st.fixed_dictionaries({}, optional={
    "task_id": _text,
    "subagent_type": st.sampled_from([member.value for member in SubagentType]),
    "goal": _text,
    "instruction_set": _text,
    "input_data": st.dictionaries(_text, _json, max_size=4),
    "max_iterations": st.integers(1, 20),
    "success_criteria": _criteria,
    "timeout_s": st.floats(0.001, MAX_SECONDS),
    "budget": _budget,
    "capabilities": st.lists(st.sampled_from(["fs_read", "fs_write", "network_outbound"]),
                             max_size=3),
    "depth": st.integers(0, 5),
    "max_depth": st.integers(0, 5),
    "allow_nested": st.booleans(),
    "label": _text,
    "cleanup": st.sampled_from(["keep", "delete"]),
    "feature_name": _text,
    "current_phase": st.sampled_from(["research", "execute", "verify"]),
    "anti_laziness_checklist": st.lists(_text.filter(str.strip), max_size=3),
    "context": st.fixed_dictionaries({}, optional={
        "originalRequest": _text, "relevantFiles": st.lists(_text, max_size=2),
        "intermediateResults": st.dictionaries(_text, _json, max_size=2)}),
    "metadata": st.fixed_dictionaries({}, optional={"attempt": st.integers(1, 5),
                                                    "priority": st.integers(0, 5)}),
    "extra_key": _json,
})


@settings(max_examples=150, deadline=None)
@given(_packets)
def test_any_packet_round_trips_through_json_unchanged(data: dict[str, Any]) -> None:
    packet = parse_packet(data)
    text = packet.canonical_json()
    again = parse_packet(text)
    assert again == packet
    assert again.canonical_json() == text
    assert parse_packet(json.loads(text)).packet_hash() == packet.packet_hash()


@pytest.mark.parametrize(("packet", "field"), [
    ({"goal": "half a pair \ud800"}, "goal"),
    ({"goal": "g", "input_data": {"rows": [{"name": "nul\x00"}]}}, "input_data.rows[0].name"),
    ({"goal": "g", "context": {"note\x07": 1}}, "context.note\x07"),
])
def test_a_packet_with_invalid_text_is_refused_naming_the_field(packet: dict[str, Any], field: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_packet(packet)
    assert caught.value.code is ErrorCode.INVALID_PACKET
    assert caught.value.issues[0].field == field


def test_a_packet_nested_past_the_limit_is_refused_not_crashed() -> None:
    value: Any = "leaf"
    for _ in range(1_400):
        value = [value]
    with pytest.raises(ProtocolError, match="deeper than 100 levels"):
        parse_packet({"goal": "g", "input_data": {"rows": value}})
