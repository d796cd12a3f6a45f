"""Lint: is this delegation well formed? (the agloop checks, delegation-contract checks and
the hand-off protocol's anti-patterns)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delegations.protocol.lint import (
    CHECKS,
    SECURITY_KEYWORDS,
    STANDARD_CHECKLIST,
    Finding,
    Severity,
    errors,
    has_errors,
    lint_packet,
    rejection_message,
    review_depth,
    review_depth_reason,
)
from delegations.protocol.packet import HandoffPacket, parse_packet
from tests.protocol import protocol_examples as examples

# A complete delegation contract: nothing to report.
SANE: dict[str, Any] = {
    "goal": "Summarize the three most cited RAG papers",
    "input_data": {"papers": ["Lewis 2020", "Guu 2020", "Borgeaud 2022"]},
    "allowed_inputs": ["papers"],
    "expected_output": {"summary": "string"},
    "success_criteria": ["Word count > 100"],
    "timeout_s": 120,
    "budget": {"max_tokens": 20000},
}
# The smallest packet a person would reasonably write.
MINIMAL: dict[str, Any] = {"goal": "Summarize the RAG papers", "success_criteria": ["Word count > 100"],
                           "timeout_s": 60}
PARENT: dict[str, Any] = {
    **SANE, "depth": 0, "capabilities": ["fs_read", "search"],
    "budget": {"max_tokens": 50000, "max_cost_usd": 1.0},
    "feature_name": examples.FEATURE_NAME,
}


def codes(findings: list[Finding]) -> list[str]:
    return [finding.code for finding in findings]


def lint(data: dict[str, Any], parent: dict[str, Any] | None = None, **kwargs: Any) -> list[Finding]:
    return lint_packet(parse_packet(data), parse_packet(parent) if parent else None, **kwargs)


def executor(**changes: Any) -> dict[str, Any]:
    """The agloop executor delegation (flat), with the full checklist, edited."""
    data = examples.agloop_executor_flat()
    data["anti_laziness_checklist"] = list(examples.AGLOOP_FULL_CHECKLIST)
    data.update(changes)
    return data


def verifier(description: str = "...", **changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(examples.AGLOOP_VERIFIER)
    data["verifier_params"]["task_definition"]["description"] = description
    data.update(changes)
    return data


# -- every code: one case that reports it ------------------------------------------------------

# (code, packet, parent, lint keyword arguments, the field the finding names)
POSITIVE: list[tuple[str, dict[str, Any], dict[str, Any] | None, dict[str, Any], str]] = [
    ("DEPTH_LIMIT_EXCEEDED", {**SANE, "depth": 4, "max_depth": 3}, None, {}, "depth"),
    ("DEPTH_NOT_INCREMENTED", {**SANE, "depth": 0}, PARENT, {}, "depth"),
    ("NESTING_NOT_ALLOWED", {**SANE, "depth": 2}, {**PARENT, "depth": 1}, {}, "depth"),
    ("BUDGET_EXCEEDS_PARENT", {**SANE, "depth": 1, "budget": {"max_tokens": 90000}}, PARENT, {},
     "budget.max_tokens"),
    ("TIMEOUT_EXCEEDS_PARENT", {**SANE, "depth": 1, "timeout_s": 600}, PARENT, {}, "timeout_s"),
    ("CAPABILITY_EXCEEDS_PARENT", {**SANE, "depth": 1, "capabilities": ["fs_read", "fs_write"]},
     PARENT, {}, "capabilities[1]"),
    ("CRITERIA_MISSING", {**SANE, "subagent_type": "executor", "success_criteria": []}, None, {},
     "executor_params.acceptance_criteria"),
    ("FEATURE_NAME_NOT_VERBATIM", executor(feature_name="Add search"),
     {**PARENT}, {}, "feature_name"),
    ("ROLE_PARAMS_MISMATCH",
     {**executor(), "verifier_params": examples.AGLOOP_VERIFIER["verifier_params"],
      "review_depth": None, "subagent_type": "executor"}, None, {}, "verifier_params"),
    ("MULTIPLE_TASKS", executor(executor_params={
        **examples.AGLOOP_EXECUTOR["executor_params"],
        "task_definition": [examples.AGLOOP_TASK_DEFINITION,
                            {**examples.AGLOOP_TASK_DEFINITION, "id": "task-004"}]}),
     None, {}, "executor_params.task_definition"),
    ("PAYLOAD_BLOAT", {**SANE, "input_data": {"papers": ["x" * 5000]}}, None,
     {"payload_limit_bytes": 1000}, "input_data"),
    ("NO_TIMEOUT", {**SANE, "timeout_s": None}, None, {}, "timeout_s"),
    ("GOAL_MISSING", {key: value for key, value in SANE.items() if key != "goal"}, None, {},
     "goal"),
    ("IMPLICIT_STATE", {**SANE, "input_data": {}}, None, {}, "input_data"),
    ("VAGUE_CRITERIA", {**SANE, "success_criteria": examples.HANDOFF_VAGUE_CRITERIA}, None, {},
     "success_criteria[0]"),
    ("COMPLETION_CRITERIA_MISSING", {**SANE, "success_criteria": []}, None, {}, "success_criteria"),
    ("GROUNDING_INPUT_MISSING", {**SANE, "success_criteria": ["`price` appears in `quote_text`"]}, None, {},
     "input_data.quote_text"),
    ("OUTPUT_SCHEMA_MISSING", {**SANE, "expected_output": None}, None, {},
     "expected_output_schema"),
    ("BUDGET_MISSING", {**SANE, "budget": {}}, None, {}, "budget"),
    ("INPUT_NOT_ALLOWED", {**SANE, "input_data": {"papers": [], "diary": "private"}}, None, {},
     "input_data.diary"),
    ("SECRET_IN_INPUT", {**SANE, "allowed_inputs": ["papers", "api_key"],
                         "input_data": {"papers": [], "api_key": "sk-live-1234567890"}}, None, {},
     "input_data.api_key"),
    ("APPROVAL_REQUIRED_CAPABILITY", {**SANE, "capabilities": ["network_outbound"]}, None, {},
     "capabilities[0]"),
    ("UNKNOWN_CAPABILITY", {**SANE, "capabilities": ["fs_reed"]}, None, {}, "capabilities[0]"),
    ("MAX_DEPTH_ABOVE_LIMIT", {**SANE, "max_depth": 5}, None, {"max_depth": 3}, "max_depth"),
    ("BASE_PARAMS_INCOMPLETE", executor(plan_path=None), None, {}, "plan_path"),
    ("AGENT_PARAMS_MISSING", executor(executor_params=None, success_criteria=["Tests pass"],
                                      subagent_type="executor"), None, {}, "executor_params"),
    ("AGENT_PARAMS_INCOMPLETE", {**examples.AGLOOP_RESEARCHER, "researcher_params": {
        **examples.AGLOOP_RESEARCHER["researcher_params"], "workspace_root": None}}, None, {},
     "researcher_params.workspace_root"),
    ("ANTI_LAZINESS_MISSING", executor(anti_laziness_checklist=None), None, {},
     "anti_laziness_checklist"),
    ("ANTI_LAZINESS_INCOMPLETE", dict(examples.AGLOOP_EXECUTOR), None, {}, "anti_laziness_checklist"),
    ("SPEC_ADHERENCE_MISSING", executor(specification_adherence={
        "required_patterns": ["Use zod"]}), None, {}, "specification_adherence.forbidden_patterns"),
    ("CONTEXT_INSUFFICIENT", executor(executor_params={
        **examples.AGLOOP_EXECUTOR["executor_params"], "context_map": None}), None, {},
     "executor_params.context_map"),
    ("PREVIOUS_FAILURE_MISSING", executor(metadata={"attempt": 2}), None, {}, "previous_failure"),
    ("PREVIOUS_FAILURE_INCOMPLETE", executor(previous_failure={
        **examples.AGLOOP_PREVIOUS_FAILURE, "fix_instructions": ""}), None, {},
     "previous_failure.fix_instructions"),
    ("ATTEMPT_MISMATCH", executor(previous_failure=examples.AGLOOP_PREVIOUS_FAILURE,
                                  metadata={"attempt": 3}), None, {}, "metadata.attempt"),
    ("REVIEW_DEPTH_MISSING", {**verifier(), "verifier_params": {
        **examples.AGLOOP_VERIFIER["verifier_params"], "review_depth": None}}, None, {},
     "verifier_params.review_depth"),
    ("REVIEW_DEPTH_MISMATCH", verifier(examples.AGLOOP_TASK_DEFINITION["description"]), None, {},
     "verifier_params.review_depth"),
    ("TASK_ID_MISMATCH", executor(task_id="task-009"), None, {},
     "executor_params.task_definition.id"),
    ("UNFILLED_PLACEHOLDER", executor(feature_name=examples.PLACEHOLDER_FEATURE_NAME), None, {},
     "feature_name"),
    ("UNKNOWN_FIELD", {**SANE, "sucess_criteria": ["Tests pass"]}, None, {},
     "extra.sucess_criteria"),
    ("ALLOWED_INPUTS_MISSING", {**SANE, "allowed_inputs": None}, None, {}, "allowed_inputs"),
    ("NO_SELF_CORRECTION", {**SANE, "max_iterations": 1}, None, {}, "max_iterations"),
    ("ALLOW_NESTED_UNUSABLE", {**SANE, "depth": 3, "allow_nested": True}, None, {},
     "allow_nested"),
    ("CONFIDENT_NOT_A_LABEL", {**SANE, "success_criteria": [{"kind": "confident", "path": "summary", "min": 0.8}]},
     None, {}, "success_criteria[0]"),
    ("CONFIDENCE_OUT_OF_RANGE", {**SANE, "expected_output": {"type": "object", "properties": {
        "tone": {"enum": ["calm", "angry"]}}}, "success_criteria": ["`tone` has a probability of at least 150%"]},
     None, {}, "success_criteria[0]"),
    ("CRITERION_SOURCE_UNKNOWN", {**SANE, "success_criteria": ["`summary` is quoted from `paper`"]}, None, {},
     "success_criteria[0]"),
]


def test_every_check_has_a_case_that_reports_it() -> None:
    # INVALID_CRITERION needs a packet parse_packet refuses; it has its own test below.
    assert {case[0] for case in POSITIVE} | {"INVALID_CRITERION"} == set(CHECKS)


@pytest.mark.parametrize(("code", "data", "parent", "kwargs", "field"), POSITIVE,
                         ids=[case[0] for case in POSITIVE])
def test_it_reports(code: str, data: dict[str, Any], parent: dict[str, Any] | None,
                    kwargs: dict[str, Any], field: str) -> None:
    findings = [f for f in lint(data, parent, **kwargs) if f.code == code]
    assert findings, f"{code} not reported"
    assert field in [f.field for f in findings]
    assert all(f.severity == CHECKS[code][0] for f in findings)
    assert all(len(f.message) > 30 for f in findings)


# -- and the matching cases that do not -------------------------------------------------------

def test_a_complete_contract_has_no_findings() -> None:
    assert lint(SANE) == []
    assert lint(examples.DELEGATION_CONTRACT) == []


def test_a_minimal_sane_packet_has_warnings_but_no_errors() -> None:
    findings = lint(MINIMAL)
    assert findings and not has_errors(findings)
    assert set(codes(findings)) <= {"IMPLICIT_STATE", "OUTPUT_SCHEMA_MISSING", "BUDGET_MISSING",
                                     "ALLOWED_INPUTS_MISSING"}


@pytest.mark.parametrize("name", ["HANDOFF_DELEGATE_TASK_ARGS",
                                  "AGLOOP_RESEARCHER", "AGLOOP_PLANNER", "AGLOOP_CRITIC",
                                  "AGLOOP_EXECUTOR", "AGLOOP_VERIFIER",
                                  "HANDOFF_PACKAGE", "OPENCLAW_SPAWN_PARAMS"])
def test_the_protocols_own_examples_have_no_errors(name: str) -> None:
    assert errors(lint(getattr(examples, name))) == []


@pytest.mark.parametrize("goal", [None, "", "   "])
def test_an_empty_goal_is_an_error_even_in_the_protocols_own_parent_request(goal: str | None) -> None:
    # the hand-off protocol's parent request says what to look up but not what to achieve;
    # a goal (or an instruction_set it is read from) is the one thing every run needs
    packet = {**examples.HANDOFF_PARENT_REQUEST, "goal": goal}
    assert [finding.code for finding in errors(lint(packet))] == ["GOAL_MISSING"]


def test_a_child_one_level_down_within_its_parents_scope_passes_the_chain_checks() -> None:
    child = {**SANE, "depth": 1, "capabilities": ["fs_read"], "budget": {"max_tokens": 1000},
             "timeout_s": 60}
    assert lint(child, PARENT) == []


def test_depth_may_equal_max_depth() -> None:
    assert "DEPTH_LIMIT_EXCEEDED" not in codes(lint({**SANE, "depth": 3, "max_depth": 3}))


def test_the_lowest_depth_limit_wins() -> None:
    found = [f for f in lint({**SANE, "depth": 3}, None, max_depth=2)
             if f.code == "DEPTH_LIMIT_EXCEEDED"]
    assert found and "server" in found[0].message


def test_a_root_parent_may_spawn_without_allow_nested() -> None:
    assert "NESTING_NOT_ALLOWED" not in codes(lint({**SANE, "depth": 1}, PARENT))


def test_a_subagent_parent_with_allow_nested_may_spawn() -> None:
    parent = {**PARENT, "depth": 1, "allow_nested": True}
    assert "NESTING_NOT_ALLOWED" not in codes(lint({**SANE, "depth": 2}, parent))


def test_a_child_without_its_own_budget_takes_what_the_parent_has_left() -> None:
    assert "BUDGET_EXCEEDS_PARENT" not in codes(lint({**SANE, "depth": 1, "budget": {}}, PARENT))


def test_an_executor_with_success_criteria_has_criteria() -> None:
    data = {**SANE, "subagent_type": "executor"}
    assert "CRITERIA_MISSING" not in codes(lint(data))


def test_a_verifier_without_criteria_is_an_error() -> None:
    data = verifier()
    data["verifier_params"]["acceptance_criteria"] = []
    found = [f for f in lint(data) if f.code == "CRITERIA_MISSING"]
    assert found and found[0].field == "verifier_params.acceptance_criteria"
    assert has_errors(found)


def test_it_reports_a_malformed_structured_criterion_as_an_error() -> None:
    packet = HandoffPacket.model_validate({**MINIMAL, "success_criteria": [{"kind": "telepathy"}]})
    found = [f for f in lint_packet(packet) if f.code == "INVALID_CRITERION"]
    assert found and found[0].field == "success_criteria[0]"
    assert found[0].severity == Severity.ERROR


def test_structured_criteria_that_parse_are_not_vague() -> None:
    data = {**SANE, "success_criteria": [{"kind": "word_count", "min": 10}]}
    assert "VAGUE_CRITERIA" not in codes(lint(data))


def test_the_hand_off_protocols_machine_verifiable_examples_are_not_vague() -> None:
    data = {**SANE, "success_criteria": examples.HANDOFF_VERIFIABLE_CRITERIA}
    assert "VAGUE_CRITERIA" not in codes(lint(data))


def test_a_feature_name_copied_verbatim_passes() -> None:
    assert "FEATURE_NAME_NOT_VERBATIM" not in codes(lint(executor(), PARENT))


def test_a_feature_name_differing_only_in_case_is_still_not_verbatim() -> None:
    found = [f for f in lint(executor(feature_name=examples.FEATURE_NAME.upper()), PARENT)
             if f.code == "FEATURE_NAME_NOT_VERBATIM"]
    assert found and "case or spacing" in found[0].message


def test_the_feature_name_is_compared_with_the_original_request_without_a_parent() -> None:
    data = executor(context={"originalRequest": "find records by keyword"})
    assert "FEATURE_NAME_NOT_VERBATIM" in codes(lint(data))


def test_the_critics_feature_name_must_be_the_verbatim_request_too() -> None:
    data = copy.deepcopy(examples.AGLOOP_CRITIC)
    data["critic_params"]["feature_name"] = "search feature"
    found = [f for f in lint(data) if f.code == "FEATURE_NAME_NOT_VERBATIM"]
    assert [f.field for f in found] == ["critic_params.feature_name"]


def test_two_role_params_without_a_subagent_type_are_a_mismatch() -> None:
    data = {**examples.AGLOOP_RESEARCHER, "planner_params": examples.AGLOOP_PLANNER["planner_params"]}
    found = [f for f in lint(data) if f.code == "ROLE_PARAMS_MISMATCH"]
    assert found and found[0].field == "subagent_type"


def test_a_packet_under_the_payload_limit_is_not_bloated() -> None:
    assert "PAYLOAD_BLOAT" not in codes(lint(SANE, payload_limit_bytes=2000))


def test_a_run_time_budget_counts_as_a_timeout() -> None:
    data = {**SANE, "timeout_s": None, "budget": {"max_runtime_s": 60}}
    assert "NO_TIMEOUT" not in codes(lint(data))


def test_a_handoff_package_context_counts_as_passed_state() -> None:
    data = {**MINIMAL, "context": {"originalRequest": "What are the key papers on RAG?"}}
    assert "IMPLICIT_STATE" not in codes(lint(data))


def test_an_agloop_delegation_needs_no_output_schema() -> None:
    assert "OUTPUT_SCHEMA_MISSING" not in codes(lint(examples.AGLOOP_EXECUTOR))


def test_ordinary_keys_are_not_taken_for_secrets() -> None:
    data = {**SANE, "allowed_inputs": None,
            "input_data": {"token_count": "12345678", "max_tokens": 5000, "author": "someone"}}
    assert "SECRET_IN_INPUT" not in codes(lint(data))


def test_a_nested_credential_is_found() -> None:
    data = {**SANE, "allowed_inputs": None, "input_data": {"db": {"password": "hunter2hunter2"}}}
    assert [f.field for f in lint(data) if f.code == "SECRET_IN_INPUT"] == ["input_data.db.password"]


def test_the_approval_required_set_is_a_setting() -> None:
    data = {**SANE, "capabilities": ["fs_write", "network_outbound"]}
    found = [f for f in lint(data, approval_required={"fs_write"})
             if f.code == "APPROVAL_REQUIRED_CAPABILITY"]
    assert [f.field for f in found] == ["capabilities[0]"]


def test_an_unknown_capability_suggests_the_known_one() -> None:
    found = [f for f in lint({**SANE, "capabilities": ["fs_reed"]}) if f.code == "UNKNOWN_CAPABILITY"]
    assert "fs_read" in found[0].message


def test_base_params_are_not_demanded_of_other_dialects() -> None:
    assert "BASE_PARAMS_INCOMPLETE" not in codes(lint(examples.HANDOFF_PARENT_REQUEST))


def test_agloop_allows_a_null_task_id_and_empty_description_before_execution() -> None:
    assert "BASE_PARAMS_INCOMPLETE" not in codes(lint(examples.AGLOOP_RESEARCHER))


def test_an_executor_needs_a_task_id() -> None:
    found = [f.field for f in lint(executor(task_id=None)) if f.code == "BASE_PARAMS_INCOMPLETE"]
    assert found == ["task_id"]


def test_after_research_the_feature_description_must_be_filled() -> None:
    found = [f.field for f in lint(executor(feature_description=""))
             if f.code == "BASE_PARAMS_INCOMPLETE"]
    assert found == ["feature_description"]


def test_a_later_critique_iteration_needs_the_previous_objections() -> None:
    data = copy.deepcopy(examples.AGLOOP_CRITIC)
    data["critic_params"]["iteration_number"] = 2
    found = [f.field for f in lint(data) if f.code == "AGENT_PARAMS_INCOMPLETE"]
    assert found == ["critic_params.previous_objections"]


def test_the_executor_task_definition_needs_its_files_to_modify() -> None:
    params = copy.deepcopy(examples.AGLOOP_EXECUTOR["executor_params"])
    params["task_definition"]["files_to_modify"] = []
    found = [f.field for f in lint(executor(executor_params=params))
             if f.code == "AGENT_PARAMS_INCOMPLETE"]
    assert found == ["executor_params.task_definition.files_to_modify"]


def test_the_agloop_executor_templates_checklist_lacks_exactly_three_standard_items() -> None:
    found = [f for f in lint(examples.AGLOOP_EXECUTOR) if f.code == "ANTI_LAZINESS_INCOMPLETE"]
    assert len(found) == 1
    missing = [item for item, _ in STANDARD_CHECKLIST if item in found[0].message]
    assert missing == list(examples.AGLOOP_FULL_CHECKLIST[7:])


@pytest.mark.parametrize("checklist", [examples.AGLOOP_FULL_CHECKLIST, examples.AGLOOP_CHECKLIST_MARKDOWN])
def test_the_complete_checklist_in_either_spelling_passes(checklist: Any) -> None:
    found = codes(lint(executor(anti_laziness_checklist=checklist)))
    assert "ANTI_LAZINESS_INCOMPLETE" not in found and "ANTI_LAZINESS_MISSING" not in found


def test_the_agloop_executor_with_the_full_checklist_passes_the_agloop_checks() -> None:
    agloop_codes = {"BASE_PARAMS_INCOMPLETE", "FEATURE_NAME_NOT_VERBATIM", "AGENT_PARAMS_MISSING",
                    "AGENT_PARAMS_INCOMPLETE", "CRITERIA_MISSING", "ANTI_LAZINESS_MISSING",
                    "ANTI_LAZINESS_INCOMPLETE", "SPEC_ADHERENCE_MISSING", "CONTEXT_INSUFFICIENT",
                    "PREVIOUS_FAILURE_MISSING", "PREVIOUS_FAILURE_INCOMPLETE",
                    "REVIEW_DEPTH_MISSING", "MULTIPLE_TASKS"}
    assert agloop_codes.isdisjoint(codes(lint(executor(), PARENT)))


def test_the_verifier_needs_specification_adherence_too() -> None:
    data = verifier()
    del data["specification_adherence"]
    assert "SPEC_ADHERENCE_MISSING" in codes(lint(data))


def test_relevant_files_from_a_handoff_package_count_as_files_to_read() -> None:
    params = copy.deepcopy(examples.AGLOOP_EXECUTOR["executor_params"])
    params["task_definition"]["files_to_read"] = []
    data = executor(executor_params=params, context={"relevantFiles": ["src/api/handlers/users.ts"]})
    assert "CONTEXT_INSUFFICIENT" not in codes(lint(data))


def test_a_retry_summary_without_a_failure_report_is_flagged() -> None:
    data = executor(current_state_summary="Phase: execute, Task: task-003, retrying after FAIL")
    assert "PREVIOUS_FAILURE_MISSING" in codes(lint(data))


def test_a_complete_retry_passes_the_retry_checks() -> None:
    found = codes(lint(examples.agloop_executor_retry()))
    assert not {"PREVIOUS_FAILURE_MISSING", "PREVIOUS_FAILURE_INCOMPLETE",
                "ATTEMPT_MISMATCH"} & set(found)


def test_the_agloop_verifier_review_depth_agrees_with_the_tree() -> None:
    found = codes(lint(examples.AGLOOP_VERIFIER))
    assert "REVIEW_DEPTH_MISSING" not in found and "REVIEW_DEPTH_MISMATCH" not in found


def test_the_review_depth_mismatch_names_the_keyword() -> None:
    found = [f for f in lint(verifier(examples.AGLOOP_TASK_DEFINITION["description"]))
             if f.code == "REVIEW_DEPTH_MISMATCH"]
    assert "'full'" in found[0].message and "query" in found[0].message


def test_the_agloop_templates_elided_description_counts_as_an_unfilled_placeholder() -> None:
    found = [f.field for f in lint(examples.AGLOOP_VERIFIER) if f.code == "UNFILLED_PLACEHOLDER"]
    assert found == ["verifier_params.task_definition.description"]


def test_an_unknown_key_of_a_known_block_is_reported_under_its_path() -> None:
    data = {**SANE, "capabilityScope": {"capabilities": [], "maxSearches": 2}}
    found = [f.field for f in lint(data) if f.code == "UNKNOWN_FIELD"]
    assert found == ["extra.capabilityScope.max_searches"]


def test_an_unknown_key_inside_a_typed_part_is_reported_with_a_suggestion() -> None:
    data = executor(specification_adherence={**examples.AGLOOP_EXECUTOR_SPEC,
                                             "forbiden_patterns": ["raw SQL"]})
    found = [f for f in lint(data) if f.code == "UNKNOWN_FIELD"]
    assert found[0].field == "specification_adherence.forbiden_patterns"
    assert "forbidden_patterns" in found[0].message


# -- review depth (the agloop decision tree) ---------------------------------------------------

def depth_of(title: str = "Update the page", description: str = "Change the footer.",
             files: list[str] | None = None, **task: Any) -> str:
    definition = {"id": "t-1", "title": title, "description": description,
                  "files_to_modify": files or ["src/page.ts"], **task}
    return review_depth(parse_packet({"verifier_params": {"task_definition": definition,
                                                          "acceptance_criteria": ["x"]}}))


@pytest.mark.parametrize("keyword", SECURITY_KEYWORDS)
def test_each_security_keyword_makes_the_review_full(keyword: str) -> None:
    assert depth_of(title=f"Change the {keyword} handling") == "full"


@pytest.mark.parametrize("text", ["Rotate tokens", "Add authorization checks", "Fix SQL queries",
                                  "Handle the auth_token cookie", "Update src/auth.ts"])
def test_plurals_inflections_and_snake_case_still_match(text: str) -> None:
    assert depth_of(description=text) == "full"


@pytest.mark.parametrize("text", ["Credit the author", "Update the authority list",
                                  "Show the querystring docs", "Fix tokenizer whitespace"])
def test_keywords_match_on_word_boundaries_only(text: str) -> None:
    assert depth_of(description=text) == "standard"


def test_a_large_task_gets_a_full_review() -> None:
    assert depth_of(estimated_effort="large") == "full"


def test_a_critical_path_or_high_priority_task_gets_a_full_review() -> None:
    assert depth_of(critical_path=True) == "full"
    assert depth_of(priority="high") == "full"


def test_docs_and_config_only_get_a_lightweight_review() -> None:
    assert depth_of(files=["README.md", "config/app.yaml", ".env", "web.config",
                           "package.json"]) == "lightweight"


def test_any_source_file_makes_it_standard() -> None:
    assert depth_of(files=["README.md", "src/app.ts"]) == "standard"


def test_the_verifier_falls_back_to_the_executors_files_modified() -> None:
    packet = parse_packet({"verifier_params": {
        "task_definition": {"id": "t", "title": "Document the API"},
        "executor_result": {"files_modified": ["docs/api.md"]}}})
    assert review_depth(packet) == "lightweight"


def test_the_reason_says_why() -> None:
    depth, why = review_depth_reason(parse_packet(examples.AGLOOP_EXECUTOR))
    assert depth == "full" and "query" in why


# -- findings as data --------------------------------------------------------------------------

def test_errors_come_first_then_warnings_then_info() -> None:
    findings = lint({**SANE, "depth": 9, "max_iterations": 1, "timeout_s": None})
    ranks = [("error", "warning", "info").index(f.severity) for f in findings]
    assert ranks == sorted(ranks)
    assert codes(findings) == ["DEPTH_LIMIT_EXCEEDED", "NO_TIMEOUT", "NO_SELF_CORRECTION"]


def test_a_finding_reads_as_a_dict() -> None:
    finding = lint({**SANE, "timeout_s": None})[0]
    assert finding.as_dict() == {
        "code": "NO_TIMEOUT", "severity": "warning", "field": "timeout_s",
        "message": "Add a timeout (timeout_s) so a stuck subagent ends with ERR_TIMEOUT "
                   "instead of waiting forever."}


def test_a_rejection_says_how_many_errors_there_are_and_which_came_first() -> None:
    found = errors(lint({**SANE, "depth": 9}, PARENT))
    first = found[0]
    assert len(found) > 1
    assert rejection_message(found) == (
        f"The delegation was rejected ({len(found)} lint errors); first: {first.code} at "
        f"{first.field}: {first.message}")
    assert rejection_message([finding.as_dict() for finding in found]) == rejection_message(found)


def test_a_rejection_for_one_error_says_error() -> None:
    message = rejection_message(errors(lint({**SANE, "depth": 9})))
    assert message.startswith("The delegation was rejected (1 lint error); first: "
                              "DEPTH_LIMIT_EXCEEDED at depth: depth is 9")


def test_lint_accepts_a_dict_or_json_text() -> None:
    assert lint_packet(examples.DELEGATION_CONTRACT) == []
    assert lint_packet(parse_packet(examples.DELEGATION_CONTRACT).canonical_json()) == []


def test_every_check_is_documented_with_a_severity_and_description() -> None:
    for code, (severity, description) in CHECKS.items():
        assert code.isupper() and isinstance(severity, Severity) and len(description) > 20


# text a packet may hold: valid Unicode, no control characters but tab, newline and return
# (anything else is refused before lint, as tests/security/test_text_limits.py checks)
_text = st.characters(codec="utf-8", exclude_categories=("Cc",), include_characters="\t\n\r")
_lintable = st.fixed_dictionaries({}, optional={
    "subagent_type": st.sampled_from(["executor", "verifier", "researcher", "coder"]),
    "goal": st.text(_text, max_size=40),
    "success_criteria": st.lists(st.sampled_from(
        ["Tests pass", "Do a good job", "Word count > 5", "Make it nice"]), max_size=3),
    "timeout_s": st.floats(1, 1000),
    "depth": st.integers(0, 5),
    "max_depth": st.integers(0, 5),
    "allow_nested": st.booleans(),
    "capabilities": st.lists(st.sampled_from(["fs_read", "network_outbound", "warp_drive"]),
                             max_size=3),
    "input_data": st.dictionaries(st.sampled_from(["q", "api_key", "notes"]),
                                  st.text(_text, max_size=20)),
    "feature_name": st.text(_text, max_size=20),
    "anti_laziness_checklist": st.lists(st.sampled_from(examples.AGLOOP_FULL_CHECKLIST), max_size=10),
    "metadata": st.fixed_dictionaries({}, optional={"attempt": st.integers(1, 4)}),
})


@settings(max_examples=100, deadline=None)
@given(_lintable, st.booleans())
def test_lint_is_deterministic(data: dict[str, Any], with_parent: bool) -> None:
    packet = parse_packet(data)
    parent = parse_packet(PARENT) if with_parent else None
    first = lint_packet(packet, parent)
    assert lint_packet(packet, parent) == first
    assert lint_packet(parse_packet(packet.canonical_json()), parent) == first
    assert all(f.code in CHECKS and f.severity == CHECKS[f.code][0] for f in first)


def test_an_approval_required_capability_a_skill_brings_is_not_advised_away() -> None:
    # page-facts was told "Remove it if the task can do without" of the one capability it needs
    own = [f.message for f in lint({**SANE, "capabilities": ["network_outbound"]})
           if f.code == "APPROVAL_REQUIRED_CAPABILITY"]
    skills = [f.message for f in lint({**SANE, "skill": "page-facts@1.0.0", "capabilities": ["network_outbound"]})
              if f.code == "APPROVAL_REQUIRED_CAPABILITY"]
    assert own[0].endswith("Remove it if the task can do without.")
    assert skills[0].endswith("An approval rule can decide such requests without asking.")
