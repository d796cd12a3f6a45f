"""Every dialect's spelling of a packet -> the canonical dict :class:`HandoffPacket` validates.

:class:`Normalizer` takes the packet's top-level keys one at a time (camelCase and
kebab-case become snake_case, then an alias table names the canonical field) and routes
each to the handler that knows its block: budgets, capability scope, expectations, role
params, previous failure, metadata, the anti-laziness checklist, base params. It collects
every issue on the way instead of stopping at the first, and keeps unknown keys in
``extra`` under the spelling the input used. The dialects and their spellings are listed
in the package docstring.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, datetime
from typing import Any

from ..budgets import BUDGET_AXES, Budget
from ..errors import Issue
from ..number_limits import MAX_SECONDS
from .models import ROLE_PARAMS_FIELDS, Criterion, HandoffPacket

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SNAKE_CACHE: dict[str, str] = {}
_CANONICAL_FIELDS = frozenset(HandoffPacket.model_fields)
_MAX_ISSUE_INPUT = 60

# top-level spellings (after snake-casing) -> canonical field
_TOP_ALIASES: dict[str, str] = {
    "payload": "input_data",
    "input": "input_data",
    "instructions": "instruction_set",
    "system_prompt": "instruction_set",
    "objective": "goal",
    "agent_type": "subagent_type",
    "role": "subagent_type",
    "skill_ref": "skill",
    "output_schema": "expected_output_schema",
    "expected_output": "expected_output_schema",
    "output_format": "expected_output_schema",
    "timeout_seconds": "timeout_s",
    "timeout": "timeout_s",
    "depth_limit": "max_depth",
    "allow_nesting": "allow_nested",
    "allowed_capabilities": "capabilities",
}
_CRITERIA_KEYS = ("success_criteria", "completion_criteria", "acceptance_criteria", "criteria")
_BUDGET_CONTAINERS = frozenset({
    "budget", "budgets", "resource_boundaries", "resources", "resource_limits", "limits"})
_BUDGET_ALIASES: dict[str, str] = {
    "max_runtime_seconds": "max_runtime_s", "max_runtime_sec": "max_runtime_s",
    "max_runtime": "max_runtime_s", "max_calls": "max_model_calls",
    "max_total_tokens": "max_tokens", "total_tokens": "max_tokens",
    "max_cost": "max_cost_usd", "max_external_cost": "max_cost_usd",
    "max_external_cost_usd": "max_cost_usd", "max_parallel": "max_concurrency",
    "max_concurrent": "max_concurrency",
}
# Budget axes that may also sit flat at the top level (max_iterations may not: there it
# is delegate_task's own loop limit).
_FLAT_BUDGET_KEYS = frozenset(
    (set(BUDGET_AXES) - {"max_iterations"}) | set(_BUDGET_ALIASES) | {"max_runtime_ms"})
_SCOPE_KEYS = frozenset({"scope", "capability_scope"})
_SCOPE_FIELDS: dict[str, str] = {
    "capabilities": "capabilities", "allowed": "capabilities", "tools": "capabilities",
    "allowed_capabilities": "capabilities", "depth": "depth", "max_depth": "max_depth",
    "depth_limit": "max_depth", "allow_nested": "allow_nested",
}
TOOL_CALL_NAMES = frozenset({"delegate_task", "sessions_spawn"})
_CHECKLIST_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])?\s*(?:\[[ xX]?\]\s*)?")


def snake_case(key: str) -> str:
    """camelCase / kebab-case -> snake_case (memoized: the same few keys repeat)."""
    found = _SNAKE_CACHE.get(key)
    if found is None:
        found = _CAMEL_BOUNDARY.sub("_", key).replace("-", "_").lower()
        if len(_SNAKE_CACHE) < 4096:
            _SNAKE_CACHE[key] = found
    return found


def short_repr(value: Any) -> str:
    """A value as an issue message quotes it: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= _MAX_ISSUE_INPUT else text[: _MAX_ISSUE_INPUT - 3] + "..."


class Normalizer:
    """One parse: builds the canonical dict and collects every issue on the way."""

    def __init__(self) -> None:
        self.issues: list[Issue] = []
        self.out: dict[str, Any] = {}
        # canonical field (or "budget.<axis>") -> the spelling the input used, so that
        # validation issues name what the person actually wrote
        self.origin: dict[str, str] = {}
        self.extra: dict[str, Any] = {}
        self.criteria: list[Criterion] = []
        self.criteria_from: str | None = None
        self.budget: dict[str, Any] = {}
        self.attempt: tuple[Any, str] | None = None   # a top-level "attempt" (HandoffPackage spelling)

    # -- helpers ---------------------------------------------------------------------
    def put(self, field: str, value: Any, source: str) -> None:
        """Set a canonical field; the same field given twice must agree."""
        if field in self.out:
            if self.out[field] != value:
                first = self.origin.get(field, field)
                self.issues.append(Issue(source, (
                    f"gives {field} as {short_repr(value)} but {first} already gave "
                    f"{short_repr(self.out[field])}; give it once")))
            return
        self.out[field] = value
        if source != field:
            self.origin[field] = source

    def put_budget(self, axis: str, value: Any, source: str) -> None:
        key = _BUDGET_ALIASES.get(axis, axis)
        if key == "max_runtime_ms":
            seconds = self.milliseconds(value, source)
            if seconds is None:
                return
            key, value = "max_runtime_s", seconds
        if key in self.budget and self.budget[key] != value:
            self.issues.append(Issue(source, (
                f"gives budget.{key} as {short_repr(value)} but it was already "
                f"{short_repr(self.budget[key])}; give it once")))
            return
        self.budget[key] = value
        self.origin[f"budget.{key}"] = source

    def milliseconds(self, value: Any, source: str) -> float | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.issues.append(Issue(source, (
                f"must be a number of milliseconds (got {short_repr(value)})")))
            return None
        if value > MAX_SECONDS * 1000:   # said here, in the unit the input used
            self.issues.append(Issue(source, (
                f"must be at most {MAX_SECONDS * 1000:,} milliseconds (a day; got "
                f"{short_repr(value)})")))
            return None
        return value / 1000

    def add_criteria(self, value: Any, source: str) -> None:
        if value is None:
            return
        items = [value] if isinstance(value, str | dict) else value
        if not isinstance(items, list):
            self.issues.append(Issue(source, (
                f"must be a list of criteria (strings or objects); got {short_repr(value)}")))
            return
        if self.criteria_from is None:
            self.criteria_from = source
        for item in items:
            if item not in self.criteria:
                self.criteria.append(item)

    def snake_dict(self, value: Any, source: str,
                   aliases: dict[str, str] | None = None) -> dict[str, Any] | None:
        """Keys of one typed part to snake_case; a non-object is left for pydantic to report."""
        if not isinstance(value, dict):
            return None
        out: dict[str, Any] = {}
        for raw_key, item in value.items():
            if not isinstance(raw_key, str):
                self.issues.append(Issue(source, f"keys must be strings (got {short_repr(raw_key)})"))
                continue
            key = snake_case(raw_key)
            if aliases:
                key = aliases.get(key, key)
            if key in out and out[key] != item:
                self.issues.append(Issue(f"{source}.{raw_key}", (
                    f"repeats {key} with a different value; give it once")))
                continue
            out[key] = item
        return out

    # -- the pieces ------------------------------------------------------------------
    def budget_block(self, value: Any, source: str) -> None:
        if isinstance(value, Budget):
            value = value.as_dict(include_unlimited=False)
        if not isinstance(value, dict):
            self.issues.append(Issue(source, (
                f"must be an object of limits such as {{\"max_tokens\": 20000}}; got "
                f"{short_repr(value)}")))
            return
        for raw_axis, item in value.items():
            if not isinstance(raw_axis, str):
                self.issues.append(Issue(source, f"keys must be strings (got {short_repr(raw_axis)})"))
                continue
            self.put_budget(snake_case(raw_axis), item, f"{source}.{raw_axis}")

    def scope_block(self, value: Any, source: str) -> None:
        if isinstance(value, list):
            self.put("capabilities", value, source)
            return
        block = self.snake_dict(value, source)
        if block is None:
            self.issues.append(Issue(source, (
                f"must be a list of capabilities or an object with 'capabilities'; got "
                f"{short_repr(value)}")))
            return
        for key, item in block.items():
            field = _SCOPE_FIELDS.get(key)
            if field is None:
                self.extra[f"{source}.{key}"] = item
            else:
                self.put(field, item, f"{source}.{key}")

    def expectations_block(self, value: Any, source: str) -> None:
        block = self.snake_dict(value, source)
        if block is None:
            self.issues.append(Issue(source, (
                "must be an object with outputFormat, successCriteria and timeoutMs")))
            return
        for key, item in block.items():
            where = f"{source}.{key}"
            if key in ("output_format", "output_schema", "expected_output"):
                self.put("expected_output_schema", item, where)
            elif key in _CRITERIA_KEYS:
                self.add_criteria(item, where)
            elif key == "timeout_ms":
                seconds = self.milliseconds(item, where)
                if seconds is not None:
                    self.put("timeout_s", seconds, where)
            elif key in ("timeout_s", "timeout_seconds", "timeout"):
                self.put("timeout_s", item, where)
            else:
                self.extra[f"{source}.{key}"] = item

    def task_block(self, value: Any, source: str) -> None:
        if isinstance(value, str):  # OpenClaw sessions_spawn: task is the work assignment text
            self.put("goal", value, source)
            return
        self.put("task", self.snake_dict(value, source) if isinstance(value, dict) else value,
                 source)

    def role_params(self, field: str, value: Any, source: str) -> None:
        block = self.snake_dict(value, source)
        if block is None:
            self.put(field, value, source)
            return
        definition = block.get("task_definition")
        if isinstance(definition, list):
            # a list of tasks: one is fine; several are kept for lint (MULTIPLE_TASKS)
            tasks = [self.snake_dict(item, f"{source}.task_definition") or item
                     for item in definition]
            block["task_definition"] = tasks[0] if tasks else None
            block["tasks"] = tasks[1:] + list(block.get("tasks") or [])
        elif isinstance(definition, dict):
            block["task_definition"] = self.snake_dict(definition, f"{source}.task_definition")
        if isinstance(block.get("tasks"), list):
            block["tasks"] = [self.snake_dict(item, f"{source}.tasks") or item
                              for item in block["tasks"]]
        feedback = block.get("revision_feedback")
        if isinstance(feedback, dict):
            block["revision_feedback"] = self.snake_dict(feedback, f"{source}.revision_feedback")
        objections = block.get("previous_objections")
        if isinstance(objections, list):
            block["previous_objections"] = [
                self.snake_dict(item, f"{source}.previous_objections") or item
                for item in objections]
        criteria = block.get("acceptance_criteria")
        if isinstance(criteria, str):
            block["acceptance_criteria"] = [criteria]
        self.put(field, block, source)

    def previous_failure(self, value: Any, source: str) -> None:
        block = self.snake_dict(value, source, {"attempt": "attempt_number"})
        if block is None:
            self.put("previous_failure", value, source)
            return
        fix = block.get("fix_instructions")
        if isinstance(fix, list) and all(isinstance(item, str) for item in fix):
            block["fix_instructions"] = "\n".join(fix)
        failures = block.get("specific_failures")
        if isinstance(failures, str):
            block["specific_failures"] = [failures]
        self.put("previous_failure", block, source)

    def metadata_block(self, value: Any, source: str) -> None:
        block = self.snake_dict(value, source)
        if block is None:
            self.put("metadata", value, source)
            return
        for key in ("timestamp", "deadline"):
            if isinstance(block.get(key), datetime | date):
                block[key] = block[key].isoformat()
        self.put("metadata", block, source)

    def checklist(self, value: Any, source: str) -> None:
        if isinstance(value, str):
            # agloop templates print the checklist as a markdown block: one item per bullet line
            items = []
            for line in value.splitlines():
                if not line.lstrip().startswith(("-", "*", "+")) and not line.strip()[:1].isdigit():
                    continue
                text = _CHECKLIST_BULLET.sub("", line, count=1).strip()
                if text:
                    items.append(text)
            value = items
        self.put("anti_laziness_checklist", value, source)

    def base_params(self, value: Any, source: str) -> None:
        block = self.snake_dict(value, source)
        if block is None:
            self.issues.append(Issue(source, "must be an object of agloop base parameters"))
            return
        for key, item in block.items():
            self.top(key, item, f"{source}.{key}")

    # -- one top-level key -------------------------------------------------------------
    def top(self, key: str, value: Any, source: str) -> None:
        route = _ROUTES.get(key)
        if route is None:
            route = _route(key)
        route[1](self, route[0], value, source)


def _h_budget(norm: Normalizer, key: str, value: Any, source: str) -> None:
    norm.budget_block(value, source)


def _h_scope(norm: Normalizer, key: str, value: Any, source: str) -> None:
    norm.scope_block(value, source)


def _h_criteria(norm: Normalizer, key: str, value: Any, source: str) -> None:
    norm.add_criteria(value, source)


def _h_timeout_ms(norm: Normalizer, key: str, value: Any, source: str) -> None:
    seconds = norm.milliseconds(value, source)
    if seconds is not None:
        norm.put("timeout_s", seconds, source)


def _h_run_timeout(norm: Normalizer, key: str, value: Any, source: str) -> None:
    # OpenClaw sub-agents: runTimeoutSeconds 0 means "no timeout"
    if value == 0 and not isinstance(value, bool):
        return
    norm.put("timeout_s", value, source)


def _h_expectations(norm: Normalizer, key: str, value: Any, source: str) -> None:
    norm.expectations_block(value, source)


def _h_task(norm: Normalizer, key: str, value: Any, source: str) -> None:
    norm.task_block(value, source)


def _h_role(norm: Normalizer, key: str, value: Any, source: str) -> None:
    norm.role_params(key, value, source)


def _h_previous_failure(norm: Normalizer, key: str, value: Any, source: str) -> None:
    if value is not None:
        norm.previous_failure(value, source)


def _h_part(norm: Normalizer, key: str, value: Any, source: str) -> None:
    norm.put(key, norm.snake_dict(value, source) if isinstance(value, dict) else value, source)


def _h_metadata(norm: Normalizer, key: str, value: Any, source: str) -> None:
    norm.metadata_block(value, source)


def _h_checklist(norm: Normalizer, key: str, value: Any, source: str) -> None:
    norm.checklist(value, source)


def _h_base(norm: Normalizer, key: str, value: Any, source: str) -> None:
    norm.base_params(value, source)


def _h_attempt(norm: Normalizer, key: str, value: Any, source: str) -> None:
    norm.attempt = (value, source)


def _h_extra(norm: Normalizer, key: str, value: Any, source: str) -> None:
    # a canonical packet's own extra dict: keep its keys as they are
    if isinstance(value, dict):
        for extra_key, item in value.items():
            norm.extra[extra_key] = item
    else:
        norm.issues.append(Issue(source, f"must be an object (got {short_repr(value)})"))


def _h_allowed_inputs(norm: Normalizer, key: str, value: Any, source: str) -> None:
    if isinstance(value, str):
        value = [value]
    elif isinstance(value, dict):  # {"name": "why it may be passed"}: the names are the list
        value = list(value)
    norm.put("allowed_inputs", value, source)


def _h_put(norm: Normalizer, key: str, value: Any, source: str) -> None:
    norm.put(key, value, source)


def _h_flat_budget(norm: Normalizer, key: str, value: Any, source: str) -> None:
    norm.put_budget(key, value, source)


def _h_unknown(norm: Normalizer, key: str, value: Any, source: str) -> None:
    # kept under the spelling (and path) the input used, so a person finds it
    norm.extra[source] = value


_Handler = Callable[[Normalizer, str, Any, str], None]
_HANDLERS: dict[str, _Handler] = {
    **{name: _h_budget for name in _BUDGET_CONTAINERS},
    **{name: _h_scope for name in _SCOPE_KEYS},
    **{name: _h_criteria for name in _CRITERIA_KEYS},
    "timeout_ms": _h_timeout_ms,
    "run_timeout_seconds": _h_run_timeout,
    "expectations": _h_expectations,
    "task": _h_task,
    **{name: _h_role for name in ROLE_PARAMS_FIELDS.values()},
    "previous_failure": _h_previous_failure,
    "specification_adherence": _h_part,
    "context": _h_part,
    "metadata": _h_metadata,
    "anti_laziness_checklist": _h_checklist,
    "base_params": _h_base,
    "attempt": _h_attempt,
    "extra": _h_extra,
    "allowed_inputs": _h_allowed_inputs,
}


# snake_case key -> (canonical key, handler), memoized: the same few keys repeat
_ROUTES: dict[str, tuple[str, _Handler]] = {}


def _route(key: str) -> tuple[str, _Handler]:
    canonical = _TOP_ALIASES.get(key, key)
    handler = _HANDLERS.get(canonical)
    if handler is None:
        if canonical in _CANONICAL_FIELDS:
            handler = _h_put
        elif canonical in _FLAT_BUDGET_KEYS:
            handler = _h_flat_budget
        else:
            handler = _h_unknown
    route = (canonical, handler)
    if len(_ROUTES) < 4096:
        _ROUTES[key] = route
    return route
