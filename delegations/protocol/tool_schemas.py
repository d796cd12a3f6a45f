"""The protocol's tools, as the hand-off protocol prints them and as model APIs need them.

``DELEGATE_TASK_TOOL`` and ``YIELD_CONTROL_TOOL`` are the hand-off protocol's definitions verbatim,
quirks included: ``yield_control`` lists its properties straight under ``parameters``
(no ``"type": "object"`` / ``"properties"`` wrapper), puts ``required`` at the tool level,
marks ``error_report`` with OpenAPI's ``nullable``, and its status enum leaves out
``BLOCKED_AWAITING_CLARIFICATION`` although the protocol's own Handoff Escalation rule tells a
subagent to yield with it. Keep them as the reference text; never hand them to a model.

:func:`as_json_schema_tool` turns any of them into a valid JSON-Schema function tool
(``{"name", "description", "parameters": {"type": "object", "properties", "required"}}``),
and :data:`MODEL_TOOLS` holds the forms the runner offers a model, where two of the
protocol's gaps are closed on purpose:

- ``yield_control.status`` also allows ``BLOCKED_AWAITING_CLARIFICATION`` (the hand-off
  protocol's Handoff Escalation) so a subagent can ask instead of guessing;
- ``delegate_task.subagent_type`` allows every subagent type (the agloop delegation
  protocol's planner, critic and verifier too), and optional contract fields a parent may pass on
  (``label``, ``goal``, ``success_criteria``, ``expected_output``, ``timeout_s``,
  ``budget``, ``capabilities``, ``allow_nested``); its arguments go through
  ``parse_packet`` like any other spelling.

A run with an expected output schema is offered :func:`yield_control_for` instead, whose
``output_payload`` carries that schema (so constrained decoding writes a valid payload).

The constants are plain dicts shared by every caller: copy before changing one
(:func:`as_json_schema_tool` always returns a fresh copy).
"""

from __future__ import annotations

import copy
from typing import Any

from .number_limits import MAX_SECONDS
from .packet import SUBAGENT_TYPES

ToolSchema = dict[str, Any]

# The hand-off protocol's "Parent Agent Tool: delegate_task", verbatim.
DELEGATE_TASK_TOOL: ToolSchema = {
    "name": "delegate_task",
    "description": "Spawns a specialized subagent to execute a scoped objective.",
    "parameters": {
        "type": "object",
        "properties": {
            "subagent_type": {"type": "string",
                              "enum": ["coder", "researcher", "reviewer", "executor"]},
            "instruction_set": {"type": "string",
                                "description": "System-level prompt for subagent."},
            "input_data": {"type": "object"},
            "max_iterations": {"type": "integer", "default": 5},
            "termination_trigger": {"type": "string",
                                    "description": "String or condition to signal completion."},
        },
        "required": ["subagent_type", "instruction_set", "input_data"],
    },
}

# The hand-off protocol's "Subagent Tool: yield_control", verbatim (see the module docstring's quirks).
YIELD_CONTROL_TOOL: ToolSchema = {
    "name": "yield_control",
    "description": "Terminates subagent session and returns data to parent agent.",
    "parameters": {
        "status": {"type": "string", "enum": ["SUCCESS", "FAILURE", "PARTIAL_COMPLETION"]},
        "output_payload": {"type": "object"},
        "log_summary": {"type": "string"},
        "error_report": {"type": "object", "nullable": True},
    },
    "required": ["status", "output_payload"],
}

# The one way a subagent asks for a capability outside its scope.
REQUEST_CAPABILITY_TOOL: ToolSchema = {
    "name": "request_capability",
    "description": ("Asks a human to grant a capability outside this run's scope (for "
                    "example network_outbound). The run waits for the decision; do not try "
                    "the action until it is granted."),
    "parameters": {
        "type": "object",
        "properties": {
            "capability": {"type": "string",
                           "description": "The capability needed, e.g. fs_write."},
            "reason": {"type": "string",
                       "description": "Why the task needs it, in one or two sentences a "
                                      "person can judge."},
        },
        "required": ["capability", "reason"],
    },
}

PROTOCOL_TOOLS: tuple[ToolSchema, ...] = (DELEGATE_TASK_TOOL, YIELD_CONTROL_TOOL)
ALL_TOOLS: tuple[ToolSchema, ...] = (DELEGATE_TASK_TOOL, YIELD_CONTROL_TOOL, REQUEST_CAPABILITY_TOOL)
TOOLS_BY_NAME: dict[str, ToolSchema] = {tool["name"]: tool for tool in ALL_TOOLS}

# The tool-level keys a function tool has; anything else beside them is a parameter
# spelling quirk (the protocol's yield_control puts "required" there).
_TOOL_KEYS = frozenset({"name", "description", "parameters", "required"})
_SCHEMA_OBJECT_KEYS = frozenset({"type", "properties", "required", "additionalProperties"})


def _nullable_to_type(schema: Any) -> Any:
    """OpenAPI ``nullable: true`` -> JSON Schema ``type: [T, "null"]``, recursively."""
    if isinstance(schema, list):
        return [_nullable_to_type(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _nullable_to_type(value) for key, value in schema.items() if key != "nullable"}
    if schema.get("nullable") is True:
        kind = out.get("type")
        if isinstance(kind, str) and kind != "null":
            out["type"] = [kind, "null"]
        elif isinstance(kind, list) and "null" not in kind:
            out["type"] = [*kind, "null"]
    return out


def as_json_schema_tool(tool: ToolSchema) -> ToolSchema:
    """One tool -> a valid JSON-Schema function tool (a fresh copy).

    Handles the protocol's shapes: parameters already a JSON Schema object (kept), or a bare
    map of property name -> schema (wrapped in ``{"type": "object", "properties": ...}``);
    a tool-level ``required`` moves into the parameters; ``nullable`` becomes a
    ``"null"`` type.
    """
    params = tool.get("parameters") or {}
    is_object_schema = params.get("type") == "object" or "properties" in params
    if is_object_schema:
        properties = dict(params.get("properties") or {})
        required = list(params.get("required") or [])
        rest = {key: value for key, value in params.items() if key not in _SCHEMA_OBJECT_KEYS}
    else:
        properties = {key: value for key, value in params.items() if key != "required"}
        required = list(params.get("required") or [])
        rest = {}
    for name in tool.get("required") or []:
        if name not in required:
            required.append(name)
    parameters: dict[str, Any] = {"type": "object",
                                  "properties": _nullable_to_type(copy.deepcopy(properties)),
                                  "required": required}
    if is_object_schema and "additionalProperties" in params:
        parameters["additionalProperties"] = params["additionalProperties"]
    parameters.update(copy.deepcopy(rest))
    out: ToolSchema = {"name": tool["name"], "description": tool.get("description", ""),
                       "parameters": parameters}
    return out


def _model_delegate_task() -> ToolSchema:
    tool = as_json_schema_tool(DELEGATE_TASK_TOOL)
    properties = tool["parameters"]["properties"]
    properties["subagent_type"]["enum"] = list(SUBAGENT_TYPES)
    properties.update({
        "label": {"type": "string",
                  "description": "Short name for this child run, unique among its siblings."},
        "goal": {"type": "string", "description": "What the subagent must achieve, in one "
                                                  "or two sentences."},
        "success_criteria": {"type": "array",
                             "items": {"type": ["string", "object"]},
                             "description": "Machine-verifiable checks, e.g. \"Word count > "
                                            "500\" or \"JSON is schema-valid\"."},
        "expected_output": {"type": "object",
                            "description": "JSON Schema (or shorthand such as "
                                           "{\"summary\": \"string\"}) of output_payload."},
        "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_SECONDS,
                      "description": "Hard timeout in seconds; at most your own."},
        "budget": {"type": "object",
                   "description": "Limits: max_model_calls, max_tokens, max_runtime_s, "
                                  "max_cost_usd, max_concurrency, max_iterations. At most "
                                  "what this run has left."},
        "capabilities": {"type": "array", "items": {"type": "string"},
                         "description": "Capabilities for the child; a subset of yours."},
        "allow_nested": {"type": "boolean",
                         "description": "Whether the child may delegate in turn."},
    })
    return tool


def _model_yield_control() -> ToolSchema:
    tool = as_json_schema_tool(YIELD_CONTROL_TOOL)
    tool["parameters"]["properties"]["status"]["enum"] = [
        "SUCCESS", "FAILURE", "PARTIAL_COMPLETION", "BLOCKED_AWAITING_CLARIFICATION"]
    return tool


# What the runner offers a model, by tool name (see the module docstring).
MODEL_TOOLS: dict[str, ToolSchema] = {
    "delegate_task": _model_delegate_task(),
    "yield_control": _model_yield_control(),
    "request_capability": as_json_schema_tool(REQUEST_CAPABILITY_TOOL),
}


def model_tool(name: str) -> ToolSchema:
    """A fresh copy of the model-facing form of one protocol tool (KeyError if unknown)."""
    return copy.deepcopy(MODEL_TOOLS[name])


# Keywords that tie a schema to its own document root: embedded under another schema they
# would resolve against the tool's parameters instead, so such a schema is not embedded.
_ROOTED_KEYWORDS = frozenset({"$ref", "$dynamicRef", "$recursiveRef", "$defs", "definitions",
                              "$id", "$anchor", "$dynamicAnchor", "$schema"})


def _embeddable(schema: Any) -> bool:
    if isinstance(schema, list):
        return all(_embeddable(item) for item in schema)
    if not isinstance(schema, dict):
        return True
    return not (_ROOTED_KEYWORDS & schema.keys()) and all(map(_embeddable, schema.values()))


def yield_control_for(output_schema: dict[str, Any] | None) -> ToolSchema:
    """The model-facing ``yield_control`` whose ``output_payload`` carries the run's expected
    output schema, so a model (and the local adapter's constrained decoding) sees the shape
    it must hand back; :data:`MODEL_TOOLS`' own form (the hand-off protocol's ``{"type": "object"}``)
    when there is none.

    ``output_payload`` becomes ``anyOf [expected schema, {}]``: a FAILURE or
    BLOCKED_AWAITING_CLARIFICATION yield legitimately carries an empty payload, and one flat
    parameter schema cannot make the payload depend on ``status``. The empty option widens
    nothing the runner accepts: a SUCCESS with ``{}`` still fails the expected schema and
    gets the self-correction turn. Left as the protocol has it: a schema that is not an object
    schema (``output_payload`` is always an object) or that refers to its own root
    (``$ref``, ``$defs``, ``$id``...: embedded, those would resolve against the tool).
    """
    base = MODEL_TOOLS["yield_control"]
    if not output_schema or not _embeddable(output_schema):
        return base
    kind = output_schema.get("type", "object" if "properties" in output_schema else None)
    if kind != "object":
        return base
    tool = copy.deepcopy(base)
    tool["parameters"]["properties"]["output_payload"] = {
        "type": "object",
        "description": "The result, valid against the expected output schema; {} only with "
                       "FAILURE or BLOCKED_AWAITING_CLARIFICATION.",
        "anyOf": [copy.deepcopy(output_schema), {"const": {}}]}
    return tool
