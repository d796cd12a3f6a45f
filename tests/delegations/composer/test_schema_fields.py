"""A skill's input schema as form fields: each JSON Schema type, and the way back."""

from __future__ import annotations

from typing import Any

from django import forms

from delegations.composer.schema_fields import (
    initial_from_input_data,
    input_data_from_cleaned,
    schema_fields,
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 2, "maxLength": 80, "pattern": "^[A-Z]",
                  "description": "What to look up."},
        "notes": {"type": "string", "maxLength": 2000},
        "count": {"type": "integer", "minimum": 1, "exclusiveMaximum": 10},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "strict": {"type": "boolean"},
        "verbose": {"type": "boolean"},
        "mode": {"enum": ["fast", "thorough"]},
        "level": {"enum": [1, 2, 3]},
        "sources": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "years": {"type": "array", "items": {"type": "integer", "minimum": 1900}},
        "address": {"type": "object", "required": ["city"], "properties": {
            "city": {"type": "string"},
            "geo": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}}},
        }},
        "extra": {"type": "object"},
    },
    "required": ["query", "strict", "sources"],
}
FIELDS = schema_fields(SCHEMA)


def bound(**data: Any) -> forms.Form:
    form_class = type("InputForm", (forms.Form,), dict(FIELDS.fields))
    values = {"input__query": "TSLA", "input__strict": "on", "input__sources": "yahoo", **data}
    return form_class({key: value for key, value in values.items() if value is not None})


def errors(**data: Any) -> dict[str, list[str]]:
    form = bound(**data)
    form.is_valid()
    return {name: list(messages) for name, messages in form.errors.items()}


def cleaned(**data: Any) -> dict[str, Any]:
    form = bound(**data)
    assert form.is_valid(), form.errors
    return input_data_from_cleaned(form.cleaned_data, FIELDS)


def test_every_property_gets_a_field_named_by_its_path():
    assert list(FIELDS.fields) == [
        "input__query", "input__notes", "input__count", "input__ratio", "input__strict",
        "input__verbose", "input__mode", "input__level", "input__sources", "input__years",
        "input__address__city", "input__address__geo__lat", "input__address__geo__lon", "input__extra"]


def test_a_string_is_a_text_input_with_its_limits_and_a_long_one_a_textarea():
    query = FIELDS.fields["input__query"]
    assert isinstance(query.widget, forms.TextInput) and query.required
    # no maxlength: a browser would cut what is typed past it without a word
    assert "maxlength" not in query.widget.attrs and query.widget.attrs["minlength"] == "2"
    assert query.help_text == "What to look up. At most 80 characters."
    assert errors(input__query="Q" * 81) == {"input__query": [
        "This is 81 characters long; the limit is 80. Shorten it: nothing was cut."]}
    assert isinstance(FIELDS.fields["input__notes"].widget, forms.Textarea)
    assert errors(input__query="t") == {"input__query": [
        "Not in the form this field takes: What to look up. (It must match ^[A-Z].)", "Ensure this value has at least 2 characters (it has 1)."]}
    assert "input__query" in errors(input__query=None)


def test_numbers_keep_their_bounds_exclusive_ones_included():
    assert errors(input__count="0") == {"input__count": ["Must be at least 1."]}
    assert errors(input__count="10") == {"input__count": ["Must be less than 10."]}
    assert errors(input__ratio="0") == {"input__ratio": ["Must be more than 0."]}
    assert errors(input__ratio="1.5") == {"input__ratio": ["Must be at most 1."]}
    assert cleaned(input__count="9", input__ratio="0.25") | {} == {
        "query": "TSLA", "strict": True, "sources": ["yahoo"], "count": 9, "ratio": 0.25}


def test_draft_4_exclusive_bounds_are_read_too():
    fields = schema_fields({"properties": {"n": {"type": "number", "minimum": 0, "exclusiveMinimum": True}}})
    form = type("F", (forms.Form,), dict(fields.fields))({"input__n": "0"})
    assert form.errors == {"input__n": ["Must be more than 0."]}


def test_a_required_boolean_is_a_checkbox_and_an_optional_one_may_be_left_unsaid():
    assert isinstance(FIELDS.fields["input__strict"].widget, forms.CheckboxInput)
    assert cleaned(input__strict=None)["strict"] is False
    assert "verbose" not in cleaned(input__verbose="unknown")
    assert cleaned(input__verbose="false")["verbose"] is False


def test_an_enum_is_a_select_that_gives_back_the_values_as_typed():
    mode = FIELDS.fields["input__mode"]
    assert isinstance(mode.widget, forms.Select)
    assert [value for value, _ in mode.choices] == ["", "fast", "thorough"]
    assert cleaned(input__mode="thorough", input__level="2") | {} == {
        "query": "TSLA", "strict": True, "sources": ["yahoo"], "mode": "thorough", "level": 2}
    assert "input__mode" in errors(input__mode="slow")


def test_an_array_is_one_item_per_line_each_item_checked():
    assert cleaned(input__sources="yahoo\n\n bloomberg \n")["sources"] == ["yahoo", "bloomberg"]
    assert cleaned(input__years="1999\n2024")["years"] == [1999, 2024]
    assert errors(input__years="1999\nlast year\n1800") == {"input__years": [
        "Line 2 ('last year'): Enter a whole number.", "Line 3 ('1800'): Must be at least 1900."]}
    assert errors(input__sources="\n") == {"input__sources": ["This field is required."]}


def test_an_object_is_a_nested_fieldset():
    kinds = [(item.kind, item.name) for item in FIELDS.layout if item.kind != "field"]
    assert kinds == [("open", "input__address"), ("open", "input__address__geo"),
                     ("close", "input__address__geo"), ("close", "input__address")]
    # the city is required only when an address is given
    assert not FIELDS.fields["input__address__city"].required
    required = schema_fields({"type": "object", "required": ["address"], "properties": {
        "address": SCHEMA["properties"]["address"]}})
    assert required.fields["input__address__city"].required
    data = cleaned(input__address__city="Oslo", input__address__geo__lat="59.9")
    assert data["address"] == {"city": "Oslo", "geo": {"lat": 59.9}}


def test_an_object_without_properties_is_a_json_textarea():
    assert cleaned(input__extra='{"a": [1, 2]}')["extra"] == {"a": [1, 2]}
    assert errors(input__extra="[1]") == {"input__extra": ["Expected an object ({...}), not list."]}
    assert errors(input__extra="{") == {"input__extra": [
        "This is not valid JSON: Expecting property name enclosed in double quotes at line 1, column 2."]}


def test_json_nested_too_deeply_is_refused_and_redrawn_as_typed():
    nested = "[" * 5000 + "]" * 5000
    assert errors(input__extra=nested) == {"input__extra": ["This is not valid JSON: it nests arrays or objects too deeply to read."]}
    form_class = type("InputForm", (forms.Form,), dict(FIELDS.fields))
    assert form_class({"input__extra": nested})["input__extra"].value() == nested


def test_empty_optional_values_are_left_out():
    assert cleaned() == {"query": "TSLA", "strict": True, "sources": ["yahoo"]}


def test_input_data_round_trips_through_the_fields():
    input_data = {"query": "TSLA", "notes": "Long\nnotes", "count": 3, "ratio": 0.5, "strict": False,
                  "verbose": True, "mode": "fast", "level": 3, "sources": ["yahoo", "bloomberg"],
                  "years": [2020, 2021], "address": {"city": "Oslo", "geo": {"lat": 59.9, "lon": 10.7}},
                  "extra": {"nested": {"deep": [1]}}}
    initial = initial_from_input_data(input_data, FIELDS)
    form_class = type("InputForm", (forms.Form,), dict(FIELDS.fields))
    rendered = form_class(initial=initial)
    data = {}
    for field in rendered:
        value = field.value()
        if isinstance(field.field.widget, forms.CheckboxInput):
            if value:
                data[field.html_name] = "on"
        elif isinstance(field.field.widget, forms.NullBooleanSelect):
            data[field.html_name] = {True: "true", False: "false"}.get(value, "unknown")
        elif value is not None:
            data[field.html_name] = str(value)
    form = form_class(data)
    assert form.is_valid(), form.errors
    assert input_data_from_cleaned(form.cleaned_data, FIELDS) == input_data
