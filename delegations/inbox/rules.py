"""What an approval rule matches, checked field by field; and which rule decides an item.

A rule's ``match`` is JSON a person reads and edits (the builder page writes it), every
field optional (absent: anything):

- ``kinds``: item kinds (``capability``, ``capability_request``, ``budget``, ``invalid_result``,
  ``review``)
- ``capabilities``, ``tools``: the capability asked for, the tool a call names
- ``arguments``: matchers on the tool call's arguments (for a review item: ``field``,
  ``value`` and ``probability``, the value the model proposes and its probability, so
  "confirm positive reviews above 0.9" is ``value equals "positive"`` and ``probability``
  ``range min 0.9``), each ``{"name", "op", ...}``:
  ``equals`` (``value``), ``host`` (``value``: ``prices.example.com`` or ``*.example.com``,
  the URL's host for ``http_get``), ``under`` (``value``: a folder; the path lies in it),
  ``range`` (``min`` and/or ``max``: a number such as an amount)
- ``skill``: ``{"name", "versions"}`` (versions: a range such as ``>=1.2,<2``)
- ``owners``, ``groups``: the username or a group of the person whose run tree asks
- ``depth``: ``{"min", "max"}`` of the asking run in its tree; ``root_skill``: the root's skill name
- ``budget_left``: ``{"axis", "min"}``: at least this much left on that axis (the asking run
  and every ancestor)
- ``expression``: a CEL expression (``cel-python``, never Python's eval) over the same facts:
  ``kind``, ``capability``, ``tool``, ``arguments``, ``skill``, ``skill_version``, ``owner``,
  ``groups``, ``depth``, ``root_skill``, ``budget_left``; e.g.
  ``tool == "pay" && arguments.amount < 0.01``. It matches when it is true; an error
  while evaluating (a missing argument) does not match.

Conflicts are plain: a reject rule wins over a two-approver rule, which wins over an
approve rule; among rules of the same effect the oldest decides and is named in the audit.
"""

from __future__ import annotations

import functools
import math
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import celpy  # type: ignore[import-untyped]
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from delegations.models import ApprovalRule, RuleEffect
from delegations.protocol.approvals import ApprovalKind
from delegations.protocol.capabilities import APPROVAL_REQUIRED_CAPABILITIES, KNOWN_CAPABILITIES

RULE_KINDS = (ApprovalKind.CAPABILITY, ApprovalKind.CAPABILITY_REQUEST, ApprovalKind.BUDGET,
              ApprovalKind.INVALID_RESULT, ApprovalKind.REVIEW)
ARGUMENT_OPS = ("equals", "host", "under", "range")
BUDGET_AXES = ("max_model_calls", "max_tokens", "max_cost_usd")
MATCH_FIELDS = ("kinds", "capabilities", "tools", "arguments", "skill", "owners", "groups", "depth",
                "root_skill", "budget_left", "expression")
EFFECT_ORDER = (RuleEffect.REJECT, RuleEffect.TWO_APPROVERS, RuleEffect.APPROVE)
_HOST_PATTERN = re.compile(r"^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")

Problems = dict[str, list[str]]


@dataclass(frozen=True, slots=True)
class ItemFacts:
    """What a rule can see of an item (read once per item, from its run and tree)."""

    kind: str
    capability: str = ""
    tool: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    skill: str = ""
    skill_version: str = ""
    owner: str = ""
    groups: frozenset[str] = frozenset()
    depth: int = 0
    root_skill: str = ""
    budget_left: dict[str, float] = field(default_factory=dict)


def review_facts(payload: dict[str, Any]) -> dict[str, Any]:
    """What a rule reads of a review item as its "arguments": the (first) field under
    review, the value the model proposes and that value's probability."""
    fields = payload.get("fields") if isinstance(payload.get("fields"), list) else []
    first = fields[0] if fields and isinstance(fields[0], dict) else {}
    return {"field": first.get("field"), "value": first.get("proposed"),
            "probability": first.get("probability")}


def split_skill(reference: str) -> tuple[str, str]:
    """``name@version`` as (name, version); a bare name has no version."""
    name, _, version = (reference or "").partition("@")
    return name, version


# -- checking a rule before it is saved ---------------------------------------------------

def rule_problems(*, match: Any, effect: str, comment: str, matches_everything: bool) -> Problems:
    """Every reason the rule cannot be saved, on the field it concerns (empty: it can)."""
    problems: Problems = {}

    def add(where: str, message: str) -> None:
        problems.setdefault(where, []).append(message)

    if effect not in RuleEffect.values:
        add("effect", f"Choose one of {', '.join(RuleEffect.values)}.")
    if effect == RuleEffect.REJECT and not str(comment).strip():
        add("comment", "A reject rule needs the comment the subagent is told.")
    if not isinstance(match, dict):
        add("match", "Expected a JSON object of matchers.")
        return problems
    for name in match:
        if name not in MATCH_FIELDS:
            add(f"match.{name}", f"Unknown matcher; known: {', '.join(MATCH_FIELDS)}.")
    _check_names(match, "kinds", "kind", [str(k) for k in RULE_KINDS], add)
    _check_names(match, "capabilities", "capability", sorted(KNOWN_CAPABILITIES), add)
    _check_strings(match, ("tools", "owners", "groups"), add)
    _check_arguments(match.get("arguments"), add)
    _check_skill(match.get("skill"), add)
    _check_bounds(match.get("depth"), "match.depth", add)
    if "root_skill" in match and not (isinstance(match["root_skill"], str) and match["root_skill"]):
        add("match.root_skill", "Expected a skill name.")
    _check_budget_left(match.get("budget_left"), add)
    if "expression" in match:
        problem = expression_problem(match["expression"])
        if problem:
            add("match.expression", problem)
    if not problems and effect == RuleEffect.APPROVE and approves_everything(match) and not matches_everything:
        add("matches_everything", "This rule approves an approval-required capability for every "
                                  "skill and host; confirm 'everything' to save it.")
    return problems


def approves_everything(match: dict[str, Any]) -> bool:
    """Whether an approve rule with ``match`` lets an approval-required capability through
    for every skill and every host (nothing narrows it)."""
    kinds = match.get("kinds") or [str(k) for k in RULE_KINDS]
    capabilities = match.get("capabilities") or sorted(APPROVAL_REQUIRED_CAPABILITIES)
    touches_approval = (ApprovalKind.CAPABILITY in kinds or ApprovalKind.CAPABILITY_REQUEST in kinds)
    narrowed = bool(match.get("skill") or match.get("arguments") or match.get("root_skill")
                    or match.get("expression"))
    return touches_approval and bool(set(capabilities) & APPROVAL_REQUIRED_CAPABILITIES) and not narrowed


def _check_names(match: dict[str, Any], name: str, one: str, known: Sequence[str], add: Any) -> None:
    values = match.get(name)
    if values is None:
        return
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        add(f"match.{name}", "Expected a list of names.")
        return
    for value in values:
        if value not in known:
            add(f"match.{name}", f"Unknown {one} {value!r}; known: {', '.join(known)}.")


def _check_strings(match: dict[str, Any], names: Iterable[str], add: Any) -> None:
    for name in names:
        values = match.get(name)
        if values is not None and (not isinstance(values, list)
                                   or not all(isinstance(v, str) and v for v in values)):
            add(f"match.{name}", "Expected a list of names.")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_bounds(bounds: Any, where: str, add: Any) -> None:
    if bounds is None:
        return
    if not isinstance(bounds, dict) or not bounds or set(bounds) - {"min", "max"}:
        add(where, "Expected {\"min\": number, \"max\": number} (either may be left out).")
        return
    if not all(_is_number(v) for v in bounds.values()):
        add(where, "min and max are numbers.")
    elif "min" in bounds and "max" in bounds and bounds["min"] > bounds["max"]:
        add(where, f"min {bounds['min']} is above max {bounds['max']}: nothing can match.")


def _check_arguments(matchers: Any, add: Any) -> None:
    if matchers is None:
        return
    if not isinstance(matchers, list):
        add("match.arguments", "Expected a list of argument matchers.")
        return
    for index, matcher in enumerate(matchers):
        where = f"match.arguments[{index}]"
        if not isinstance(matcher, dict) or not isinstance(matcher.get("name"), str) or not matcher["name"]:
            add(where, "Each matcher names the argument it reads ({\"name\", \"op\", ...}).")
            continue
        op, value = matcher.get("op"), matcher.get("value")
        if op not in ARGUMENT_OPS:
            add(f"{where}.op", f"Unknown op {op!r}; choose {', '.join(ARGUMENT_OPS)}.")
        elif op == "host" and not (isinstance(value, str) and _HOST_PATTERN.match(value)):
            add(f"{where}.value", f"{value!r} is not a host pattern: write prices.example.com "
                                  f"or *.example.com (lower case, no scheme or path).")
        elif op == "under" and not (isinstance(value, str) and value.strip()
                                    and not _escapes(value)):
            add(f"{where}.value", f"{value!r} is not a folder inside the workspace.")
        elif op == "range":
            _check_bounds({k: matcher[k] for k in ("min", "max") if k in matcher}, f"{where}", add)


def _escapes(folder: str) -> bool:
    normal = posixpath.normpath(folder.strip())
    return normal == ".." or normal.startswith("../") or normal.startswith("/..")


def _check_skill(skill: Any, add: Any) -> None:
    if skill is None:
        return
    if not isinstance(skill, dict) or not isinstance(skill.get("name"), str) or not skill["name"]:
        add("match.skill.name", "Expected the skill's name.")
        return
    versions = skill.get("versions")
    if versions:
        try:
            SpecifierSet(str(versions))
        except InvalidSpecifier:
            add("match.skill.versions", f"{versions!r} is not a version range: write e.g. >=1.2,<2.")


def _check_budget_left(budget: Any, add: Any) -> None:
    if budget is None:
        return
    if not isinstance(budget, dict) or budget.get("axis") not in BUDGET_AXES or not _is_number(budget.get("min")):
        add("match.budget_left", f"Expected {{\"axis\": one of {', '.join(BUDGET_AXES)}, \"min\": number}}.")


def expression_problem(expression: Any) -> str | None:
    """Why ``expression`` is not a CEL expression a rule can use, else None."""
    if not isinstance(expression, str) or not expression.strip():
        return "Expected a CEL expression, e.g. tool == \"http_get\" && depth <= 1."
    try:
        _program(expression)
    except celpy.CELParseError as error:
        return f"The expression does not compile: {str(error).splitlines()[0]}"
    tree = celpy.Environment().compile(expression)
    unknown = sorted(_called(tree) - _CEL_FUNCTIONS)
    if unknown:
        return (f"The expression calls {', '.join(unknown)}, which CEL does not have (it could never "
                f"match); use CEL's own, e.g. size, contains, startsWith, endsWith, matches.")
    unknown = sorted(_names(tree) - set(FACT_NAMES))
    if unknown:
        return (f"The expression reads {', '.join(unknown)}, which no item has (it could never match); "
                f"an item has {', '.join(FACT_NAMES)}.")
    return None


# what CEL can call: its standard functions and the macros it expands (has, all, exists, ...)
_CEL_FUNCTIONS = frozenset(celpy.evaluation.base_functions) | {
    "has", "all", "exists", "exists_one", "map", "filter"}


def _called(tree: Any) -> set[str]:
    """The names a compiled expression calls, as functions (``f(x)``) or methods (``x.f()``)."""
    return {str(token) for node in tree.iter_subtrees() if node.data in ("ident_arg", "member_dot_arg")
            for token in node.children if isinstance(token, str)}   # a name (lark's Token is a str)


_BINDING_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})


def _names(tree: Any) -> set[str]:
    """The variables a compiled expression reads, less those its macros bind (``i`` in
    ``arguments.items.exists(i, i > 1)``)."""
    read = {str(node.children[0]) for node in tree.iter_subtrees() if node.data == "ident"}
    bound = {str(ident.children[0]) for node in tree.iter_subtrees()
             if node.data == "member_dot_arg" and len(node.children) == 3 and str(node.children[1]) in _BINDING_MACROS
             for ident in node.children[2].children[0].iter_subtrees() if ident.data == "ident"}
    return read - bound


# what an expression may read of an item: these ItemFacts, by the same names
FACT_NAMES = ("kind", "capability", "tool", "arguments", "skill", "skill_version", "owner", "groups",
              "depth", "root_skill", "budget_left")


@functools.lru_cache(maxsize=512)
def _program(expression: str) -> Any:
    """The compiled expression (compiling costs far more than evaluating; rules are few)."""
    environment = celpy.Environment()
    return environment.program(environment.compile(expression))


def _expression_holds(expression: str, facts: ItemFacts) -> bool:
    read = {name: getattr(facts, name) for name in FACT_NAMES}
    activation = celpy.json_to_cel({**read, "groups": sorted(facts.groups)})
    try:
        result = _program(expression).evaluate(activation)
    except (celpy.CELEvalError, celpy.CELParseError, TypeError, ValueError):
        return False
    return isinstance(result, celpy.celtypes.BoolType) and bool(result)


# -- matching -----------------------------------------------------------------------------

def matched_inputs(match: dict[str, Any], facts: ItemFacts) -> dict[str, Any] | None:
    """The item's inputs the rule matched (for the audit), or None when it does not match."""
    found: dict[str, Any] = {}
    for name, one, value in (("kinds", "kind", facts.kind), ("capabilities", "capability", facts.capability),
                             ("tools", "tool", facts.tool), ("owners", "owner", facts.owner)):
        if match.get(name):
            if value not in match[name]:
                return None
            found[one] = value
    if match.get("groups"):
        shared = sorted(facts.groups & set(match["groups"]))
        if not shared:
            return None
        found["groups"] = shared
    for matcher in match.get("arguments") or ():
        argument = facts.arguments.get(matcher["name"])
        if not _argument_matches(matcher, argument):
            return None
        found.setdefault("arguments", {})[matcher["name"]] = argument
    skill = match.get("skill")
    if skill:
        if facts.skill != skill["name"] or not _version_in(facts.skill_version, skill.get("versions")):
            return None
        found["skill"] = f"{facts.skill}@{facts.skill_version}" if facts.skill_version else facts.skill
    if match.get("depth") is not None:
        if not _within(facts.depth, match["depth"]):
            return None
        found["depth"] = facts.depth
    if match.get("root_skill"):
        if facts.root_skill != match["root_skill"]:
            return None
        found["root_skill"] = facts.root_skill
    expression = match.get("expression")
    if expression:
        if not _expression_holds(expression, facts):
            return None
        found["expression"] = expression
    budget = match.get("budget_left")
    if budget:
        left = facts.budget_left.get(budget["axis"])
        if left is not None and left < budget["min"]:
            return None
        found["budget_left"] = {budget["axis"]: left}
    return found


def _within(value: Any, bounds: dict[str, Any]) -> bool:
    if not _is_number(value):
        return False
    return bounds.get("min", -math.inf) <= value <= bounds.get("max", math.inf)


def _argument_matches(matcher: dict[str, Any], argument: Any) -> bool:
    op = matcher["op"]
    if op == "equals":
        return bool(argument == matcher.get("value"))
    if op == "range":
        return _within(argument, matcher)
    if not isinstance(argument, str):
        return False
    if op == "host":
        return _host_matches(matcher["value"], argument)
    return _path_under(argument, matcher["value"])


def _host_matches(pattern: str, url: str) -> bool:
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not host:
        return False
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    return host == pattern


def _path_under(path: str, folder: str) -> bool:
    normal = posixpath.normpath(path.strip().lstrip("/"))
    base = posixpath.normpath(folder.strip().lstrip("/"))
    if normal == ".." or normal.startswith("../"):
        return False
    return base == "." or normal == base or normal.startswith(base + "/")


def _version_in(version: str, versions: str | None) -> bool:
    if not versions:
        return True
    try:
        return Version(version) in SpecifierSet(versions)
    except InvalidVersion:
        return False


def deciding_rule(rules: Iterable[ApprovalRule], facts: ItemFacts) -> tuple[ApprovalRule, dict[str, Any]] | None:
    """The rule that decides an item with ``facts`` and what it matched: reject before two
    approvers before approve, the oldest of equal effect; None when no rule matches."""
    first: dict[str, tuple[ApprovalRule, dict[str, Any]]] = {}
    for rule in rules:
        if rule.effect in first or not isinstance(rule.match, dict):
            continue
        found = matched_inputs(rule.match, facts)
        if found is not None:
            first[rule.effect] = (rule, found)
    for effect in EFFECT_ORDER:
        if effect in first:
            return first[effect]
    return None
