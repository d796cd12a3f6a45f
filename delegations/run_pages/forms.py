"""Forms of the run pages: the run list's filters, the form that starts a run, and importing
a run exported from another instance."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.conf import settings
from django.template.defaultfilters import filesizeformat

from delegations.protocol import text_limits
from delegations.protocol.adapters import ADAPTERS
from delegations.protocol.adapters.local_models import shipped_models
from delegations.protocol.lifecycle import RunState

PASTE_LIMIT = 512 * 1024   # characters of pasted JSON


class RunFilterForm(forms.Form):
    state = forms.ChoiceField(required=False, choices=[("", "any state")] + [
        (state.value, state.value.replace("_", " ").lower()) for state in RunState])
    skill = forms.CharField(required=False, max_length=200)
    scope = forms.ChoiceField(required=False, initial="root", choices=[
        ("root", "top-level runs"), ("all", "all runs, subagents too")])
    owner = forms.ChoiceField(required=False, initial="mine", choices=[
        ("mine", "my runs"), ("all", "everyone's runs")])

    def filters(self) -> dict[str, str]:
        """The cleaned filters with defaults; an invalid value reads as its default, and
        the others still apply (``?state=BOGUS&skill=x`` dropped the skill too)."""
        self.is_valid()
        cleaned: dict[str, Any] = self.cleaned_data
        return {
            "state": cleaned.get("state") or "",
            "skill": (cleaned.get("skill") or "").strip(),
            "scope": cleaned.get("scope") or "root",
            "owner": cleaned.get("owner") or "mine",
        }

    def query_string(self, **overrides: Any) -> str:
        """The filters as a query string, defaults and empty values left out."""
        values = {**self.filters(), **overrides}
        defaults = {"scope": "root", "owner": "mine"}
        return urlencode({key: value for key, value in values.items()
                          if value not in ("", None) and defaults.get(key) != value})


def _json_object(text: str, what: str) -> dict[str, Any]:
    """``text`` read as a JSON object within the text limits; a ValidationError saying
    what is wrong with ``what`` otherwise."""
    try:
        value = text_limits.loads(text)
    except json.JSONDecodeError as exc:
        raise forms.ValidationError(_json_error(exc)) from None
    except ValueError as exc:
        raise forms.ValidationError(f"This is not valid JSON: {exc}.") from None
    except text_limits.TextLimitError as exc:
        raise forms.ValidationError(f"This JSON is refused: {exc}.") from None
    if not isinstance(value, dict):
        raise forms.ValidationError(f"{what} must be a JSON object ({{...}}), not {type(value).__name__}.")
    return value


def _json_error(exc: json.JSONDecodeError) -> str:
    return f"This is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."


class RunStartForm(forms.Form):
    packet = forms.CharField(
        max_length=PASTE_LIMIT, widget=forms.Textarea(attrs={"rows": 18, "spellcheck": "false"}),
        help_text="A hand-off packet as JSON, in any dialect Handoff reads: delegate_task "
                  "arguments, agloop base params, a HandoffPackage, a delegation contract "
                  "or OpenClaw sessions_spawn parameters (docs/protocol.md).")
    adapter = forms.ChoiceField(
        choices=[(name, f"{name} — {spec.description}") for name, spec in ADAPTERS.items()],
        help_text="Which model runs it. The hosts and API keys are the server's: a hosted "
                  "model runs on one of the operator's endpoints, picked by name.")
    adapter_config = forms.CharField(
        required=False, max_length=PASTE_LIMIT,
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}),
        help_text='Optional JSON object, e.g. {"model": "smollm2-135m"} for local (the shipped '
                  f'models: {", ".join(model.name for model in shipped_models())}), '
                  '{"endpoint": "openai", "model": "gpt-4o-mini", "temperature": 0.2} for openai, '
                  'or a {"script": [...]} for scripted. '
                  'Leave empty for the defaults.')

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["adapter"].initial = settings.HANDOFF_DEFAULT_ADAPTER

    def clean_packet(self) -> dict[str, Any]:
        return _json_object(self.cleaned_data["packet"], "The packet")

    def clean_adapter_config(self) -> dict[str, Any] | None:
        text = self.cleaned_data.get("adapter_config", "").strip()
        return _json_object(text, "The adapter config") if text else None


class RetryForm(forms.Form):
    fix_instructions = forms.CharField(
        required=False, max_length=10_000, widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Optional: what the next attempt should do differently (it becomes "
                  "previous_failure.fix_instructions).")


class MessageForm(forms.Form):
    # its length is refused where every way of sending a message is (run_send_message)
    text = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}),
                           error_messages={"required": "Write what the subagent should know."})


class RunImportForm(forms.Form):
    """A run export to import: pasted or uploaded, one of the two."""

    document_text = forms.CharField(
        required=False, strip=True, label="Paste a run export",
        widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false",
                                     "placeholder": '{"format": "handoff.run-export", "version": 1, ...}'}))
    document_file = forms.FileField(
        required=False, label="Upload a run export (.json)",
        widget=forms.ClearableFileInput(attrs={"accept": ".json,application/json"}))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        text, upload = data.get("document_text"), data.get("document_file")
        if not text and not upload:
            raise forms.ValidationError("Nothing to import: paste a run export, or choose its "
                                        ".json file to upload.")
        if text and upload:
            raise forms.ValidationError("Import one run at a time: paste an export or upload "
                                        "one file, not both.")
        limit = settings.HANDOFF_RUN_IMPORT_LIMIT_BYTES
        if upload is not None and (upload.size or 0) > limit:
            # refused before it is read: the file is never held in memory whole
            self.add_error("document_file", f"{upload.name} is {filesizeformat(upload.size)}; run "
                                            f"exports of up to {filesizeformat(limit)} can be "
                                            "imported here (HANDOFF_RUN_IMPORT_LIMIT_BYTES).")
        return data

    def source(self) -> bytes | str:
        """The export as handed over. Only after is_valid()."""
        upload = self.cleaned_data.get("document_file")
        return upload.read() if upload is not None else str(self.cleaned_data["document_text"])
