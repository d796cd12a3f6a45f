"""The hand-off protocol's tools: its definitions verbatim, and valid function tools for models."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from delegations.protocol.packet import SUBAGENT_TYPES, parse_packet
from delegations.protocol.tool_schemas import (
    ALL_TOOLS,
    DELEGATE_TASK_TOOL,
    MODEL_TOOLS,
    PROTOCOL_TOOLS,
    REQUEST_CAPABILITY_TOOL,
    TOOLS_BY_NAME,
    YIELD_CONTROL_TOOL,
    as_json_schema_tool,
    model_tool,
    yield_control_for,
)
from tests.protocol import protocol_examples as examples


def validator(tool: dict[str, Any]) -> Draft202012Validator:
    Draft202012Validator.check_schema(tool["parameters"])
    return Draft202012Validator(tool["parameters"])


def test_delegate_task_is_exactly_as_the_hand_off_protocol_prints_it() -> None:
    assert json.loads(examples.HANDOFF_DELEGATE_TASK_TEXT) == DELEGATE_TASK_TOOL


def test_yield_control_is_exactly_as_the_hand_off_protocol_prints_it_quirks_included() -> None:
    assert json.loads(examples.HANDOFF_YIELD_CONTROL_TEXT) == YIELD_CONTROL_TOOL
    assert YIELD_CONTROL_TOOL["required"] == ["status", "output_payload"]
    assert "properties" not in YIELD_CONTROL_TOOL["parameters"]


def test_request_capability_takes_a_capability_and_a_reason() -> None:
    params = REQUEST_CAPABILITY_TOOL["parameters"]
    assert params["required"] == ["capability", "reason"]
    assert validator(REQUEST_CAPABILITY_TOOL).is_valid(
        {"capability": "network_outbound", "reason": "fetch the price from the exchange API"})
    assert not validator(REQUEST_CAPABILITY_TOOL).is_valid({"capability": "fs_write"})


def test_the_tool_lists_hold_every_tool_once() -> None:
    assert [tool["name"] for tool in ALL_TOOLS] == ["delegate_task", "yield_control",
                                                    "request_capability"]
    assert PROTOCOL_TOOLS == (DELEGATE_TASK_TOOL, YIELD_CONTROL_TOOL)
    assert TOOLS_BY_NAME["yield_control"] is YIELD_CONTROL_TOOL
    assert all(set(tool) >= {"name", "description", "parameters"} for tool in ALL_TOOLS)


@pytest.mark.parametrize("tool", ALL_TOOLS, ids=lambda tool: tool["name"])
def test_each_tool_converts_to_a_valid_json_schema_function_tool(tool: dict[str, Any]) -> None:
    converted = as_json_schema_tool(tool)
    assert set(converted) == {"name", "description", "parameters"}
    assert converted["parameters"]["type"] == "object"
    assert isinstance(converted["parameters"]["properties"], dict)
    validator(converted)


def test_yield_controls_tool_level_required_moves_into_the_parameters() -> None:
    converted = as_json_schema_tool(YIELD_CONTROL_TOOL)
    assert converted["parameters"]["required"] == ["status", "output_payload"]
    assert set(converted["parameters"]["properties"]) == {
        "status", "output_payload", "log_summary", "error_report"}


def test_nullable_becomes_a_null_type() -> None:
    error_report = as_json_schema_tool(YIELD_CONTROL_TOOL)["parameters"]["properties"]["error_report"]
    assert error_report == {"type": ["object", "null"]}


def test_converting_leaves_the_protocol_form_untouched() -> None:
    before = json.dumps(YIELD_CONTROL_TOOL, sort_keys=True)
    converted = as_json_schema_tool(YIELD_CONTROL_TOOL)
    converted["parameters"]["properties"]["status"]["enum"].append("X")
    assert json.dumps(YIELD_CONTROL_TOOL, sort_keys=True) == before


@pytest.mark.parametrize("response", [examples.HANDOFF_SUCCESS_RESPONSE,
                                      examples.HANDOFF_PARTIAL_RESPONSE,
                                      {"status": "FAILURE", "output_payload": {},
                                       "error_report": None}])
def test_the_hand_off_protocols_responses_are_valid_yield_control_arguments(
        response: dict[str, Any]) -> None:
    assert validator(as_json_schema_tool(YIELD_CONTROL_TOOL)).is_valid(response)


def test_a_yield_without_output_payload_is_invalid() -> None:
    assert not validator(as_json_schema_tool(YIELD_CONTROL_TOOL)).is_valid({"status": "SUCCESS"})


def test_the_model_facing_yield_control_can_ask_for_clarification() -> None:
    tool = MODEL_TOOLS["yield_control"]
    assert "BLOCKED_AWAITING_CLARIFICATION" in tool["parameters"]["properties"]["status"]["enum"]
    assert validator(tool).is_valid({"status": "BLOCKED_AWAITING_CLARIFICATION",
                                     "output_payload": {"question": "Which currency?"}})


def test_the_hand_off_protocols_delegate_task_arguments_are_valid_for_both_forms() -> None:
    for tool in (as_json_schema_tool(DELEGATE_TASK_TOOL), MODEL_TOOLS["delegate_task"]):
        assert validator(tool).is_valid(examples.HANDOFF_DELEGATE_TASK_ARGS)
        assert not validator(tool).is_valid({"subagent_type": "coder", "input_data": {}})


def test_the_model_facing_delegate_task_offers_every_subagent_type_and_contract_field() -> None:
    properties = MODEL_TOOLS["delegate_task"]["parameters"]["properties"]
    assert properties["subagent_type"]["enum"] == list(SUBAGENT_TYPES)
    assert {"label", "goal", "success_criteria", "expected_output", "timeout_s", "budget",
            "capabilities", "allow_nested"} <= set(properties)
    assert MODEL_TOOLS["delegate_task"]["parameters"]["required"] == DELEGATE_TASK_TOOL[
        "parameters"]["required"]


def test_model_delegate_task_arguments_parse_into_a_packet() -> None:
    arguments = {**examples.HANDOFF_DELEGATE_TASK_ARGS, "subagent_type": "verifier",
                 "label": "price-check", "expected_output": {"price": "number"},
                 "success_criteria": ["Return a float value"], "timeout_s": 30,
                 "budget": {"max_tokens": 2000}, "capabilities": ["network_outbound"]}
    assert validator(MODEL_TOOLS["delegate_task"]).is_valid(arguments)
    packet = parse_packet(arguments)
    assert packet.label == "price-check" and packet.timeout_s == 30
    assert packet.expected_output_schema is not None
    assert packet.expected_output_schema["required"] == ["price"]


def test_model_tool_returns_a_fresh_copy() -> None:
    copy_one = model_tool("request_capability")
    copy_one["parameters"]["required"].clear()
    assert model_tool("request_capability")["parameters"]["required"] == ["capability", "reason"]
    with pytest.raises(KeyError):
        model_tool("teleport")


PRICE_SCHEMA = {"type": "object", "properties": {"price": {"type": "number"},
                                                 "currency": {"type": "string"}},
                "required": ["price", "currency"]}


def test_the_offered_yield_control_carries_the_expected_output_schema() -> None:
    tool = yield_control_for(PRICE_SCHEMA)
    payload = tool["parameters"]["properties"]["output_payload"]
    assert PRICE_SCHEMA in payload["anyOf"]
    check = validator(tool)
    assert check.is_valid({"status": "SUCCESS", "output_payload": {"price": 1.5, "currency": "USD"}})
    assert not check.is_valid({"status": "SUCCESS", "output_payload": {"price": "cheap"}})
    assert not check.is_valid({"status": "SUCCESS", "output_payload": {"data": "1.5 USD"}})


def test_a_failure_or_a_question_may_still_yield_an_empty_payload() -> None:
    check = validator(yield_control_for(PRICE_SCHEMA))
    for status in ("FAILURE", "BLOCKED_AWAITING_CLARIFICATION"):
        assert check.is_valid({"status": status, "output_payload": {}})


def test_without_an_expected_output_yield_control_keeps_the_protocols_payload_schema() -> None:
    assert yield_control_for(None) is MODEL_TOOLS["yield_control"]
    payload = yield_control_for(None)["parameters"]["properties"]["output_payload"]
    assert payload == YIELD_CONTROL_TOOL["parameters"]["output_payload"] == {"type": "object"}


@pytest.mark.parametrize("schema", [
    {"type": "string"},
    {"$defs": {"p": {"type": "number"}}, "type": "object",
     "properties": {"price": {"$ref": "#/$defs/p"}}},
    {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"},
], ids=["not-an-object", "refers-to-its-root", "declares-its-dialect"])
def test_a_schema_that_cannot_be_embedded_leaves_yield_control_as_it_is(schema: dict[str, Any]) -> None:
    assert yield_control_for(schema) is MODEL_TOOLS["yield_control"]


def test_narrowing_leaves_the_shared_model_tool_untouched() -> None:
    before = json.dumps(MODEL_TOOLS["yield_control"], sort_keys=True)
    yield_control_for(PRICE_SCHEMA)["parameters"]["properties"]["status"]["enum"].append("X")
    assert json.dumps(MODEL_TOOLS["yield_control"], sort_keys=True) == before
