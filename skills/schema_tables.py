"""JSON Schemas as rows a person can read: one row per property, nested ones indented.

The skill page, the admin and the API docs all show a skill's input and output schema;
a table of (property, type, required, description, allowed values) reads far better than
the raw JSON Schema, which stays available as the manifest download.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Deeper nesting than this is shown as "object" without its properties: a table that
# keeps going right is no longer readable, and the raw schema is one click away.
MAX_DEPTH = 6

_CONSTRAINTS = (
    ("minLength", "min length"), ("maxLength", "max length"), ("pattern", "pattern"),
    ("format", "format"), ("minimum", "≥"), ("maximum", "≤"), ("exclusiveMinimum", ">"),
    ("exclusiveMaximum", "<"), ("multipleOf", "multiple of"), ("minItems", "min items"),
    ("maxItems", "max items"), ("uniqueItems", "unique items"), ("default", "default"),
    ("const", "exactly"),
)


@dataclass(frozen=True, slots=True)
class SchemaRow:
    name: str             # "files" or "files[]" for the items of an array
    path: str             # dotted path from the root, for anchors and tests
    depth: int            # 0 for top-level properties
    type: str             # "string", "string | null", "array of object", "one of: ..."
    required: bool
    description: str = ""
    enum: tuple[str, ...] = ()
    constraints: tuple[str, ...] = field(default=())


def _json_text(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return repr(value)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def type_label(schema: object) -> str:
    """A short human name for what ``schema`` accepts."""
    if schema is True or schema == {}:
        return "any"
    if schema is False:
        return "nothing"
    if not isinstance(schema, dict):
        return "?"
    declared = schema.get("type")
    if isinstance(declared, list):
        return " | ".join(str(name) for name in declared) or "any"
    if declared == "array":
        items = schema.get("items")
        return f"array of {type_label(items)}" if isinstance(items, dict) and items else "array"
    if isinstance(declared, str):
        return declared
    for keyword in ("anyOf", "oneOf"):
        options = schema.get(keyword)
        if isinstance(options, list) and options:
            return "one of: " + " | ".join(type_label(option) for option in options)
    values = schema.get("enum")
    if isinstance(values, list) and values:
        return " | ".join(dict.fromkeys(_json_type(value) for value in values))
    if "const" in schema:
        return "constant"
    if "properties" in schema:
        return "object"
    if "$ref" in schema:
        return f"see {schema['$ref']}"
    return "any"


def _constraints(schema: dict[str, Any]) -> tuple[str, ...]:
    found = []
    for keyword, label in _CONSTRAINTS:
        if keyword in schema:
            value = schema[keyword]
            found.append(label if value is True and keyword == "uniqueItems"
                         else f"{label} {_json_text(value)}")
    return tuple(found)


def _enum(schema: dict[str, Any]) -> tuple[str, ...]:
    values = schema.get("enum")
    if not isinstance(values, list):
        return ()
    return tuple(_json_text(value) for value in values)


def _object_properties(schema: dict[str, Any]) -> tuple[dict[str, Any], set[str]] | None:
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return None
    required = schema.get("required")
    return properties, {name for name in required if isinstance(name, str)} if isinstance(
        required, list) else set()


def _rows_for_object(schema: dict[str, Any], prefix: str, depth: int, out: list[SchemaRow]) -> None:
    found = _object_properties(schema)
    if found is None or depth > MAX_DEPTH:
        return
    properties, required = found
    for name, child in properties.items():
        path = f"{prefix}.{name}" if prefix else str(name)
        _add_row(str(name), path, child, name in required, depth, out)


def _add_row(name: str, path: str, schema: object, required: bool, depth: int,
             out: list[SchemaRow]) -> None:
    child = schema if isinstance(schema, dict) else {}
    description = child.get("description") or child.get("title") or ""
    out.append(SchemaRow(name=name, path=path, depth=depth, type=type_label(schema),
                         required=required, description=str(description),
                         enum=_enum(child), constraints=_constraints(child)))
    _rows_for_object(child, path, depth + 1, out)
    items = child.get("items")
    if isinstance(items, dict) and _object_properties(items) is not None:
        _rows_for_object(items, f"{path}[]", depth + 1, out)


def schema_rows(schema: object) -> list[SchemaRow]:
    """Rows for every property of ``schema``, depth first, in declaration order.

    A schema that is not an object with properties (``{"type": "string"}``) gives one row
    named "(value)" so that the table still says what is expected.
    """
    if not isinstance(schema, dict):
        return []
    if _object_properties(schema) is None:
        if schema in ({}, {"type": "object"}):
            return []
        return [SchemaRow(name="(value)", path="", depth=0, type=type_label(schema),
                          required=True, description=str(schema.get("description") or ""),
                          enum=_enum(schema), constraints=_constraints(schema))]
    rows: list[SchemaRow] = []
    _rows_for_object(schema, "", 0, rows)
    return rows
