"""JSON Schema handling: seed 000's shorthand, schema checks, cached instance validation.

Seed 000's skill manifest writes schemas as a shorthand::

    {"repo_path": "string", "strict_mode": "boolean"}

:func:`normalize_schema` turns that into JSON Schema draft 2020-12::

    {"type": "object",
     "properties": {"repo_path": {"type": "string"}, "strict_mode": {"type": "boolean"}},
     "required": ["repo_path", "strict_mode"]}

Shorthand grammar (each value of the shorthand object):

- a type name: ``string``, ``number``, ``integer``, ``boolean``, ``array``, ``object``,
  ``null``, ``any`` (no constraint); common aliases are accepted (``str``, ``float``,
  ``int``, ``bool``, ``list``, ``dict``). A trailing ``?`` (``"string?"``) makes the key
  optional (left out of ``required``); a trailing ``[]`` (``"string[]"``) means an array
  of that type.
- a one-element list, ``["string"]`` or ``[{"name": "string"}]``: an array whose items
  follow that element; ``[]`` is an array of anything.
- a nested object: shorthand again (recursively), or a full JSON Schema for that one
  property (``{"type": "string", "enum": ["a", "b"]}``).

How a dict is told apart from the shorthand (:func:`is_json_schema`): it is full JSON
Schema when it is empty, has a key starting with ``$``, has ``properties`` whose values
are all schemas, has an ``anyOf``/``oneOf``/``allOf`` list of schemas, or has nothing but
JSON Schema keywords, each holding the kind of value JSON Schema puts there
(``{"type": "string", "minLength": 1}``). So a shorthand with fields named like keywords
still works (``{"type": "string", "name": "string"}``, ``{"items": ["string"]}``,
``{"required": "boolean"}``), while a shorthand made only of keyword-named fields with
keyword-shaped values (``{"type": "string"}``, ``{"title": "string"}``) reads as the JSON
Schema it literally is. Full JSON Schema passes through unchanged (the same dict is
returned).

Validation sits on the runner's hot path, so compiled validators and schema checks are
cached by the schema's canonical JSON (sorted keys), never re-built per call.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError

from .errors import ErrorCode, Issue, ProtocolError

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"

SHORTHAND_TYPES: dict[str, str | None] = {
    "string": "string", "str": "string", "text": "string",
    "number": "number", "float": "number", "double": "number", "decimal": "number",
    "integer": "integer", "int": "integer",
    "boolean": "boolean", "bool": "boolean",
    "array": "array", "list": "array",
    "object": "object", "dict": "object", "map": "object",
    "null": "null", "none": "null",
    "any": None,
}

# Keywords whose presence alone marks a dict as JSON Schema (no shorthand uses them as a
# field name in practice, and the seeds never do).
_STRUCTURAL_KEYWORDS = frozenset({
    "properties", "items", "prefixItems", "additionalProperties", "patternProperties",
    "anyOf", "oneOf", "allOf", "not", "enum", "const", "required", "if", "then", "else",
    "definitions", "dependentRequired", "dependentSchemas", "unevaluatedProperties",
    "unevaluatedItems", "propertyNames", "contains",
})

# Every draft 2020-12 keyword plus common annotations: a dict with "type" whose other keys
# are all in here is JSON Schema, not a shorthand object with a field called "type".
_ALL_KEYWORDS = _STRUCTURAL_KEYWORDS | frozenset({
    "type", "title", "description", "default", "examples", "format", "deprecated",
    "readOnly", "writeOnly", "minLength", "maxLength", "pattern", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems",
    "uniqueItems", "minContains", "maxContains", "minProperties", "maxProperties",
    "contentEncoding", "contentMediaType", "contentSchema", "nullable",
})

_MAX_MESSAGE = 300
_MAX_DEPTH = 32


def _short(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def join_path(base: str, parts: Iterable[object]) -> str:
    """Dotted field path: ``join_path("output", ["items", 0, "name"]) == "output.items[0].name"``."""
    path = base
    for part in parts:
        if isinstance(part, int):
            path = f"{path}[{part}]"
        else:
            path = f"{path}.{part}" if path else str(part)
    return path


_JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object", "null"})


def _schema_like(value: object) -> bool:
    return isinstance(value, dict | bool)


def _plausible_type(value: object) -> bool:
    if isinstance(value, str):
        return value in _JSON_TYPES
    return isinstance(value, list) and all(isinstance(item, str) and item in _JSON_TYPES for item in value)


def _schema_list(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(_schema_like(item) for item in value)


# What a keyword's value looks like in real JSON Schema; a shorthand field that happens to
# share the keyword's name ("items": ["string"], "required": "boolean") fails these.
_PLAUSIBLE: dict[str, Any] = {
    "type": _plausible_type, "items": _schema_like, "not": _schema_like,
    "additionalProperties": _schema_like,
    "properties": lambda v: isinstance(v, dict) and all(_schema_like(item) for item in v.values()),
    "required": lambda v: isinstance(v, list), "enum": lambda v: isinstance(v, list),
    "anyOf": _schema_list, "oneOf": _schema_list, "allOf": _schema_list,
    "prefixItems": _schema_list,
}


def is_json_schema(value: Mapping[str, Any]) -> bool:
    """True when ``value`` reads as full JSON Schema rather than seed 000 shorthand.

    JSON Schema when: empty; a ``$`` key; ``properties`` whose values are all schemas;
    an ``anyOf``/``oneOf``/``allOf`` list of schemas; or only JSON Schema keywords, each
    with a value of the kind JSON Schema expects there.
    """
    if not value:
        return True
    if not all(isinstance(key, str) for key in value):
        return False
    if any(key.startswith("$") for key in value):
        return True
    properties = value.get("properties")
    if isinstance(properties, dict) and properties and all(_schema_like(v) for v in properties.values()):
        return True
    if any(_schema_list(value.get(key)) for key in ("anyOf", "oneOf", "allOf")):
        return True
    if not all(key in _ALL_KEYWORDS for key in value):
        return False
    return all(check(value[key]) for key, check in _PLAUSIBLE.items() if key in value)


def _type_name_schema(name: str, path: str, issues: list[Issue]) -> tuple[dict[str, Any], bool]:
    """Schema for a shorthand type name and whether the key is required."""
    text = name.strip()
    required = True
    if text.endswith("?"):
        required, text = False, text[:-1].strip()
    is_array = text.endswith("[]")
    if is_array:
        text = text[:-2].strip()
    key = text.lower()
    if key not in SHORTHAND_TYPES:
        issues.append(Issue(path, f"unknown type {name!r}; expected one of string, number, "
                                  "integer, boolean, array, object, null (optionally with '?' "
                                  "for optional or '[]' for a list)"))
        return {}, required
    json_type = SHORTHAND_TYPES[key]
    schema: dict[str, Any] = {"type": json_type} if json_type else {}
    if is_array:
        schema = {"type": "array", "items": schema}
    return schema, required


def _value_schema(value: object, path: str, issues: list[Issue], depth: int) -> tuple[dict[str, Any], bool]:
    if depth > _MAX_DEPTH:
        issues.append(Issue(path, f"schema nests deeper than {_MAX_DEPTH} levels"))
        return {}, True
    if isinstance(value, str):
        return _type_name_schema(value, path, issues)
    if isinstance(value, list):
        if not value:
            return {"type": "array"}, True
        if len(value) > 1:
            issues.append(Issue(path, "a list in a shorthand schema holds one item type, "
                                      f'e.g. ["string"]; got {len(value)} entries'))
            return {"type": "array"}, True
        item_schema, _ = _value_schema(value[0], f"{path}[0]", issues, depth + 1)
        return {"type": "array", "items": item_schema}, True
    if isinstance(value, dict):
        if is_json_schema(value):
            return value, True
        return _shorthand_object(value, path, issues, depth + 1), True
    issues.append(Issue(path, f"expected a type name such as \"string\", a one-item list or an "
                              f"object; got {type(value).__name__} {_short(repr(value))}"))
    return {}, True


def _shorthand_object(shorthand: Mapping[Any, Any], path: str, issues: list[Issue],
                      depth: int) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for key, value in shorthand.items():
        if not isinstance(key, str) or not key:
            issues.append(Issue(path, f"property names must be non-empty strings; got {key!r}"))
            continue
        name = key
        optional_key = name.endswith("?")
        if optional_key:  # {"nickname?": "string"} is accepted as well as "string?"
            name = name[:-1]
        schema, value_required = _value_schema(value, join_path(path, [name]), issues, depth)
        properties[name] = schema
        if value_required and not optional_key:
            required.append(name)
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    return out


def normalize_schema_issues(schema: object, field: str = "schema") -> tuple[dict[str, Any], list[Issue]]:
    """Normalize without raising: ``(json_schema, issues)``; issues include invalid JSON Schema."""
    issues: list[Issue] = []
    if isinstance(schema, bool):
        # true/false are valid JSON Schemas (accept everything / nothing).
        return {} if schema else {"not": {}}, issues
    if not isinstance(schema, dict):
        issues.append(Issue(field, f"expected a JSON object (a JSON Schema or a shorthand such as "
                                   f'{{"name": "string"}}); got {type(schema).__name__}'))
        return {}, issues
    normalized = schema if is_json_schema(schema) else _shorthand_object(schema, field, issues, 0)
    if not issues:
        issues.extend(schema_issues(normalized, field))
    return normalized, issues


def normalize_schema(schema: dict[str, Any], field: str = "schema", *,
                     code: ErrorCode | str = ErrorCode.INVALID_PACKET) -> dict[str, Any]:
    """Seed 000 shorthand or full JSON Schema -> valid JSON Schema draft 2020-12.

    Raises ProtocolError(``code``) listing every problem; manifests pass
    ``code=ErrorCode.INVALID_MANIFEST``.
    """
    normalized, issues = normalize_schema_issues(schema, field)
    if issues:
        raise ProtocolError(code, f"{field} is not a valid schema: {issues[0].message}",
                            issues=issues)
    return normalized


def canonical_json(value: object) -> str | None:
    """Sorted-key compact JSON used as a cache key; None when not JSON-serializable."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None


@lru_cache(maxsize=2048)
def _schema_problems(key: str) -> tuple[tuple[tuple[object, ...], str], ...]:
    schema = json.loads(key)
    validator = Draft202012Validator(Draft202012Validator.META_SCHEMA)
    problems = []
    for error in validator.iter_errors(schema):
        problems.append((tuple(error.absolute_path), _short(error.message)))
    problems.sort(key=lambda item: [str(part) for part in item[0]])
    return tuple(problems)


def schema_issues(schema: object, field: str = "schema") -> list[Issue]:
    """Every reason ``schema`` is not a valid draft 2020-12 JSON Schema (empty when valid)."""
    if isinstance(schema, bool):
        return []
    if not isinstance(schema, dict):
        return [Issue(field, f"a JSON Schema must be an object or a boolean; got {type(schema).__name__}")]
    key = canonical_json(schema)
    if key is None:
        return [Issue(field, "the schema is not JSON (it holds values JSON cannot represent)")]
    return [Issue(join_path(field, path), f"invalid JSON Schema: {message}")
            for path, message in _schema_problems(key)]


@lru_cache(maxsize=1024)
def _validator_for(key: str) -> Draft202012Validator | tuple[tuple[tuple[object, ...], str], ...]:
    """A compiled validator, or the schema's own problems when it is not valid JSON Schema."""
    problems = _schema_problems(key)
    if problems:
        return problems
    return Draft202012Validator(json.loads(key), format_checker=Draft202012Validator.FORMAT_CHECKER)


def compiled_validator(schema: dict[str, Any]) -> Draft202012Validator:
    """The cached validator for ``schema``; raises ProtocolError when the schema is invalid."""
    key = canonical_json(schema)
    found = _validator_for(key) if key is not None else None
    if not isinstance(found, Draft202012Validator):
        issues = schema_issues(schema)
        raise ProtocolError(ErrorCode.INVALID_PACKET, "the schema is not valid JSON Schema", issues=issues)
    return found


def validate_instance(schema: dict[str, Any], instance: object, field: str = "") -> list[Issue]:
    """Every place ``instance`` breaks ``schema``, as Issues with dotted paths under ``field``.

    An invalid schema is reported as issues too (at ``field``), never raised.
    """
    key = canonical_json(schema)
    if key is None:
        return [Issue(field, "the schema is not JSON (it holds values JSON cannot represent)")]
    found = _validator_for(key)
    if not isinstance(found, Draft202012Validator):
        return [Issue(join_path(field, path), f"the expected schema is invalid: {message}")
                for path, message in found]
    try:
        errors = sorted(found.iter_errors(instance), key=_error_sort_key)
    except (SchemaError, RecursionError, TypeError, ValueError) as exc:
        return [Issue(field, f"could not validate: {_short(str(exc))}")]
    return [Issue(join_path(field, error.absolute_path), _short(error.message)) for error in errors]


def _error_sort_key(error: ValidationError) -> list[str]:
    return [str(part) for part in error.absolute_path]
