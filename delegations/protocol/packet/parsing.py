"""parse_packet: a delegation as sent (JSON text, bytes, a dict, a whole tool call) ->
a validated :class:`HandoffPacket`, or one error listing every problem.

After the :class:`Normalizer` has read every key, the packet is finished (structured
criteria checked, budget and attempt put in place, the output schema normalized, derived
values filled in) and validated; validation errors are translated into issues that name
the field as the input spelled it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from ..budgets import BUDGET_AXES
from ..criteria import criterion_issues
from ..errors import ErrorCode, Issue, ProtocolError
from ..schemas import join_path, normalize_schema_issues
from ..text_limits import parse, value_issue
from .models import ROLE_PARAMS_FIELDS, SUBAGENT_TYPES, HandoffPacket
from .normalizer import TOOL_CALL_NAMES, Normalizer, short_repr, snake_case


def parse_packet(data: dict[str, Any] | str | bytes | bytearray | HandoffPacket) -> HandoffPacket:
    """Any dialect's spelling of a delegation -> :class:`HandoffPacket`.

    Raises ``ProtocolError(ERR_INVALID_PACKET)`` whose ``issues`` list every problem found,
    each with the field path as the input spelled it.
    """
    if isinstance(data, HandoffPacket):
        return data
    raw = _load(data)
    norm = Normalizer()
    for raw_key, value in raw.items():
        if not isinstance(raw_key, str):
            norm.issues.append(Issue("", f"keys must be strings (got {short_repr(raw_key)})"))
            continue
        norm.top(snake_case(raw_key), value, raw_key)
    out = norm.out
    if norm.criteria:
        out["success_criteria"] = norm.criteria
        if norm.criteria_from and norm.criteria_from != "success_criteria":
            norm.origin["success_criteria"] = norm.criteria_from
        _check_structured_criteria(norm)
    if norm.budget:
        out["budget"] = norm.budget
    if norm.attempt is not None:
        _attempt_into_metadata(norm, *norm.attempt)
    _normalize_output_schema(norm)
    if norm.extra:
        out["extra"] = norm.extra
    _derive(out, norm.issues)
    if "planned_children" in out:
        out["planned_children"] = _planned_children(out["planned_children"], norm.issues)
    try:
        packet = HandoffPacket.model_validate(out)
    except ValidationError as exc:
        norm.issues.extend(_validation_issues(exc, norm.origin))
        packet = None
    if norm.issues:
        first = norm.issues[0]
        where = f"{first.field}: " if first.field else ""
        count = len(norm.issues)
        raise ProtocolError(
            ErrorCode.INVALID_PACKET,
            f"The delegation packet is not valid ({count} problem{'s' if count > 1 else ''}); "
            f"first: {where}{first.message}. Fix the listed fields and send it again.",
            issues=norm.issues)
    assert packet is not None  # no issues means validation succeeded
    return packet


def _planned_children(value: Any, issues: list[Issue]) -> list[HandoffPacket]:
    """Each planned child read in any dialect, its problems listed under its index."""
    if not isinstance(value, list):
        issues.append(Issue("planned_children", f"must be a list of packets (got {short_repr(value)})"))
        return []
    children: list[HandoffPacket] = []
    for index, item in enumerate(value):
        where = f"planned_children[{index}]"
        try:
            child = parse_packet(item)
        except ProtocolError as exc:
            issues.extend(Issue(f"{where}.{issue.field}".rstrip("."), issue.message)
                          for issue in exc.issues or [Issue("", exc.message)])
            continue
        if not child.label:
            issues.append(Issue(f"{where}.label", "is required: it is the name the parent's "
                                                  "model delegates to"))
        elif any(other.label == child.label for other in children):
            issues.append(Issue(f"{where}.label", f"{child.label!r} is given to two planned "
                                                  "children; labels must be unique"))
        else:
            children.append(child)
    return children


def _load(data: dict[str, Any] | str | bytes | bytearray) -> dict[str, Any]:
    if isinstance(data, bytes | bytearray):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(ErrorCode.INVALID_PACKET,
                                f"The packet is not UTF-8 text: {exc}. Send JSON.",
                                issues=[Issue("", "not UTF-8 text")]) from None
    if isinstance(data, str):
        try:
            data = parse(data)
        except ValueError as exc:
            raise ProtocolError(
                ErrorCode.INVALID_PACKET,
                f"The packet is not valid JSON: {exc}. Send one JSON object.",
                issues=[Issue("", f"not valid JSON: {exc}")]) from None
    if not isinstance(data, dict):
        raise ProtocolError(
            ErrorCode.INVALID_PACKET,
            f"A packet is a JSON object; got {type(data).__name__}.",
            issues=[Issue("", f"expected an object, got {type(data).__name__}")])
    if (issue := value_issue(data)) is not None:
        raise ProtocolError(ErrorCode.INVALID_PACKET,
                            f"The delegation packet is not valid: {issue.field or 'the packet'} "
                            f"{issue.message}.", issues=[issue])
    return _unwrap_tool_call(data)


def _unwrap_tool_call(data: dict[str, Any]) -> dict[str, Any]:
    """A whole delegate_task / sessions_spawn call -> its arguments."""
    name = data.get("name")
    if not isinstance(name, str) or name not in TOOL_CALL_NAMES:  # a list name is unhashable
        return data
    arguments = data.get("arguments", data.get("input", data.get("parameters")))
    if isinstance(arguments, str):
        try:
            arguments = parse(arguments)
        except ValueError as exc:
            raise ProtocolError(
                ErrorCode.INVALID_PACKET,
                f"The {data['name']} call's arguments are not valid JSON: {exc}.",
                issues=[Issue("arguments", f"not valid JSON: {exc}")]) from None
    return arguments if isinstance(arguments, dict) else data


def _check_structured_criteria(norm: Normalizer) -> None:
    """A malformed structured criterion (unknown kind, bad regex...) is a packet error."""
    source = norm.origin.get("success_criteria", "success_criteria")
    for index, criterion in enumerate(norm.criteria):
        if isinstance(criterion, dict):
            norm.issues.extend(criterion_issues(criterion, f"{source}[{index}]"))


def _attempt_into_metadata(norm: Normalizer, value: Any, source: str) -> None:
    metadata = norm.out.setdefault("metadata", {})
    if not isinstance(metadata, dict):
        return  # pydantic reports the bad metadata itself
    if metadata.get("attempt") is not None and metadata["attempt"] != value:
        norm.issues.append(Issue(source, (
            f"gives attempt {short_repr(value)} but metadata.attempt is "
            f"{short_repr(metadata['attempt'])}; give it once")))
        return
    metadata["attempt"] = value
    norm.origin["metadata.attempt"] = source


def _normalize_output_schema(norm: Normalizer) -> None:
    schema = norm.out.get("expected_output_schema")
    if schema is None:
        return
    source = norm.origin.get("expected_output_schema", "expected_output_schema")
    if isinstance(schema, str):
        norm.issues.append(Issue(source, (
            "must be a JSON Schema object or a shorthand such as {\"summary\": \"string\"}, "
            "not free text (a delegation contract's expected output is a schema); describe the "
            "task in goal instead")))
        del norm.out["expected_output_schema"]
        return
    normalized, issues = normalize_schema_issues(schema, source)
    if issues:
        norm.issues.extend(issues)
        del norm.out["expected_output_schema"]
    else:
        norm.out["expected_output_schema"] = normalized


def _derive(out: dict[str, Any], issues: list[Issue]) -> None:
    """Fill goal / task_id / subagent_type from what the packet says elsewhere."""
    kind = out.get("subagent_type")
    if isinstance(kind, str) and kind.strip().lower() in SUBAGENT_TYPES:
        out["subagent_type"] = kind.strip().lower()
    verifier = out.get("verifier_params")
    nested_depth = verifier.get("review_depth") if isinstance(verifier, dict) else None
    if nested_depth is not None and out.get("review_depth") not in (None, nested_depth):
        issues.append(Issue("verifier_params.review_depth", (
            f"is {short_repr(nested_depth)} but review_depth is {short_repr(out['review_depth'])}; "
            "give the review depth once")))
        del verifier["review_depth"]  # type: ignore[union-attr]
    task = out.get("task")
    task = task if isinstance(task, dict) else {}
    if out.get("task_id") is None and isinstance(task.get("id"), str):
        out["task_id"] = task["id"]
    if out.get("subagent_type") is None:
        present = [role for role, field in ROLE_PARAMS_FIELDS.items() if out.get(field) is not None]
        metadata = out.get("metadata")
        target = metadata.get("target_agent") if isinstance(metadata, dict) else None
        if len(present) == 1:
            out["subagent_type"] = present[0]
        elif not present and isinstance(target, str) and target in SUBAGENT_TYPES:
            out["subagent_type"] = target
    if out.get("goal") is None:
        goal = _goal_from(out, task)
        if goal:
            out["goal"] = goal


def _goal_from(out: dict[str, Any], task: dict[str, Any]) -> str | None:
    if isinstance(task.get("description"), str) and task["description"].strip():
        return str(task["description"])
    for field in ("executor_params", "verifier_params"):
        params = out.get(field)
        definition = params.get("task_definition") if isinstance(params, dict) else None
        if isinstance(definition, dict):
            for key in ("description", "title"):
                text = definition.get(key)
                # the agloop verifier template elides the description as "..."; the title says more
                if isinstance(text, str) and text.strip() not in ("", "...", "…"):
                    return text
    for field in ("feature_name", "instruction_set"):
        text = out.get(field)
        if isinstance(text, str) and text.strip():
            return text
    return None


_UNION_TAGS = frozenset({"str", "int", "float", "bool", "dict[str,any]", "list[any]", "none"})
_EXPECTED_KIND: dict[str, str] = {
    "string_type": "a string", "dict_type": "an object", "model_type": "an object",
    "model_attributes_type": "an object", "list_type": "a list", "int_type": "an integer",
    "int_parsing": "an integer", "int_from_float": "a whole number",
    "float_type": "a number", "float_parsing": "a number", "bool_type": "true or false",
    "bool_parsing": "true or false",
}
_FIELD_HINTS: dict[str, str] = {
    "skill": "must be a skill name or 'name@version' (letters, digits, '.', '-', '_')",
}


def _clean_loc(loc: tuple[int | str, ...]) -> list[int | str]:
    return [part for part in loc
            if isinstance(part, int) or (part not in _UNION_TAGS and "[" not in part)]


def _path(parts: Iterable[int | str]) -> str:
    return join_path("", parts)


def _validation_issues(exc: ValidationError, origin: dict[str, str]) -> list[Issue]:
    grouped: dict[str, list[ErrorDetails]] = {}
    for error in exc.errors(include_url=False):
        parts = _clean_loc(error["loc"])
        head = [p for p in parts[:2] if isinstance(p, str)]
        if len(head) == 2 and f"{head[0]}.{head[1]}" in origin:
            path = _path([origin[f"{head[0]}.{head[1]}"], *parts[2:]])
        elif parts and isinstance(parts[0], str) and parts[0] in origin:
            path = _path([origin[parts[0]], *parts[1:]])
        else:
            path = _path(parts)
        grouped.setdefault(path, []).append(error)
    issues = []
    for path, errors in grouped.items():
        issues.append(Issue(path, _message(path, errors)))
    return issues


def _message(path: str, errors: list[ErrorDetails]) -> str:
    error = errors[0]
    kind = error["type"]
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        if path.startswith("budget") or ".max_" in path:
            return f"is not a budget limit; use {', '.join(BUDGET_AXES)}"
        return "is not a field of the packet"
    if path in _FIELD_HINTS and kind == "string_pattern_mismatch":
        return f"{_FIELD_HINTS[path]} (got {short_repr(error.get('input'))})"
    got = f" (got {short_repr(error.get('input'))})" if "input" in error else ""
    if kind == "less_than_equal":   # the bounds of number_limits.py, said as a person reads them
        return f"must be at most {_figure(error['ctx']['le'])}{got}"
    if len(errors) > 1:
        kinds = [_EXPECTED_KIND.get(item["type"]) for item in errors]
        named = [k for k in dict.fromkeys(kinds) if k]
        if named:
            return f"must be {' or '.join(named)}{got}"
    text = str(error["msg"])
    for prefix, replacement in (("Input should be", "must be"), ("Value error, ", ""),
                                ("String should", "must"), ("List should", "must"),
                                ("Assertion failed, ", "")):
        if text.startswith(prefix):
            text = replacement + text[len(prefix):]
            break
    return f"{text}{got}"


def _figure(value: float) -> str:
    """86400.0 -> "86,400"."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,}"
