"""The rule builder's form: the structured fields a person fills in, turned into a rule's
``match`` JSON (and back, to edit a rule or prefill one from an inbox item)."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

from django import forms
from django.http import QueryDict
from django.utils.datastructures import MultiValueDict

from delegations.models import Approval, ApprovalRule, RuleEffect
from delegations.protocol.approvals import ApprovalKind
from delegations.protocol.capabilities import KNOWN_CAPABILITIES

from .rules import RULE_KINDS, review_facts, split_skill

_LIST_FIELDS = ("tools", "owners", "groups")


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.replace("\n", ",").split(",") if name.strip()]


_ARGUMENT = re.compile(r"^arguments\[(\d+)\]")


class RuleForm(forms.Form):
    name = forms.CharField(max_length=200, help_text="Shown in the audit: “approved by rule 'price hosts' v3”.")
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}),
                             help_text="Why items like these may be decided without asking.")
    effect = forms.ChoiceField(choices=RuleEffect.choices, widget=forms.RadioSelect)
    comment = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}),
                              help_text="For a reject rule: what the subagent is told.")
    kinds = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple,
                                      choices=[(str(k), str(k).replace("_", " ")) for k in RULE_KINDS])
    capabilities = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple,
                                             choices=[(c, c) for c in sorted(KNOWN_CAPABILITIES)])
    tools = forms.CharField(required=False, help_text="Tool names, comma separated (e.g. http_get).")
    host = forms.CharField(required=False, help_text="For http_get: prices.example.com or *.example.com.")
    folder = forms.CharField(required=False, help_text="For file tools: the path lies under this folder.")
    amount_argument = forms.CharField(required=False, help_text="An argument holding a number, e.g. amount.")
    amount_max = forms.FloatField(required=False, help_text="… at most this much.")
    skill = forms.CharField(required=False, help_text="The asking run's skill name.")
    skill_versions = forms.CharField(required=False, help_text="A version range, e.g. >=1.2,<2.")
    owners = forms.CharField(required=False, help_text="Usernames whose runs it applies to, comma separated.")
    groups = forms.CharField(required=False, help_text="Groups whose members' runs it applies to.")
    max_depth = forms.IntegerField(required=False, min_value=0, help_text="Only runs this deep in their tree or less.")
    root_skill = forms.CharField(required=False, help_text="The skill of the tree's root run.")
    expression = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}),
                                 help_text='Optional, in CEL: e.g. tool == "pay" && arguments.amount < 0.01.')
    expires_at = forms.DateTimeField(required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    enabled = forms.BooleanField(required=False, initial=True)
    matches_everything = forms.BooleanField(
        required=False, label="I confirm: this rule approves an approval-required capability for every skill and host")
    confirm_disagreements = forms.BooleanField(
        required=False, label="I have looked at the items a person rejected that this rule would approve")
    base_version = forms.IntegerField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)

    def clean_skill_versions(self) -> str:
        versions = str(self.cleaned_data.get("skill_versions") or "").strip()
        if versions and not str(self.data.get("skill") or "").strip():
            # without a skill the range matched nothing and was dropped: the rule then
            # applied to every skill
            raise forms.ValidationError("Name the skill these versions are of, or leave the range empty.")
        return versions

    def rebase(self, version: int) -> None:
        """After a save refused because someone saved the rule since: the person has seen
        what changed, so saving this form again saves it on top of ``version``."""
        data = QueryDict(mutable=True)
        if isinstance(self.data, MultiValueDict):   # the kinds ticked are several values of one key
            data.update(self.data)
        data["base_version"] = str(version)
        self.data = data

    def add_refusal(self, where: str, message: str, match: dict[str, Any]) -> None:
        """A problem the checks found at ``where`` (a path in the rule's data, whose match
        is ``match``), on the field the person typed it into ("match.arguments[0].value"
        of a host is the host field)."""
        name = where.removeprefix("match.")
        found = _ARGUMENT.match(name)
        if found is not None:
            arguments = match.get("arguments") or []
            index = int(found.group(1))
            op = arguments[index]["op"] if index < len(arguments) else ""
            name = {"host": "host", "under": "folder", "range": "amount_max"}.get(op, "")
        name = {"skill.name": "skill", "skill.versions": "skill_versions", "depth": "max_depth",
                "depth.max": "max_depth"}.get(name, name)
        self.add_error(name if name in self.fields else None, message)

    def rule_data(self) -> dict[str, Any]:
        """The rule as ``rule_save`` takes it (the form is valid)."""
        data = self.cleaned_data
        match: dict[str, Any] = {}
        for name in ("kinds", "capabilities"):
            if data[name]:
                match[name] = list(data[name])
        for name in _LIST_FIELDS:
            if _names(data[name]):
                match[name] = _names(data[name])
        arguments = []
        if data["host"]:
            arguments.append({"name": "url", "op": "host", "value": data["host"].strip()})
        if data["folder"]:
            arguments.append({"name": "path", "op": "under", "value": data["folder"].strip()})
        if data["amount_argument"] and data["amount_max"] is not None:
            arguments.append({"name": data["amount_argument"].strip(), "op": "range", "max": data["amount_max"]})
        if arguments:
            match["arguments"] = arguments
        if data["skill"]:
            match["skill"] = {"name": data["skill"].strip(),
                              **({"versions": data["skill_versions"].strip()} if data["skill_versions"] else {})}
        if data["max_depth"] is not None:
            match["depth"] = {"max": data["max_depth"]}
        if data["root_skill"]:
            match["root_skill"] = data["root_skill"].strip()
        if data["expression"].strip():
            match["expression"] = data["expression"].strip()
        return {"name": data["name"], "reason": data["reason"], "effect": data["effect"],
                "comment": data["comment"], "match": match, "enabled": data["enabled"],
                "matches_everything": data["matches_everything"], "expires_at": data["expires_at"]}


def initial_from_rule(rule: ApprovalRule) -> dict[str, Any]:
    """The builder's fields for an existing rule."""
    match = rule.match if isinstance(rule.match, dict) else {}
    initial: dict[str, Any] = {"name": rule.name, "reason": rule.reason, "effect": rule.effect,
                               "comment": rule.comment, "enabled": rule.enabled,
                               "matches_everything": rule.matches_everything, "expires_at": rule.expires_at,
                               "base_version": rule.version, "kinds": match.get("kinds", []),
                               "capabilities": match.get("capabilities", [])}
    for name in _LIST_FIELDS:
        initial[name] = ", ".join(match.get(name, []))
    for matcher in match.get("arguments", []):
        if matcher.get("op") == "host":
            initial["host"] = matcher.get("value")
        elif matcher.get("op") == "under":
            initial["folder"] = matcher.get("value")
        elif matcher.get("op") == "range":
            initial["amount_argument"], initial["amount_max"] = matcher.get("name"), matcher.get("max")
    skill = match.get("skill") or {}
    initial["skill"], initial["skill_versions"] = skill.get("name", ""), skill.get("versions", "")
    initial["max_depth"] = (match.get("depth") or {}).get("max")
    initial["root_skill"] = match.get("root_skill", "")
    initial["expression"] = match.get("expression", "")
    return initial


def initial_from_item(approval: Approval) -> dict[str, Any]:
    """A new rule narrowed to what ``approval`` asked: its kind, capability, tool, host or
    folder, and the asking run's skill."""
    payload = approval.payload if isinstance(approval.payload, dict) else {}
    asked = payload.get("arguments")
    arguments: dict[str, Any] = asked if isinstance(asked, dict) else {}
    tool = str(payload.get("tool") or "")
    initial: dict[str, Any] = {"kinds": [approval.kind], "effect": RuleEffect.APPROVE, "enabled": True,
                               "name": f"{tool or approval.kind} like #{approval.pk}"[:200]}
    if payload.get("capability"):
        initial["capabilities"] = [payload["capability"]]
        if payload["capability"] == "financial_tx":
            initial["effect"] = RuleEffect.TWO_APPROVERS   # money: two people, by default
    if tool:
        initial["tools"] = tool
    url = arguments.get("url")
    if isinstance(url, str):
        initial["host"] = (urlsplit(url).hostname or "").lower()
    path = arguments.get("path")
    if isinstance(path, str) and "/" in path.strip("/"):
        initial["folder"] = path.strip("/").rsplit("/", 1)[0]
    elif isinstance(path, str):
        initial["folder"] = "."
    if approval.kind == ApprovalKind.REVIEW:
        facts = review_facts(payload)
        shown = json.dumps(facts["value"], ensure_ascii=False)
        # "confirm positive reviews above 0.9": the value proposed, and a probability to ask for
        initial["expression"] = f"arguments.value == {shown} && arguments.probability >= 0.9"
        initial["name"] = f"confirm {facts['field']} {shown} above 0.9"[:200]
    skill, _ = split_skill(approval.run.skill)
    if skill:
        initial["skill"] = skill
    return initial
