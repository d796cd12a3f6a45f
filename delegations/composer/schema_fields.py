"""A skill's ``input_schema`` (JSON Schema) as form fields, and back.

:func:`schema_fields` turns each property into a Django form field named by its path
(``input__address__city``): a string is a text input (a textarea when it may be longer
than :data:`LONG_TEXT`), a number or integer a number input with its bounds, a required
boolean a checkbox and an optional one a yes / no / not given select, an ``enum`` a
select, an array of scalars a textarea with one item per line (each item checked against
the item schema), and an object with properties a nested fieldset. Anything else (an
object without properties, an array of objects, no type) is a JSON textarea.

:func:`input_data_from_cleaned` and :func:`initial_from_input_data` convert between the
form's cleaned data and the packet's ``input_data``; one is the inverse of the other.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.forms.fields import InvalidJSONInput

from delegations.protocol import text_limits

PREFIX = "input"
SEPARATOR = "__"
LONG_TEXT = 200   # a string allowed to be longer than this gets a textarea


@dataclass(frozen=True, slots=True)
class LayoutItem:
    """One step of drawing the fields in order: open a fieldset, a field, close it."""

    kind: Literal["open", "field", "close"]
    name: str = ""         # the form field name, or the fieldset's path name
    legend: str = ""
    description: str = ""
    required: bool = False


@dataclass(slots=True)
class SchemaFields:
    fields: dict[str, forms.Field] = field(default_factory=dict)
    paths: dict[str, tuple[str, ...]] = field(default_factory=dict)    # field name -> input_data path
    objects: dict[tuple[str, ...], bool] = field(default_factory=dict)  # object path -> required
    layout: list[LayoutItem] = field(default_factory=list)

    def name_at(self, path: tuple[str, ...]) -> str | None:
        """The field standing for ``path`` in ``input_data`` (the first field for the whole
        of it), None when no field does."""
        if not path:
            return next(iter(self.fields), None)
        return next((name for name, at in self.paths.items() if at == path), None)


def _type_of(schema: dict[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    return kind if isinstance(kind, str) else None


def _label(name: str, schema: dict[str, Any]) -> str:
    title = schema.get("title")
    return title if isinstance(title, str) and title else name.replace("_", " ")


def _bounds(schema: dict[str, Any]) -> list[Callable[[Any], None]]:
    """Validators for minimum / maximum, exclusive ones in either JSON Schema spelling
    (a number since draft 6, a boolean beside minimum / maximum in draft 4)."""
    checks: list[tuple[str, str, bool]] = [("minimum", "exclusiveMinimum", True),
                                           ("maximum", "exclusiveMaximum", False)]
    validators: list[Callable[[Any], None]] = []
    for inclusive_key, exclusive_key, lower in checks:
        limit, exclusive = schema.get(inclusive_key), schema.get(exclusive_key)
        if isinstance(exclusive, int | float) and not isinstance(exclusive, bool):
            limit, strict = exclusive, True
        else:
            strict = exclusive is True
        if isinstance(limit, int | float) and not isinstance(limit, bool):
            validators.append(_bound_validator(limit, lower=lower, strict=strict))
    return validators


def _bound_validator(limit: float, *, lower: bool, strict: bool) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if lower and (value <= limit if strict else value < limit):
            raise ValidationError(f"Must be {'more than' if strict else 'at least'} {limit}.")
        if not lower and (value >= limit if strict else value > limit):
            raise ValidationError(f"Must be {'less than' if strict else 'at most'} {limit}.")
    return check


class JSONValueField(forms.JSONField):
    """A JSON textarea that says where the JSON is broken, shows nothing for no value,
    and keeps what was typed when it is invalid (Django's JSONField does the keeping)."""

    def __init__(self, *, expect: type | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}))
        super().__init__(**kwargs)
        self.expect = expect

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and value.strip():
            try:
                text_limits.loads(value)
            except json.JSONDecodeError as exc:
                raise ValidationError(f"This is not valid JSON: {exc.msg} at line {exc.lineno}, "
                                      f"column {exc.colno}.") from None
            except ValueError as exc:
                raise ValidationError(f"This is not valid JSON: {exc}.") from None
            except text_limits.TextLimitError as exc:
                raise ValidationError(f"This JSON is refused: {exc}.") from None
        result = super().to_python(value)
        if self.expect is not None and result is not None and not isinstance(result, self.expect):
            wanted = "an object ({...})" if self.expect is dict else "a list ([...])"
            raise ValidationError(f"Expected {wanted}, not {type(result).__name__}.")
        return result

    def bound_data(self, data: Any, initial: Any) -> Any:
        try:
            return super().bound_data(data, initial)
        except RecursionError:   # Django's catches only JSONDecodeError; redrawn as typed
            return InvalidJSONInput(data)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, InvalidJSONInput):
            return value   # the text as typed
        return "" if value is None else json.dumps(value, indent=2, ensure_ascii=False)


class TextField(forms.CharField):
    """Text refused beyond ``max_length`` with the limit named, never cut: it sets no
    ``maxlength`` attribute, with which a browser drops what is pasted past the limit
    without a word (a 2,520-character review became 2,000)."""

    def __init__(self, *, max_length: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.limit = max_length
        if max_length is not None:
            self.validators.append(_at_most(max_length))
            self.help_text = " ".join(filter(None, [str(self.help_text), f"At most {max_length:,} characters."]))


def _at_most(limit: int) -> Callable[[str], None]:
    def check(value: str) -> None:
        if len(value) > limit:
            raise ValidationError(f"This is {len(value):,} characters long; the limit is {limit:,}. "
                                  "Shorten it: nothing was cut.")
    return check


class LinesField(forms.CharField):
    """A list, one item per line; blank lines are skipped. ``item`` checks and converts
    each line (its errors name the line)."""

    def __init__(self, *, item: forms.Field | None = None, min_items: int | None = None,
                 max_items: int | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 3}))
        super().__init__(**kwargs)
        self.item, self.min_items, self.max_items = item, min_items, max_items

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list):
            return "\n".join(v if isinstance(v, str) else json.dumps(v) for v in value)
        return value

    def clean(self, value: Any) -> list[Any]:   # type: ignore[override]
        text = super().clean(value) or ""
        lines = [line.strip() for line in str(text).splitlines() if line.strip()]
        items, errors = [], []
        for number, line in enumerate(lines, start=1):
            try:
                items.append(self.item.clean(line) if self.item is not None else line)
            except ValidationError as exc:
                errors.append(f"Line {number} ({line!r}): {' '.join(exc.messages)}")
        if errors:
            raise ValidationError(errors)
        if self.min_items is not None and len(items) < self.min_items:
            raise ValidationError(f"Give at least {self.min_items} item(s), one per line.")
        if self.max_items is not None and len(items) > self.max_items:
            raise ValidationError(f"Give at most {self.max_items} item(s), one per line.")
        return items


class JSONLinesField(LinesField):
    """Lines of text, where a line that starts with ``{`` or ``[`` is read as JSON."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(item=_TextOrJSON(), **kwargs)


class _TextOrJSON(forms.Field):
    def clean(self, value: Any) -> Any:
        text = str(value)
        return JSONValueField().clean(text) if text[:1] in "{[" else text


class NumberField(forms.FloatField):
    """A number that stays an integer when it is one (500, not 500.0)."""

    widget = forms.NumberInput(attrs={"step": "any"})

    def to_python(self, value: Any) -> int | float | None:  # type: ignore[override]
        number = super().to_python(value)
        return int(number) if number is not None and number.is_integer() else number


def _choice_key(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


class EnumField(forms.TypedChoiceField):
    """A select of a schema's ``enum`` values, which need not be strings."""

    def __init__(self, values: list[Any], **kwargs: Any) -> None:
        by_key = {_choice_key(value): value for value in values}
        super().__init__(coerce=by_key.__getitem__, empty_value=None,
                         choices=[("", "—")] + [(key, key) for key in by_key], **kwargs)

    def prepare_value(self, value: Any) -> Any:
        return "" if value is None else _choice_key(value)


def _pattern_message(pattern: str, description: Any) -> str:
    """What a person is told when a text does not match its pattern: the field's own words
    when it has them ("The page to read, e.g. https://…"), the pattern after them."""
    if isinstance(description, str) and description.strip():
        return f"Not in the form this field takes: {description.strip().rstrip('.')}. (It must match {pattern}.)"
    return f"Not in the form this field takes: it must match the pattern {pattern}."


def scalar_field(schema: dict[str, Any], *, required: bool, label: str = "",
                 help_text: str = "") -> forms.Field | None:
    """The form field for one scalar schema, or None when it is not a scalar."""
    common: dict[str, Any] = {"label": label, "help_text": help_text}
    if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"]:
        return EnumField(list(schema["enum"]), required=required, **common)
    kind = _type_of(schema)
    if kind == "string":
        max_length = schema.get("maxLength")
        long = isinstance(max_length, int) and max_length > LONG_TEXT
        pattern = schema.get("pattern")
        validators = ([RegexValidator(pattern, _pattern_message(pattern, schema.get("description")))]
                      if isinstance(pattern, str) else [])
        return TextField(
            required=required, min_length=schema.get("minLength"), max_length=max_length,
            validators=validators, strip=False,
            widget=forms.Textarea(attrs={"rows": 4}) if long else forms.TextInput, **common)
    if kind in ("number", "integer"):
        number_class = forms.IntegerField if kind == "integer" else NumberField
        return number_class(required=required, validators=_bounds(schema), **common)
    if kind == "boolean":
        if required:
            return forms.BooleanField(required=False, **common)
        select = forms.NullBooleanSelect()
        select.choices = [("unknown", "not given"), ("true", "yes"), ("false", "no")]
        return forms.NullBooleanField(widget=select, **common)
    return None


def schema_fields(schema: dict[str, Any] | None, prefix: str = PREFIX) -> SchemaFields:
    """Form fields for every property of ``schema`` (an object schema), in its order.

    A property required inside an optional object is not required by the form: it is only
    required when the object is given, which the skill's own check of the input says."""
    result = SchemaFields()
    _add_object(result, schema or {}, (), prefix, True)
    return result


def _add_object(result: SchemaFields, schema: dict[str, Any], path: tuple[str, ...],
                prefix: str, given: bool) -> None:
    properties = schema.get("properties")
    required = set(schema.get("required") or [])
    for name, child in (properties or {}).items():
        child = child if isinstance(child, dict) else {}
        _add_property(result, name, child, (*path, name), given and name in required, prefix)


def _add_property(result: SchemaFields, name: str, schema: dict[str, Any],
                  path: tuple[str, ...], required: bool, prefix: str) -> None:
    field_name = SEPARATOR.join((prefix, *path))
    label, description = _label(name, schema), str(schema.get("description") or "")
    kind = _type_of(schema)
    if kind == "object" and isinstance(schema.get("properties"), dict) and "enum" not in schema:
        result.objects[path] = required
        result.layout.append(LayoutItem("open", field_name, label, description, required))
        _add_object(result, schema, path, prefix, required)
        result.layout.append(LayoutItem("close", field_name))
        return
    form_field = scalar_field(schema, required=required, label=label, help_text=description)
    if form_field is None and kind == "array":
        items = schema.get("items")
        items = items if isinstance(items, dict) else {}
        item_field = scalar_field(items, required=True)
        if item_field is not None or not items:
            form_field = LinesField(
                item=item_field, required=required, label=label,
                help_text=" ".join(filter(None, [description, "One item per line."])),
                min_items=schema.get("minItems"), max_items=schema.get("maxItems"))
    if form_field is None:
        expect = {"object": dict, "array": list}.get(kind or "")
        form_field = JSONValueField(required=required, label=label, expect=expect,
                                    help_text=" ".join(filter(None, [description, "As JSON."])))
    result.fields[field_name] = form_field
    result.paths[field_name] = path
    result.layout.append(LayoutItem("field", field_name, label, description, required))


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == []


def input_data_from_cleaned(cleaned: dict[str, Any], fields: SchemaFields) -> dict[str, Any]:
    """``input_data`` from the form's cleaned data: empty optional values are left out,
    and an optional object with nothing in it too."""
    data: dict[str, Any] = {}
    for name, path in fields.paths.items():
        value = cleaned.get(name)
        if not _empty(value):
            _parent(data, path)[path[-1]] = value
    for path, required in sorted(fields.objects.items(), key=lambda item: len(item[0])):
        if required:
            _parent(data, path).setdefault(path[-1], {})
    return data


def _parent(data: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    target = data
    for key in path[:-1]:
        target = target.setdefault(key, {})
    return target


def initial_from_input_data(input_data: dict[str, Any], fields: SchemaFields) -> dict[str, Any]:
    """Initial values for the fields from an ``input_data`` dict. Keys the schema does not
    know are not shown here, nor values a field cannot give back as they are (a number
    where the schema says text would come back as "42"): the composer keeps both as
    typed, and the skill's input check says what is wrong with them."""
    initial: dict[str, Any] = {}
    for name, path in fields.paths.items():
        value: Any = input_data
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None and gives_back(fields.fields[name], value):
            initial[name] = value
    return initial


def gives_back(form_field: forms.Field, value: Any) -> bool:
    """Whether ``form_field`` shows ``value`` and cleans it back to the same value and type."""
    try:
        cleaned = form_field.clean(form_field.prepare_value(value))
    except ValidationError:
        return True   # shown, and refused with its reason: nothing changes silently
    return bool(cleaned == value and type(cleaned) is type(value))
