"""The composer's structured success criteria: one form row per criterion, a kind and
the parameters that kind takes (``KIND_PARAMS``), read back into the protocol's
structured form."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.forms import BaseFormSet, formset_factory

from delegations.protocol.criteria import TYPE_ALIASES, CriterionKind

from .schema_fields import JSONValueField, LinesField, NumberField

_JSON_TYPES = tuple(dict.fromkeys(TYPE_ALIASES.values()))


def choices(values: tuple[str, ...]) -> list[tuple[str, str]]:
    """A select's options: a blank first, then each value in words."""
    return [("", "—")] + [(value, value.replace("_", " ")) for value in values]


# What each structured kind takes (the form's "path" is the criterion's "field" for
# kinds that read a text field).
KIND_PARAMS: dict[str, tuple[str, ...]] = {
    "json_schema": ("schema",), "field": ("path", "type"), "regex": ("field", "pattern", "ignore_case"),
    "word_count": ("field", "min", "max"), "equals": ("path", "value"),
    "range": ("path", "min", "max", "min_exclusive", "max_exclusive"), "evidence": ("min",),
    "files_modified": ("paths",), "tests_pass": (),
    # where the answer came from: checked against the input the run is given
    "appears_in": ("path", "source", "when_path", "when_value"),
    "quoted_from": ("path", "source", "when_path", "when_value"),
    "one_of_input": ("path", "source", "when_path", "when_value"),
    "words_absent": ("words_of", "source", "when_path", "when_value"),
    # the model chose a label (an enum or boolean field) with at least this probability
    "confident": ("path", "min"),
}
_WHEN = ("when_path", "when_value")
_FLAGS = ("ignore_case", "min_exclusive", "max_exclusive")


class CriterionForm(forms.Form):
    kind = forms.ChoiceField(required=False, choices=choices(tuple(k.value for k in CriterionKind)),
                             help_text="Empty this to remove the row.")
    path = forms.CharField(required=False, label="Field path", help_text="e.g. summary or items.0.price")
    type = forms.ChoiceField(required=False, label="Type", choices=choices(_JSON_TYPES))
    pattern = forms.CharField(required=False, label="Pattern", help_text="A regular expression.")
    ignore_case = forms.BooleanField(required=False, label="Ignore case")
    min = NumberField(required=False, label="Min")
    max = NumberField(required=False, label="Max")
    min_exclusive = forms.BooleanField(required=False, label="Min exclusive")
    max_exclusive = forms.BooleanField(required=False, label="Max exclusive")
    value = JSONValueField(required=False, label="Value (JSON)", widget=forms.TextInput,
                           help_text='e.g. "ok" (with the quotes), 42 or true.')
    paths = LinesField(required=False, label="Files", help_text="One path per line.")
    schema = JSONValueField(required=False, label="Schema (JSON)", expect=dict,
                            help_text="Empty: the expected output schema.")
    source = forms.CharField(required=False, label="Input field",
                             help_text="The input it is checked against, e.g. quote_text.")
    words_of = forms.CharField(required=False, label="Question (input field)",
                               help_text="The input whose key words must not all be in the input field.")
    when_path = forms.CharField(required=False, label="Only when field",
                                help_text="Check only results whose field has the value below, e.g. found.")
    when_value = JSONValueField(required=False, label="…has the value (JSON)", widget=forms.TextInput,
                                help_text="e.g. true")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if not cleaned.get("kind") and any(
                value not in (None, "", [], False) for name, value in cleaned.items() if name != "kind"):
            raise ValidationError("Pick a kind for this criterion, or clear the row.")
        return cleaned

    def criterion(self) -> dict[str, Any] | None:
        """The structured criterion this row holds, or None for an empty row."""
        return criterion_from_row(self.cleaned_data)

    @staticmethod
    def represents(criterion: Any) -> bool:
        """Whether a row can hold ``criterion`` exactly."""
        return isinstance(criterion, dict) and criterion_from_row(row_from_criterion(criterion)) == criterion


def criterion_from_row(row: dict[str, Any]) -> dict[str, Any] | None:
    kind = row.get("kind")
    if not kind:
        return None
    criterion: dict[str, Any] = {"kind": kind}
    for param in KIND_PARAMS.get(kind, ()):
        value = row.get("path") if param == "field" else row.get(param)
        if param in _WHEN or value in (None, "", []) or (param in _FLAGS and not value):
            continue
        criterion[param] = value
    if "when_path" in KIND_PARAMS.get(kind, ()) and row.get("when_path"):
        criterion["when"] = {"path": row["when_path"], "value": row.get("when_value")}
    return criterion


def row_from_criterion(criterion: dict[str, Any]) -> dict[str, Any]:
    row = {key: value for key, value in criterion.items() if key in CriterionForm.base_fields}
    if "field" in criterion:
        row["path"] = criterion["field"]
    when = criterion.get("when")
    if isinstance(when, dict):
        row.update(when_path=when.get("path"), when_value=when.get("value"))
    return row


class BaseCriterionFormSet(BaseFormSet[CriterionForm]):
    def criteria(self) -> list[dict[str, Any]]:
        return [criterion for form in self.forms if (criterion := form.criterion()) is not None]


CriterionFormSet = formset_factory(CriterionForm, formset=BaseCriterionFormSet, extra=1)
CRITERIA_PREFIX = "criterion"
