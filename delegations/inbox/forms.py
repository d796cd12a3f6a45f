"""The inbox's forms: its filters, a decision on one item (on the inbox page and the run
page), edited tool-call arguments, and a batch decision on several items of one run.
Whether a decision suits the item (a rejection's reason, an answer's text, the kind's
allowed decisions, the schema of edited arguments) is the decisions module's rule."""

from __future__ import annotations

from typing import Any

from django import forms

from delegations.protocol import text_limits
from delegations.protocol.approvals import ApprovalKind, Decision

ORDERS = [("oldest", "Oldest first"), ("newest", "Newest first")]
RISKS = [("", "Any risk"), ("high", "High"), ("medium", "Medium"), ("low", "Low")]
KINDS = [("", "Any kind"), *((kind.value, kind.value.replace("_", " ")) for kind in ApprovalKind)]



class InboxFilterForm(forms.Form):
    """The pending list's filters (GET); a bad value is dropped, never an error page."""

    q = forms.CharField(required=False, max_length=200, label="Search",
                        widget=forms.TextInput(attrs={"type": "search", "placeholder": "Title, run, tool…"}))
    kind = forms.ChoiceField(required=False, choices=KINDS)
    risk = forms.ChoiceField(required=False, choices=RISKS)
    run = forms.CharField(required=False, max_length=64, label="Run id",
                          widget=forms.TextInput(attrs={"placeholder": "Run id"}))
    mine = forms.BooleanField(required=False, label="Raised by my runs")
    order = forms.ChoiceField(required=False, choices=ORDERS)

    def __init__(self, data: Any = None) -> None:
        super().__init__(data, label_suffix="")

    def filters(self) -> dict[str, Any]:
        """The valid filters as given; an invalid one reads as not set."""
        self.is_valid()
        return {name: self.cleaned_data.get(name) or "" for name in self.fields}


class EditedArgumentsField(forms.CharField):
    """A JSON object typed in a text area."""

    def to_python(self, value: Any) -> dict[str, Any] | None:  # type: ignore[override]  # a dict, not the text
        text = super().to_python(value)
        if not text:
            return None
        try:
            parsed = text_limits.loads(text, "arguments")
        except ValueError as error:
            raise forms.ValidationError(f"The arguments are not valid JSON: {error}.") from None
        except text_limits.TextLimitError as error:
            raise forms.ValidationError(f"The arguments are refused: {error}.") from None
        if not isinstance(parsed, dict):
            raise forms.ValidationError("The arguments must be a JSON object ({\"name\": value, …}).")
        return parsed


class DecisionForm(forms.Form):
    """A person's decision on one item. ``confirm`` marks the second step of an edit (the
    first shows the diff against the original arguments)."""

    decision = forms.ChoiceField(choices=[(d.value, d.value) for d in Decision])
    comment = forms.CharField(required=False, max_length=5_000)
    answer = forms.CharField(required=False, max_length=text_limits.MAX_MESSAGE_CHARS)
    edited_arguments = EditedArgumentsField(required=False, max_length=100_000)
    always_allow = forms.BooleanField(required=False)
    budget_limit = forms.FloatField(required=False, min_value=0)
    confirm = forms.BooleanField(required=False)
    # a review's correction of a field without choices: its name and the text typed
    review_field = forms.CharField(required=False, max_length=200)
    review_value = forms.CharField(required=False, max_length=20_000)


class EditCheckForm(forms.Form):
    """Edited arguments to check against the tool's schema before approving them."""

    edited_arguments = EditedArgumentsField(max_length=100_000)


class ItemIdsField(forms.Field):
    """The ids of the items ticked (``ids`` posted once per item)."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value: Any) -> list[int]:
        if not value:
            return []
        try:
            return [int(item) for item in value]
        except (TypeError, ValueError):
            raise forms.ValidationError("Item ids are whole numbers.") from None


class BatchDecisionForm(forms.Form):
    """One decision on several items of one run."""

    ids = ItemIdsField(error_messages={"required": "Tick the items to decide together first."})
    decision = forms.ChoiceField(choices=[("approve", "approve"), ("reject", "reject")])
    comment = forms.CharField(required=False, max_length=5_000)
