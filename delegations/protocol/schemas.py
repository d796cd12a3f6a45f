"""JSON Schema handling: the hand-off protocol's shorthand, schema checks, cached instance
validation.

The hand-off protocol's skill manifest writes schemas as a shorthand::

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
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import lru_cache
from typing import Any, NamedTuple

from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema_specifications import REGISTRY as _SPECIFICATIONS
from referencing.exceptions import Unresolvable

from . import json_text, patterns
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
# field name in practice, and the published protocols' examples never do).
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
    """True when ``value`` reads as full JSON Schema rather than the hand-off protocol's
    shorthand.

    JSON Schema when: empty; a ``$`` key; ``properties`` whose values are all schemas;
    an ``anyOf``/``oneOf``/``allOf`` list of schemas; or only JSON Schema keywords, each
    with a value of the kind JSON Schema expects there.
    """
    if not value:
        return True
    # plain loops: this runs for every packet's output schema, and generator expressions
    # cost more here than the checks themselves
    only_keywords = True
    dollar = False
    for key in value:
        if not isinstance(key, str):
            return False
        if key[:1] == "$":
            dollar = True
        if key not in _ALL_KEYWORDS:
            only_keywords = False
    if dollar:
        return True
    properties = value.get("properties")
    if isinstance(properties, dict) and properties and all(_schema_like(v) for v in properties.values()):
        return True
    for key in ("anyOf", "oneOf", "allOf"):
        if key in value and _schema_list(value[key]):
            return True
    if not only_keywords:
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


def _flat_key(schema: dict[Any, Any]) -> tuple[tuple[str, str], ...] | None:
    """The items of a flat shorthand (string names to string types), else None."""
    items = tuple(schema.items())
    for key, value in items:
        if type(key) is not str or type(value) is not str:
            return None
    return items


def _copy_json(value: Any) -> Any:
    """A copy of nested dicts and lists (what normalization builds); other values shared."""
    if type(value) is dict:
        return {key: _copy_json(item) for key, item in value.items()}
    if type(value) is list:
        return [_copy_json(item) for item in value]
    return value


# (field, flat shorthand items) -> (normalized schema, or None when the input is itself
# JSON Schema and passes through; its issues). Packets and manifests repeat the same few
# shorthands, and normalizing one costs far more than this lookup.
_FLAT_NORMALIZED: dict[tuple[str, tuple[tuple[str, str], ...]],
                       tuple[dict[str, Any] | None, tuple[Issue, ...]]] = {}
_FLAT_CACHE_SIZE = 1024


def normalize_schema_issues(schema: object, field: str = "schema") -> tuple[dict[str, Any], list[Issue]]:
    """Normalize without raising: ``(json_schema, issues)``; issues include invalid JSON Schema."""
    flat = _flat_key(schema) if type(schema) is dict and schema else None
    if flat is None or type(field) is not str:
        return _normalize_schema_issues(schema, field)
    cache_key = (field, flat)
    found = _FLAT_NORMALIZED.get(cache_key)
    if found is None:
        normalized, issues = _normalize_schema_issues(schema, field)
        found = (None if normalized is schema else _copy_json(normalized), tuple(issues))
        if len(_FLAT_NORMALIZED) >= _FLAT_CACHE_SIZE:
            _FLAT_NORMALIZED.clear()
        _FLAT_NORMALIZED[cache_key] = found
    cached, cached_issues = found
    # a fresh copy each time: callers own (and may change) what they get back
    return (schema if cached is None else _copy_json(cached)), list(cached_issues)  # type: ignore[return-value]


def _normalize_schema_issues(schema: object, field: str) -> tuple[dict[str, Any], list[Issue]]:
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
    """The hand-off protocol's shorthand or full JSON Schema -> valid JSON Schema draft 2020-12.

    Raises ProtocolError(``code``) listing every problem; manifests pass
    ``code=ErrorCode.INVALID_MANIFEST``.
    """
    normalized, issues = normalize_schema_issues(schema, field)
    if issues:
        raise ProtocolError(code, f"{field} is not a valid schema: {issues[0].message}",
                            issues=issues)
    return normalized


# Patterns run on RE2 (see :mod:`.patterns`): a schema's "pattern" is matched there, and
# one RE2 cannot run (lookaround, backreferences) is not a "regex" the schema may hold.
_FORMATS = FormatChecker()


@_FORMATS.checks("regex", raises=patterns.PatternError)
def _runs_on_re2(instance: object) -> bool:
    if isinstance(instance, str):
        patterns.compiled(instance)
    return True


def _pattern(validator: Any, pattern: str, instance: object, schema: object) -> Iterator[ValidationError]:
    if isinstance(instance, str) and patterns.search(pattern, instance) is None:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_Validator = validators.extend(Draft202012Validator, {"pattern": _pattern})


def canonical_json(value: object) -> str | None:
    """Sorted-key compact JSON used as a cache key; None when not JSON-serializable."""
    try:
        return json_text.canonical(value)
    except (TypeError, ValueError, RecursionError):
        return None


@lru_cache(maxsize=2048)
def _schema_problems(key: str) -> tuple[tuple[tuple[object, ...], str], ...]:
    schema = json.loads(key)
    # formats checked too: a pattern that is no regex ("(") is the schema's problem, said
    # when it is given, not a 500 when an input is first checked against it
    validator = Draft202012Validator(Draft202012Validator.META_SCHEMA, registry=_SPECIFICATIONS,
                                     format_checker=_FORMATS)
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


# -- a fast path for the common simple schemas ----------------------------------------------
#
# jsonschema's iter_errors costs tens of microseconds even for {"answer": "integer"}, and
# nearly every result on the runner's hot path is valid. Schemas built only from the
# keywords below are compiled once into a plain Python predicate that answers "certainly
# valid" without jsonschema; anything it cannot vouch for (an invalid instance, a keyword
# it does not know, a number type it does not recognize) goes to the full validator, which
# alone produces issues. The predicate is therefore only ever allowed to be stricter than
# draft 2020-12, never looser (tests compare it with jsonschema on many instances).

FastCheck = Callable[[object], bool]

# keywords that never constrain an instance (annotations)
_ANNOTATION_KEYWORDS = frozenset({
    "$schema", "$id", "$comment", "title", "description", "default", "examples", "deprecated",
    "readOnly", "writeOnly",
})


def _is_integer(value: object) -> bool:
    kind = type(value)
    return kind is int or (kind is float and value.is_integer())  # type: ignore[attr-defined]


# instance predicates per JSON type, on exact Python types only (subclasses such as bool
# for int, or Decimal for number, go to the full validator)
_TYPE_TESTS: dict[str, FastCheck] = {
    "string": lambda value: type(value) is str,
    "integer": _is_integer,
    "number": lambda value: type(value) is int or type(value) is float,
    "boolean": lambda value: type(value) is bool,
    "null": lambda value: value is None,
    "array": lambda value: type(value) is list,
    "object": lambda value: type(value) is dict,
}


def _always(value: object) -> bool:
    return True


def _type_check(spec: object) -> FastCheck | None:
    names = [spec] if isinstance(spec, str) else spec
    if not isinstance(names, list) or not names:
        return None
    tests = []
    for name in names:
        test = _TYPE_TESTS.get(name) if isinstance(name, str) else None
        if test is None:
            return None
        tests.append(test)
    if len(tests) == 1:
        return tests[0]
    return lambda value: any(test(value) for test in tests)


def _properties_check(spec: object, additional: object) -> FastCheck | None:
    if not isinstance(spec, dict):
        return None
    subchecks: list[tuple[str, FastCheck]] = []
    for name, subschema in spec.items():
        check = _compile_fast(subschema)
        if not isinstance(name, str) or check is None:
            return None
        subchecks.append((name, check))
    extra_check: FastCheck | None = None
    if additional is not None:
        if additional is False:
            known = frozenset(spec)

            def closed(value: object) -> bool:
                return all(key in known for key in value)  # type: ignore[attr-defined]
            extra_check = closed
        else:
            each = _compile_fast(additional)
            if each is None:
                return None
            known = frozenset(spec)

            def open_(value: object) -> bool:
                return all(each(item) for key, item in value.items()  # type: ignore[attr-defined]
                           if key not in known)
            extra_check = open_

    def properties(value: object) -> bool:
        if type(value) is not dict:
            return not isinstance(value, dict)   # not an object: nothing to check here
        for name, check in subchecks:
            if name in value and not check(value[name]):
                return False
        return extra_check is None or extra_check(value)
    return properties


def _required_check(spec: object) -> FastCheck | None:
    if not isinstance(spec, list) or not all(isinstance(name, str) for name in spec):
        return None
    names = tuple(spec)

    def required(value: object) -> bool:
        if type(value) is not dict:
            return not isinstance(value, dict)
        return all(name in value for name in names)
    return required


def _items_check(spec: object) -> FastCheck | None:
    each = _compile_fast(spec)
    if each is None:
        return None

    def items(value: object) -> bool:
        if type(value) is not list:
            return not isinstance(value, list)
        return all(each(item) for item in value)
    return items


def _compile_fast(schema: object) -> FastCheck | None:
    """A predicate that is True only for instances ``schema`` certainly accepts, or None."""
    if schema is True:
        return _always
    if not isinstance(schema, dict):
        return None
    checks: list[FastCheck] = []
    for keyword, value in schema.items():
        if keyword in _ANNOTATION_KEYWORDS or keyword == "additionalProperties":
            continue
        if keyword == "type":
            check = _type_check(value)
        elif keyword == "properties":
            check = _properties_check(value, schema.get("additionalProperties"))
        elif keyword == "required":
            check = _required_check(value)
        elif keyword == "items" and "prefixItems" not in schema:
            check = _items_check(value)
        else:
            return None
        if check is None:
            return None
        checks.append(check)
    if "additionalProperties" in schema and "properties" not in schema:
        return None
    if not checks:
        return _always
    if len(checks) == 1:
        return checks[0]
    return lambda value: all(check(value) for check in checks)


_Problems = tuple[tuple[tuple[object, ...], str], ...]


class _Compiled(NamedTuple):
    validator: Draft202012Validator | None   # None when the schema itself is invalid
    fast: FastCheck | None
    problems: _Problems


@lru_cache(maxsize=1024)
def _validator_for(key: str) -> _Compiled:
    """The compiled validator and fast predicate, or the schema's own problems."""
    problems = _schema_problems(key)
    if problems:
        return _Compiled(None, None, problems)
    schema = json.loads(key)
    # the registry of the drafts' own schemas, and nothing else: without one, jsonschema
    # fetched a "$ref" naming a URL (a skill's input schema made the server GET any address)
    return _Compiled(_Validator(schema, format_checker=_FORMATS, registry=_SPECIFICATIONS),
                     _compile_fast(schema), ())


def compiled_validator(schema: dict[str, Any]) -> Draft202012Validator:
    """The cached validator for ``schema``; raises ProtocolError when the schema is invalid."""
    key = canonical_json(schema)
    validator = _validator_for(key).validator if key is not None else None
    if validator is None:
        issues = schema_issues(schema)
        raise ProtocolError(ErrorCode.INVALID_PACKET, "the schema is not valid JSON Schema", issues=issues)
    return validator


def fast_check(schema: dict[str, Any]) -> FastCheck | None:
    """The compiled fast predicate for ``schema`` (None when only jsonschema can judge it)."""
    key = canonical_json(schema)
    return _validator_for(key).fast if key is not None else None


def validate_instance(schema: dict[str, Any], instance: object, field: str = "") -> list[Issue]:
    """Every place ``instance`` breaks ``schema``, as Issues with dotted paths under ``field``.

    An invalid schema is reported as issues too (at ``field``), never raised.
    """
    key = canonical_json(schema)
    if key is None:
        return [Issue(field, "the schema is not JSON (it holds values JSON cannot represent)")]
    validator, fast, problems = _validator_for(key)
    if validator is None:
        return [Issue(join_path(field, path), f"the expected schema is invalid: {message}")
                for path, message in problems]
    try:
        if fast is not None and fast(instance):
            return []
        errors = sorted(validator.iter_errors(instance), key=_error_sort_key)
    except (SchemaError, RecursionError, TypeError, ValueError, re.error, Unresolvable) as exc:
        return [Issue(field, f"could not validate: {_short(str(exc))}")]
    return [Issue(join_path(field, error.absolute_path), _message(error)) for error in errors]


def _message(error: ValidationError) -> str:
    # jsonschema quotes the whole text it finds too long; the figures are what a person
    # needs to fix it (a 2,520-character review against a 2,000 limit)
    if error.validator == "maxLength" and isinstance(error.instance, str):
        return f"is {len(error.instance):,} characters long; at most {error.validator_value:,} allowed"
    return _short(error.message)


def _error_sort_key(error: ValidationError) -> list[str]:
    return [str(part) for part in error.absolute_path]
