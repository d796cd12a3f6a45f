"""A dry run of one node: the delegation on its own, as saved, without its children, on
the scripted adapter (a script prefilled from its expected output) or any model. It is a
real run, labelled as a dry run, whose page checks the result against the schema and the
criteria before the whole tree runs."""

from __future__ import annotations

from typing import Any

from django import forms

from delegations.models import Delegation, Run
from delegations.protocol.criteria.shaping import output_shapes
from delegations.protocol.packet import parse_packet
from delegations.runs.workflows import run_create

from .forms import AdapterForm, JSONValueField


def example_payload(schema: Any) -> Any:
    """A small value that fits the JSON Schema ``schema``: what a scripted dry run answers
    with unless the person writes their own. An object gets its required properties only."""
    if not isinstance(schema, dict):
        return "example"
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((name for name in kind if name != "null"), "null")
    if kind in ("number", "integer"):
        minimum = schema.get("minimum")
        return minimum if isinstance(minimum, int | float) and not isinstance(minimum, bool) else 1
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    if kind == "array":
        return [example_payload(schema.get("items"))]
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        return {name: example_payload(properties.get(name)) for name in schema.get("required") or []}
    return "example"


def default_script(packet: dict[str, Any]) -> list[dict[str, Any]]:
    """One turn that yields SUCCESS with an example of the packet's expected output, its
    fields taken from the input where the criteria say they come from it (a quote of the
    source, one of its values, numbers or spans), so that the example can meet them."""
    schema = packet.get("expected_output_schema")
    payload = example_payload(schema) if isinstance(schema, dict) else {}
    if isinstance(payload, dict) and isinstance(schema, dict):
        shapes = output_shapes(packet.get("success_criteria") or [], schema, packet.get("input_data") or {})
        payload.update({name: _first_sentence(quote.text) for name, quote in shapes.quotes.items()})
        for offered in (shapes.choices, shapes.numbers, shapes.spans):
            payload.update({name: values[0] for name, values in offered.items() if values})
    return [{"text": "A dry run's answer.", "tool_calls": [{"name": "yield_control", "arguments": {
        "status": "SUCCESS", "output_payload": payload if isinstance(payload, dict) else {"value": payload}}}]}]


def _first_sentence(text: str, most: int = 120) -> str:
    """The start of ``text`` up to its first sentence's end, or ``most`` characters cut at
    a space: a quote of it, as a quoted_from criterion takes it."""
    end = min((found + 1 for found in (text.find(". "), text.find("! "), text.find("? ")) if found >= 0),
              default=len(text))
    if end > most:
        end = text.rfind(" ", 0, most) if " " in text[:most] else most
    return text[:end].strip()


class DryRunForm(AdapterForm):
    """A model for one node on its own: the scripted adapter plays ``script``, any other
    adapter takes ``adapter_config``."""

    script = JSONValueField(
        required=False, expect=list, label="Script (scripted adapter)",
        widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false"}),
        help_text="A JSON list of model turns to play; each turn has text and tool_calls. "
                  "It starts as one yield_control SUCCESS turn answering an example of the expected output.")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("adapter") == "scripted" and "script" in cleaned:
            if cleaned["script"] is None:
                self.add_error("script", "Write the turns the scripted adapter plays.")
            else:
                cleaned["adapter_config"] = {**(cleaned.get("adapter_config") or {}), "script": cleaned["script"]}
        return cleaned

    def config_field(self) -> str:
        """The field an adapter's refusal of its config belongs to."""
        return "script" if self.cleaned_data.get("adapter") == "scripted" else "adapter_config"


def dry_run_packet(delegation: Delegation) -> dict[str, Any]:
    """The delegation's own packet as a root: no planned children, no depth, and a label
    that says it is a dry run (unless it has a label of its own)."""
    packet = parse_packet(delegation.packet_dict()).to_dict()
    for key in ("planned_children", "depth"):
        packet.pop(key, None)
    packet["label"] = packet.get("label") or f"dry run: {delegation.name}"
    return packet


def start_dry_run(*, delegation: Delegation, user: Any, adapter: str,
                  config: dict[str, Any] | None) -> Run:
    """Start the dry run; ProtocolError (an unusable packet or adapter config) propagates."""
    return run_create(packet=dry_run_packet(delegation), adapter=adapter, config=config,
                      owner=user, delegation=delegation)
