"""The decision form of an inbox item, on the inbox page and the run page."""

from __future__ import annotations

from django import forms


class DecisionForm(forms.Form):
    """A person's decision on an approval item: approve, reject, or answer a clarification.
    Whether a rejection has its reason and an answer its text is approval_decide's rule."""

    decision = forms.ChoiceField(choices=[("approve", "approve"), ("reject", "reject"),
                                          ("answer", "answer")])
    comment = forms.CharField(required=False, max_length=5_000)
    answer = forms.CharField(required=False, max_length=20_000)


# how a decision reads in the confirmation message
DECIDED = {"approve": "approved", "reject": "rejected", "answer": "answered"}
