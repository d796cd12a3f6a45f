"""Schemas: shorthand becomes JSON Schema; schemas and instances are checked.

The shorthand is the hand-off protocol's, as its skill manifests write schemas.
"""

from __future__ import annotations

from typing import Any

import pytest

from delegations.protocol import schemas
from delegations.protocol.errors import ErrorCode, ProtocolError
from delegations.protocol.schemas import (
    is_json_schema,
    join_path,
    normalize_schema,
    normalize_schema_issues,
    schema_issues,
    validate_instance,
)

from .protocol_examples import HANDOFF_MANIFEST, HANDOFF_SUCCESS_RESPONSE


def test_the_hand_off_input_shorthand_becomes_an_object_schema_with_every_key_required() -> None:
    assert normalize_schema(HANDOFF_MANIFEST["input_schema"]) == {
        "type": "object",
        "properties": {"repo_path": {"type": "string"}, "strict_mode": {"type": "boolean"}},
        "required": ["repo_path", "strict_mode"],
    }


def test_the_hand_off_output_shorthand_validates_a_matching_output() -> None:
    schema = normalize_schema(HANDOFF_MANIFEST["output_schema"])
    assert validate_instance(schema, {"vulnerabilities": [], "sloc": 1200}) == []
    issues = validate_instance(schema, {"vulnerabilities": "none"}, "output_payload")
    assert {issue.field for issue in issues} == {"output_payload", "output_payload.vulnerabilities"}


def test_full_json_schema_passes_through_unchanged() -> None:
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
              "properties": {"price": {"type": "number"}}, "required": ["price"]}
    assert normalize_schema(schema) is schema


@pytest.mark.parametrize("schema", [
    {}, {"type": "string"}, {"type": "string", "minLength": 1}, {"anyOf": [{"type": "string"}]},
    {"properties": {"a": {}}}, {"$ref": "#/$defs/x", "$defs": {"x": {}}}, {"enum": [1, 2]},
])
def test_json_schema_is_recognised_by_its_keywords(schema: dict[str, Any]) -> None:
    assert is_json_schema(schema)


def test_a_shorthand_with_a_field_named_type_stays_a_shorthand() -> None:
    schema = normalize_schema({"type": "string", "name": "string"})
    assert schema["properties"] == {"type": {"type": "string"}, "name": {"type": "string"}}


@pytest.mark.parametrize("shorthand", [{"items": ["string"]}, {"required": "boolean"},
                                       {"properties": {"a": "string"}}])
def test_a_shorthand_field_named_like_a_keyword_stays_a_shorthand(shorthand: dict[str, Any]) -> None:
    assert not is_json_schema(shorthand)
    assert list(normalize_schema(shorthand)["properties"]) == list(shorthand)


def test_nested_shorthand_arrays_optional_keys_and_aliases_normalize() -> None:
    schema = normalize_schema({
        "tags": ["string"], "owner": {"name": "string", "age": "int?"}, "score": "float",
        "items": [{"id": "integer"}], "notes?": "string", "ids": "integer[]", "anything": "any",
        "status": {"type": "string", "enum": ["ok", "bad"]},
    })
    props = schema["properties"]
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["owner"] == {"type": "object", "properties": {"name": {"type": "string"},
                                                               "age": {"type": "integer"}},
                              "required": ["name"]}
    assert props["score"] == {"type": "number"}
    assert props["items"]["items"]["required"] == ["id"]
    assert props["ids"] == {"type": "array", "items": {"type": "integer"}}
    assert props["anything"] == {}
    assert props["status"] == {"type": "string", "enum": ["ok", "bad"]}
    assert "notes" in props and "notes" not in schema["required"]


def test_every_shorthand_problem_is_reported_with_its_path() -> None:
    with pytest.raises(ProtocolError) as caught:
        normalize_schema({"a": "strng", "b": 5, "c": ["string", "number"], "d": {"e": "nope"}},
                         "output_schema", code=ErrorCode.INVALID_MANIFEST)
    error = caught.value
    assert error.code is ErrorCode.INVALID_MANIFEST
    assert [issue.field for issue in error.issues] == [
        "output_schema.a", "output_schema.b", "output_schema.c", "output_schema.d.e"]
    assert "unknown type 'strng'" in error.issues[0].message


def test_normalize_refuses_what_is_not_an_object() -> None:
    _, issues = normalize_schema_issues(["string"], "input_schema")
    assert issues[0].field == "input_schema"
    assert "expected a JSON object" in issues[0].message


def test_an_invalid_json_schema_is_reported_with_paths() -> None:
    issues = schema_issues({"type": "strin", "properties": {"a": {"minLength": -1}}}, "output_schema")
    assert [issue.field for issue in issues] == ["output_schema.properties.a.minLength",
                                                 "output_schema.type"]
    assert all(issue.message.startswith("invalid JSON Schema") for issue in issues)


def test_a_valid_schema_has_no_issues_and_booleans_are_schemas() -> None:
    assert schema_issues({"type": "object", "properties": {"x": {"type": "number"}}}) == []
    assert schema_issues(True) == []
    assert schema_issues("string", "s")[0].field == "s"


def test_validate_instance_reports_the_tsla_response_against_its_schema() -> None:
    schema = normalize_schema({"price": "number", "currency": "string"})
    assert validate_instance(schema, HANDOFF_SUCCESS_RESPONSE["output_payload"]) == []
    issues = validate_instance(schema, {"price": "175.22"}, "output_payload")
    assert [(issue.field, issue.message) for issue in issues] == [
        ("output_payload", "'currency' is a required property"),
        ("output_payload.price", "'175.22' is not of type 'number'"),
    ]


def test_validate_instance_reports_an_invalid_schema_instead_of_raising() -> None:
    issues = validate_instance({"type": 12}, {}, "output_payload")
    assert issues and "the expected schema is invalid" in issues[0].message


def test_validators_are_compiled_once_per_schema() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}}
    schemas._validator_for.cache_clear()
    for value in range(50):
        validate_instance(schema, {"n": value})
    assert schemas._validator_for.cache_info().misses == 1
    assert validate_instance(dict(schema), {"n": 1})[0].field == "n"
    assert schemas._validator_for.cache_info().misses == 1


def test_join_path_builds_dotted_paths_with_indexes() -> None:
    assert join_path("output", ["items", 0, "name"]) == "output.items[0].name"
    assert join_path("", ["a"]) == "a"


def test_a_pattern_that_is_no_regex_is_the_schemas_problem_when_it_is_given() -> None:
    # found only when an input was first checked against it: a 500 (re.error) on lint and start
    issues = schema_issues({"type": "object", "properties": {"q": {"type": "string", "pattern": "("}}})
    assert any("is not a 'regex'" in issue.message for issue in issues)


def test_a_ref_to_an_address_is_not_fetched() -> None:
    # jsonschema fetched a "$ref" naming a URL: a skill's input schema made the server GET any address
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        schema = {"type": "object", "properties": {"q": {"$ref": f"http://127.0.0.1:{port}/probe.json"}}}
        issues = validate_instance(schema, {"q": "x"}, "input_data")
        assert [issue.field for issue in issues] == ["input_data"]
        assert issues[0].message.startswith("could not validate")
        with pytest.raises(TimeoutError):
            listener.accept()


def test_a_pattern_that_backtracks_is_matched_in_linear_time() -> None:
    # Python's re took 35 s on 30 a's, holding the GIL: the whole server stood still
    import time

    started = time.monotonic()
    issues = validate_instance({"type": "string", "pattern": "^(a+)+$"}, "a" * 5000 + "!", "q")
    assert time.monotonic() - started < 1.0
    assert [issue.field for issue in issues] == ["q"]
    assert validate_instance({"type": "string", "pattern": "^(a+)+$"}, "aaaa") == []


def test_a_pattern_that_needs_backtracking_is_refused_when_it_is_given() -> None:
    issues = schema_issues({"type": "string", "pattern": "^(?=a)(\\w)\\1$"})
    assert any("is not a 'regex'" in issue.message for issue in issues)
