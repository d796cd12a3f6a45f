"""What a valid manifest is: the field checks, :class:`SkillManifest`, :class:`SkillBundle`
and validation that reports every broken rule at once."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..capabilities import APPROVAL_REQUIRED_CAPABILITIES, KNOWN_CAPABILITIES
from ..criteria import criterion_issues, parse_criterion
from ..errors import ErrorCode, Issue, ProtocolError
from ..schemas import normalize_schema_issues, validate_instance
from .entry_points import EntryPoint, EntryPointKind, module_allowed, parse_entry_point
from .versions import SemVer

SUBAGENT_TYPES = ("coder", "researcher", "reviewer", "executor", "planner", "critic", "verifier")
REQUIRED_FIELDS = ("skill_name", "version", "entry_point", "input_schema", "output_schema",
                   "capabilities")


# --- field checks (shared by the model and by load_manifest's all-problems pass) ----------------

_SKILL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def json_kind(value: object) -> str:
    """How a message names the JSON type of ``value`` ("a string", "an object", ...)."""
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def _check_skill_name(value: object) -> str | None:
    if not isinstance(value, str):
        return f"expected a string; got {json_kind(value)}"
    if not _SKILL_NAME.match(value):
        return ("expected 1-100 letters, digits, '_', '-' or '.', starting with a letter or digit "
                f"(no spaces, '@' or '/'); got {value!r}")
    return None


def _check_version(value: object) -> str | None:
    if not isinstance(value, str):
        return f"expected a semantic version string such as \"1.2.0\"; got {json_kind(value)}"
    try:
        SemVer.parse(value)
    except ValueError as exc:
        return str(exc)
    return None


def _check_entry_point(value: object) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return f"expected an instruction file, python:module:callable or a script name; got {json_kind(value)}"
    try:
        parse_entry_point(value)
    except ValueError as exc:
        return str(exc)
    return None


def _check_str_list(value: object, what: str) -> list[tuple[str, str]]:
    if not isinstance(value, list):
        return [("", f"expected a list of {what}; got {json_kind(value)}")]
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            problems.append((f"[{index}]", f"expected a non-empty string; got {json_kind(item)}"))
        elif item in seen:
            problems.append((f"[{index}]", f"{item!r} is listed twice"))
        else:
            seen.add(item)
    return problems


def _check_optional_str(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return None
    return f"expected a string; got {json_kind(value)}"


def _check_subagent_type(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in SUBAGENT_TYPES:
        return f"expected one of {', '.join(SUBAGENT_TYPES)}; got {value!r}"
    return None


def _check_bool(value: object) -> str | None:
    if isinstance(value, bool):
        return None
    return f"expected true or false; got {json_kind(value)} {value!r}"[:200]


def _approval_issues(capabilities: object, requires_approval: object,
                     approval_required: Iterable[str]) -> list[Issue]:
    """The hand-off protocol's approval rule: a capability that needs explicit approval
    needs ``requires_approval: true``. One rule for the model and for the all-problems pass."""
    if not isinstance(capabilities, list) or requires_approval is True:
        return []
    needing = set(approval_required)
    return [Issue(f"capabilities[{index}]",
                  f"capability {capability!r} needs explicit approval: set "
                  '"requires_approval": true in the manifest (the hand-off protocol\'s approval rules)')
            for index, capability in enumerate(capabilities)
            if isinstance(capability, str) and capability in needing]


# --- the model ------------------------------------------------------------------------------

class SkillManifest(BaseModel):
    """A validated manifest; schemas are normalized JSON Schema. Unknown keys are kept.

    The model enforces the approval rule itself: ``model_validate`` refuses what
    :func:`validate_manifest` refuses. The approval-required set is the protocol's default
    unless the validation context names another (``context={"approval_required": [...]}``)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    skill_name: str
    version: str
    entry_point: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    capabilities: list[str] = Field(default_factory=list)
    description: str | None = None
    subagent_type: str | None = None
    instructions: str | None = None
    requires_approval: bool = False
    tags: list[str] = Field(default_factory=list)
    # worked examples ({"input": ..., "output": ...}) the runner shows the model before
    # the task: at 135M-270M parameters, two of them turned 2-3 right answers of 6 into 6
    examples: list[dict[str, Any]] = Field(default_factory=list)
    # checks every run of the skill is held to, the person's own criteria besides: above
    # all, that the answer comes from the input (a copied example or an invented value fails)
    success_criteria: list[str | dict[str, Any]] = Field(default_factory=list)

    _notes: list[str] = PrivateAttr(default_factory=list)

    @field_validator("skill_name", mode="before")
    @classmethod
    def _valid_name(cls, value: object) -> object:
        return _raise_if(_check_skill_name(value), value)

    @field_validator("version", mode="before")
    @classmethod
    def _valid_version(cls, value: object) -> object:
        return _raise_if(_check_version(value), value)

    @field_validator("entry_point", mode="before")
    @classmethod
    def _valid_entry_point(cls, value: object) -> object:
        return _raise_if(_check_entry_point(value), value)

    @field_validator("input_schema", "output_schema", mode="before")
    @classmethod
    def _normalized(cls, value: object) -> object:
        normalized, issues = normalize_schema_issues(value, "schema")
        if issues:
            raise ValueError("; ".join(f"{issue.field}: {issue.message}" for issue in issues))
        return normalized

    @field_validator("capabilities", "tags", mode="before")
    @classmethod
    def _string_list(cls, value: object) -> object:
        problems = _check_str_list(value, "names")
        if problems:
            raise ValueError("; ".join(f"{where} {message}".strip() for where, message in problems))
        return value

    @field_validator("subagent_type", mode="before")
    @classmethod
    def _valid_subagent_type(cls, value: object) -> object:
        return _raise_if(_check_subagent_type(value), value)

    @field_validator("requires_approval", mode="before")
    @classmethod
    def _strict_bool(cls, value: object) -> object:
        return _raise_if(_check_bool(value), value)

    @model_validator(mode="after")
    def _approval_rule(self, info: ValidationInfo) -> SkillManifest:
        context = info.context if isinstance(info.context, dict) else {}
        issues = _approval_issues(self.capabilities, self.requires_approval,
                                  context.get("approval_required", APPROVAL_REQUIRED_CAPABILITIES))
        if issues:
            raise ValueError("; ".join(f"{issue.field}: {issue.message}" for issue in issues))
        return self

    @property
    def ref(self) -> str:
        return f"{self.skill_name}@{self.version}"

    @property
    def semver(self) -> SemVer:
        return SemVer.parse(self.version)

    @property
    def entry(self) -> EntryPoint:
        return parse_entry_point(self.entry_point)

    def input_issues(self, input_data: object) -> list[Issue]:
        """Where ``input_data`` breaks this skill's ``input_schema`` (none without one)."""
        if not self.input_schema:
            return []
        return validate_instance(self.input_schema, input_data, "input_data")

    @property
    def unknown_capabilities(self) -> list[str]:
        return [name for name in self.capabilities if name not in KNOWN_CAPABILITIES]

    @property
    def extra_keys(self) -> list[str]:
        return sorted(self.model_extra or {})

    @property
    def warnings(self) -> list[str]:
        out: list[str] = []
        for name in self.unknown_capabilities:
            out.append(f"capability {name!r} is not one Handoff knows; it is kept, but no tool "
                       "grants it")
        if self.entry.kind is EntryPointKind.SCRIPT:
            out.append(f"entry_point {self.entry_point!r} is a script; Handoff does not execute "
                       "bundled scripts, so this skill runs from its instructions/description "
                       "(use an .md instruction file or python:module:callable)")
        for key in self.extra_keys:
            out.append(f"unknown manifest key {key!r} is kept as is")
        return out + list(self._notes)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


def _raise_if(problem: str | None, value: object) -> object:
    if problem is not None:
        raise ValueError(problem)
    return value


@dataclass(frozen=True, slots=True)
class SkillBundle:
    """A loaded bundle: the manifest, every file in it (manifest.json included) and the
    instruction text from the entry point, when it is an instruction file."""

    manifest: SkillManifest
    files: dict[str, bytes] = field(default_factory=dict)
    instructions: str | None = None


# --- validation ---------------------------------------------------------------------------

def invalid_manifest(issues: list[Issue]) -> ProtocolError:
    """The one error every manifest and bundle problem is raised as, led by the first issue."""
    first = issues[0]
    more = f" (and {len(issues) - 1} more problem(s))" if len(issues) > 1 else ""
    return ProtocolError(ErrorCode.INVALID_MANIFEST,
                         f"the skill manifest is invalid: {first.field}: {first.message}{more}",
                         issues=issues)


def manifest_issues(data: Mapping[str, Any], *,
                    approval_required: Iterable[str] = APPROVAL_REQUIRED_CAPABILITIES,
                    python_allowlist: Iterable[str] = (),
                    bundle_files: Mapping[str, bytes] | None = None) -> list[Issue]:
    """Every problem with a manifest's data, in field order; empty when it is valid."""
    issues: list[Issue] = []
    for name in REQUIRED_FIELDS:
        if name not in data:
            issues.append(Issue(name, f"{name} is required in manifest.json"))
    checks = {"skill_name": _check_skill_name, "version": _check_version,
              "entry_point": _check_entry_point, "description": _check_optional_str,
              "instructions": _check_optional_str, "subagent_type": _check_subagent_type,
              "requires_approval": _check_bool}
    for name, check in checks.items():
        if name in data and (problem := check(data[name])) is not None:
            issues.append(Issue(name, problem))
    for name in ("input_schema", "output_schema"):
        if name in data:
            issues.extend(normalize_schema_issues(data[name], name)[1])
    for name in ("capabilities", "tags"):
        if name in data:
            issues.extend(Issue(f"{name}{where}", message)
                          for where, message in _check_str_list(data[name], "names"))
    issues.extend(_approval_issues(data.get("capabilities"), data.get("requires_approval"),
                                   approval_required))
    issues.extend(_entry_point_issues(data.get("entry_point"), python_allowlist, bundle_files))
    if "examples" in data:
        issues.extend(_example_issues(data["examples"], data.get("input_schema"),
                                      data.get("output_schema")))
    if "success_criteria" in data:
        issues.extend(_criteria_issues(data["success_criteria"]))
    return issues


def _criteria_issues(criteria: object) -> list[Issue]:
    """A skill's criteria are checkable: vague text would be reported unmet on every run."""
    if not isinstance(criteria, list):
        return [Issue("success_criteria", f"expected a list of criteria; got {json_kind(criteria)}")]
    issues: list[Issue] = []
    for index, criterion in enumerate(criteria):
        where = f"success_criteria[{index}]"
        problems = criterion_issues(criterion, where)
        if problems:
            issues.extend(problems)
        elif parse_criterion(criterion, where) is None:   # type: ignore[arg-type]
            issues.append(Issue(where, f"{criterion!r} is not machine-checkable; write it in a form "
                                       "the criteria grammar reads, or as a structured criterion"))
    return issues


MAX_EXAMPLES = 5


def _example_issues(examples: object, input_schema: object, output_schema: object) -> list[Issue]:
    """Examples are a short list of ``{"input", "output"}`` objects that the skill's own
    schemas accept: a wrong example teaches the model the wrong answer."""
    if not isinstance(examples, list):
        return [Issue("examples", f"expected a list of {{input, output}} objects; got {json_kind(examples)}")]
    if len(examples) > MAX_EXAMPLES:
        return [Issue("examples", f"at most {MAX_EXAMPLES} examples (each one lengthens every prompt); "
                                  f"got {len(examples)}")]
    issues: list[Issue] = []
    schemas = {"input": input_schema, "output": output_schema}
    for index, example in enumerate(examples):
        where = f"examples[{index}]"
        if not isinstance(example, dict) or not {"input", "output"} <= example.keys():
            issues.append(Issue(where, 'expected an object with "input" and "output"'))
            continue
        for part, schema in schemas.items():
            normalized, problems = normalize_schema_issues(schema, part)
            if problems or not normalized:
                continue  # the schema's own problems are reported on the schema
            issues.extend(validate_instance(normalized, example[part], f"{where}.{part}"))
    return issues


def _entry_point_issues(raw: object, python_allowlist: Iterable[str],
                        bundle_files: Mapping[str, bytes] | None) -> list[Issue]:
    if not isinstance(raw, str):
        return []
    try:
        entry = parse_entry_point(raw)
    except ValueError:
        return []  # already reported by the field check
    if entry.kind is EntryPointKind.PYTHON:
        allowed = list(python_allowlist)
        if entry.module is not None and not module_allowed(entry.module, allowed):
            listed = ", ".join(allowed) or "none"
            return [Issue("entry_point", f"python module {entry.module!r} is not in the python "
                                         f"skill allowlist (HANDOFF_PYTHON_SKILL_ALLOWLIST; allowed: "
                                         f"{listed})")]
    elif entry.kind is EntryPointKind.INSTRUCTIONS and bundle_files is not None and entry.path:
        if entry.path not in bundle_files:
            return [Issue("entry_point", f"instruction file {entry.path!r} is not in the bundle")]
        try:
            bundle_files[entry.path].decode("utf-8")
        except UnicodeDecodeError:
            return [Issue("entry_point", f"instruction file {entry.path!r} is not UTF-8 text")]
    return []


def validate_manifest(data: object, *,
                      approval_required: Iterable[str] = APPROVAL_REQUIRED_CAPABILITIES,
                      python_allowlist: Iterable[str] = (),
                      bundle_files: Mapping[str, bytes] | None = None) -> SkillManifest:
    """A SkillManifest from parsed JSON data, or ProtocolError listing every problem."""
    if not isinstance(data, dict):
        raise invalid_manifest([Issue("manifest", f"expected a JSON object; got {json_kind(data)}")])
    issues = manifest_issues(data, approval_required=approval_required,
                             python_allowlist=python_allowlist, bundle_files=bundle_files)
    if issues:
        raise invalid_manifest(issues)
    return SkillManifest.model_validate(data, context={"approval_required": frozenset(approval_required)})
