"""The evaluation suite: reference delegations run on a model and scored by their own
success criteria, each on two paths: the case's minimal packet, and the packet the
composer makes of it (:func:`composer_packet`: the skill's "Start a run" form filled with
the case's goal and input, as a person fills it, and read back as the composer saves it).

Each case in ``cases.json`` is a packet (a built-in skill with fixed ``input_data``, or one
of the protocol's roles with an inline contract) and its expectations: machine-checkable
criteria in the protocol's structured form, checked against the result once the run has
ended. They are kept out of the packet because the model is shown its success criteria
(and told in its self-correction turn which one failed): ``{"kind": "equals", "path":
"currency", "value": "EUR"}`` there would hand it the answer. A case is *passed* when the
run ends COMPLETE, its own criteria are met and so is every expectation; it is
*schema-valid* when the result's ``output_payload`` validates against the run's expected
output schema, right answer or not. Runs go through the real ``Runner`` (in
memory: no database), with skills read from ``skills/builtin`` the way the registry
resolves them (``name@version``, or ``name`` for the highest version). Expectations are
checked against the true values and may use the grounding criteria (``quoted_from``
against the case's input), so a copied worked example counts wrong. A case with
``expect_error`` passes only when the run ends with that error code (a missing source
must be said, not answered).

Truth and usefulness are counted apart. Each result is one of three:

- *right*: the run ended as the case expects (COMPLETE with every criterion and
  expectation met, or the expected error);
- *wrong but shown as all met*: a wrong value on a run whose criteria report reads "all
  met" (every criterion met and no output field left unchecked), which a person would
  trust; the target is 0;
- *visibly failed or sent for review*: anything else: a failed run, a run parked for a
  person's review (the eval parks review items instead of deciding them, and counts the
  value proposed), or a complete run whose report does not read "all met".

Cases marked ``"fresh": true`` are drawn from no example a skill or test uses (labels
that need the whole sentence, answers that are names, quotes inside longer texts); the
tables count them apart from the original sixteen.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django import forms
from jsonschema import Draft202012Validator

from delegations.composer.forms import (
    INPUT_FIELD,
    ComposerForm,
    initial_from_packet,
    new_initial,
    packet_from_form,
)
from delegations.protocol.adapters.base import ModelAdapter
from delegations.protocol.approvals import ApprovalDecision, ApprovalRequest, AutoGate, RunParked
from delegations.protocol.checkpoints import MemoryCheckpointStore
from delegations.protocol.criteria import CriterionResult, evaluate_criteria
from delegations.protocol.events import MemorySink
from delegations.protocol.lifecycle import RunState
from delegations.protocol.manifest import SkillBundle, SkillManifest, load_bundle
from delegations.protocol.manifest.versions import latest_version
from delegations.protocol.packet import parse_packet
from delegations.protocol.results import ResponsePackage
from delegations.protocol.runner import Runner, RunnerSettings, RunOutcome
from skills.models import Skill, SkillSource

ROOT = Path(__file__).resolve().parents[2]
CASES_FILE = Path(__file__).with_name("cases.json")
BUILTIN_SKILLS = ROOT / "skills" / "builtin"

AdapterFactory = Callable[[int], ModelAdapter]   # case number -> a fresh adapter
PATHS = ("minimal", "composer")


@dataclass(frozen=True, slots=True)
class EvalCase:
    id: str
    title: str
    packet: dict[str, Any]
    expect: list[dict[str, Any]]
    expect_error: str | None = None   # the error code the run must end with, e.g. a missing input
    fresh: bool = False               # drawn from no example a skill or test already uses


def load_cases(path: Path = CASES_FILE, only: Iterable[str] = ()) -> list[EvalCase]:
    """The reference delegations, in file order (``only``: just these ids)."""
    wanted = set(only)
    cases = [EvalCase(item["id"], item["title"], item["packet"], item["expect"], item.get("expect_error"),
                      bool(item.get("fresh")))
             for item in json.loads(path.read_text(encoding="utf-8"))]
    unknown = wanted - {case.id for case in cases}
    if unknown:
        raise ValueError(f"no eval case named {', '.join(sorted(unknown))}; "
                         f"the cases are {', '.join(case.id for case in cases)}")
    return [case for case in cases if not wanted or case.id in wanted]


class BuiltinSkills:
    """The built-in catalog as a runner skill lookup, resolved like the registry does."""

    def __init__(self, folder: Path = BUILTIN_SKILLS) -> None:
        self.by_ref: dict[str, SkillManifest] = {}
        self.bundles: dict[str, SkillBundle] = {}
        for bundle_dir in sorted(path for path in folder.iterdir() if path.is_dir()):
            bundle = load_bundle(bundle_dir)
            manifest = bundle.manifest
            if bundle.instructions and not manifest.instructions:
                manifest = manifest.model_copy(update={"instructions": bundle.instructions})
            self.by_ref[manifest.ref] = manifest
            self.bundles[manifest.ref] = bundle

    def pinned(self, ref: str) -> str | None:
        """``name@version`` for ``ref`` (``name`` alone: its highest version)."""
        if "@" in ref:
            return ref if ref in self.by_ref else None
        newest = latest_version([m.version for m in self.by_ref.values() if m.skill_name == ref])
        return f"{ref}@{newest}" if newest else None

    async def __call__(self, ref: str) -> SkillManifest | None:
        pinned = self.pinned(ref)
        return self.by_ref.get(pinned) if pinned else None

    def row(self, ref: str) -> Skill:
        """The skill as the registry holds it (unsaved): what the composer is opened with."""
        pinned = self.pinned(ref)
        if pinned is None:
            raise ValueError(f"no built-in skill {ref}")
        bundle = self.bundles[pinned]
        return Skill.from_bundle(bundle, raw_manifest=bundle.files.get("manifest.json", b"").decode(),
                                 source=SkillSource.BUILTIN)


def posted(form: forms.Form) -> dict[str, Any]:
    """What a browser posts for ``form`` as drawn (every field at its shown value)."""
    data: dict[str, Any] = {}
    for bound in form:
        value = bound.value()
        if isinstance(bound.field, forms.BooleanField):
            if value:
                data[bound.html_name] = "on"
        elif isinstance(value, list | tuple):
            data[bound.html_name] = [str(item) for item in value]
        elif value is not None:
            data[bound.html_name] = str(value)
    return data


def composer_packet(case: EvalCase, skills: BuiltinSkills) -> dict[str, Any]:
    """The packet the composer saves for ``case`` when a person starts it as the page
    offers (a skill's "Start a run with this skill", else the role) and fills in the
    case's goal and input and, without a skill, the rest of its contract; nothing else is
    touched."""
    packet = case.packet
    skill = skills.row(packet["skill"]) if packet.get("skill") else None
    if skill is not None:
        initial = {**new_initial(skill), "goal": packet.get("goal", ""), INPUT_FIELD: packet.get("input_data", {})}
    else:
        canonical = parse_packet(packet).to_dict()
        initial = {**new_initial(role=canonical.get("subagent_type")), **initial_from_packet(canonical)}
    shown = ComposerForm(skill=skill, initial=initial)
    data = {**posted(shown), **posted(shown.criteria.management_form)}
    for row in shown.criteria:
        data.update(posted(row))
    filled = ComposerForm(data, skill=skill)
    if not filled.is_valid():
        raise ValueError(f"{case.id}: the composer refuses the case's input: {filled.errors.as_text()}")
    return packet_from_form(filled.cleaned_data)


RIGHT, WRONG_ALL_MET, VISIBLE = "right", "wrong but shown as all met", "visibly failed or sent for review"


class ReviewParkingGate(AutoGate):
    """The eval's gate: decides like :class:`AutoGate`, except that an item asking a person
    to review a value parks the run, so the eval counts it as sent for review (with the
    value it proposed) instead of deciding it for nobody."""

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        if str(request.kind) == "review":
            self.asked.append(request)
            raise RunParked(request)
        return await super().decide(request)


def shows_all_met(report: dict[str, Any] | None) -> bool:
    """Whether a criteria report reads "all met" to a person: every criterion met and no
    output field that no criterion checks."""
    return bool(report) and bool(report.get("all_met")) and not report.get("fields_unchecked")


@dataclass(slots=True)
class CaseResult:
    case: EvalCase
    path: str
    state: str
    passed: bool
    schema_valid: bool
    output_tokens: int
    model_seconds: float
    wall_seconds: float
    payload: Any = None
    why: str = ""           # what went wrong, in one line, when not passed
    verdict: str = VISIBLE  # RIGHT, WRONG_ALL_MET or VISIBLE
    reviewed: bool = False  # parked for a person's review
    labels: dict[str, Any] = field(default_factory=dict)   # the adapter's label scores, by field


@dataclass(slots=True)
class ModelReport:
    model: str
    path: str = "minimal"
    results: list[CaseResult] = field(default_factory=list)
    load_seconds: float | None = None

    @property
    def passed(self) -> int:
        return sum(result.passed for result in self.results)

    @property
    def schema_valid(self) -> int:
        return sum(result.schema_valid for result in self.results)

    def count(self, verdict: str, *, fresh: bool | None = None) -> int:
        return sum(result.verdict == verdict for result in self.results
                   if fresh is None or result.case.fresh == fresh)

    def total(self, *, fresh: bool | None = None) -> int:
        return sum(1 for result in self.results if fresh is None or result.case.fresh == fresh)

    @property
    def reviewed(self) -> int:
        return sum(result.reviewed for result in self.results)

    @property
    def tokens_per_second(self) -> float:
        seconds = sum(result.model_seconds for result in self.results)
        return sum(result.output_tokens for result in self.results) / seconds if seconds else 0.0

    @property
    def median_wall_seconds(self) -> float:
        return statistics.median(r.wall_seconds for r in self.results) if self.results else 0.0


def _why(outcome: RunOutcome, unmet: list[CriterionResult]) -> str:
    if outcome.parked is not None:
        return f"sent for review: {outcome.parked.title}"
    if outcome.state is not RunState.COMPLETE:
        error = outcome.error or {}
        return f"{outcome.state}: {error.get('message', '')}"[:200]
    return "; ".join(item.detail for item in unmet)[:200]


async def run_case(case: EvalCase, adapter: ModelAdapter, skills: BuiltinSkills,
                   workspace: Path, path: str = "minimal") -> CaseResult:
    sink = MemorySink()
    runner = Runner(sink=sink, gate=ReviewParkingGate(), checkpoints=MemoryCheckpointStore(),
                    settings=RunnerSettings(token_key=b"eval-token-key-0123456",
                                            workspace_root=workspace),
                    skills=skills)
    packet = composer_packet(case, skills) if path == "composer" else case.packet
    started = time.perf_counter()
    outcome = await runner.start(packet, adapter=adapter)
    wall = time.perf_counter() - started
    calls = [event.data for event in sink.of_type("model_call")]
    result = outcome.result
    schema = await _expected_schema(case, skills)
    schema_valid = (result is not None and schema is not None
                    and Draft202012Validator(schema).is_valid(result.output_payload))
    unmet: list[CriterionResult] = []
    if case.expect_error is not None:
        code = (outcome.error or {}).get("code")
        passed = outcome.state is not RunState.COMPLETE and code == case.expect_error
        why = "" if passed else f"{outcome.state} {code or ''}: expected {case.expect_error}, " \
                                f"got {_short(result.output_payload if result else None)}"
    else:
        judged = result
        if judged is None and outcome.parked is not None:
            judged = _proposed(outcome.parked)   # the value a person is asked to review
        if judged is not None:
            unmet = [item for item in evaluate_criteria(judged, list(case.expect), schema,
                                                        case.packet.get("input_data") or {}).items
                     if not item.met]
        passed = (outcome.state is RunState.COMPLETE and not unmet
                  and bool((outcome.criteria_report or {}).get("all_met", True)))
        why = "" if passed else _why(outcome, unmet)
        if outcome.parked is not None:
            why += " (the proposed value is " + ("right)" if judged is not None and not unmet else "wrong)")
    shown = outcome.state is RunState.COMPLETE and shows_all_met(outcome.criteria_report)
    verdict = RIGHT if passed else WRONG_ALL_MET if shown else VISIBLE
    scored = result if result is not None else _proposed(outcome.parked) if outcome.parked else None
    labels = dict((scored.metrics.get("labels") or {}) if scored is not None else {})
    return CaseResult(
        case=case, path=path, state=str(outcome.state), passed=passed, schema_valid=schema_valid,
        output_tokens=sum(int(call.get("output_tokens") or 0) for call in calls),
        model_seconds=sum(float(call.get("duration_ms") or 0) for call in calls) / 1000,
        wall_seconds=wall, payload=result.output_payload if result is not None else None,
        why=why[:200], verdict=verdict, reviewed=outcome.parked is not None, labels=labels)


def _proposed(request: ApprovalRequest) -> ResponsePackage | None:
    """The result a review item proposes (its payload's ``result``), if it holds one."""
    proposed = request.payload.get("result") if isinstance(request.payload, dict) else None
    try:
        return ResponsePackage.model_validate(proposed) if isinstance(proposed, dict) else None
    except ValueError:
        return None


def _short(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)[:80]


async def _expected_schema(case: EvalCase, skills: BuiltinSkills) -> dict[str, Any] | None:
    """The output schema the run was held to: the packet's, else its skill's."""
    if case.packet.get("expected_output_schema"):
        return dict(case.packet["expected_output_schema"])
    manifest = await skills(case.packet["skill"]) if case.packet.get("skill") else None
    return dict(manifest.output_schema) if manifest is not None else None


async def evaluate(model: str, make_adapter: AdapterFactory, cases: list[EvalCase], *,
                   path: str = "minimal",
                   on_result: Callable[[CaseResult], None] | None = None) -> ModelReport:
    """Every case on one model and one path, one after the other (case ``i`` gets adapter ``i``)."""
    skills = BuiltinSkills()
    report = ModelReport(model, path)
    with tempfile.TemporaryDirectory(prefix="handoff-eval-") as folder:
        for number, case in enumerate(cases):
            result = await run_case(case, make_adapter(number), skills, Path(folder), path)
            report.results.append(result)
            if on_result is not None:
                on_result(result)
    return report


def summary_table(reports: list[ModelReport]) -> str:
    """The per-model, per-path table (Markdown): right values on the original cases and on
    the fresh ones, wrong values shown as all met, the rest (failed visibly or sent for
    review, with how many went to review), schema-valid answers, speed."""
    lines = ["| model | path | right (original) | right (fresh) | wrong but shown as all met | "
             "visibly failed or sent for review | schema-valid | tokens/s | median s per case |",
             "|---|---|---|---|---|---|---|---|---|"]
    for report in reports:
        total = len(report.results)
        original, fresh = report.total(fresh=False), report.total(fresh=True)
        visible = report.count(VISIBLE)
        lines.append(
            f"| `{report.model}` | {report.path} | **{report.count(RIGHT, fresh=False)}/{original}** | "
            f"**{report.count(RIGHT, fresh=True)}/{fresh}** | {report.count(WRONG_ALL_MET)} | "
            f"{visible} ({report.reviewed} for review) | {report.schema_valid}/{total} | "
            f"{report.tokens_per_second:.0f} | {report.median_wall_seconds:.2f} s |")
    return "\n".join(lines)


def case_table(reports: list[ModelReport]) -> str:
    """Which model got which case right (Markdown): ✓ right, ✗ wrong but shown as all met,
    ? sent for review, · visibly failed."""
    header = "| case | " + " | ".join(f"`{r.model}` {r.path}" for r in reports) + " |"
    lines = [header, "|---|" + "---|" * len(reports)]
    if not reports:
        return "\n".join(lines)
    for index, result in enumerate(reports[0].results):
        marks = []
        for report in reports:
            one = report.results[index]
            marks.append("✓" if one.verdict == RIGHT else "✗" if one.verdict == WRONG_ALL_MET
                         else "?" if one.reviewed else "·")
        fresh = " (fresh)" if result.case.fresh else ""
        lines.append(f"| {result.case.id}{fresh} | " + " | ".join(marks) + " |")
    return "\n".join(lines)


CALIBRATION_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)


def calibration_table(reports: list[ModelReport]) -> str:
    """How many scored labels with an expected value (an ``equals`` expectation) each
    calibration weight would choose right, per model and path (Markdown): the measurement
    the local adapter's ``CALIBRATION_WEIGHT`` is chosen on. Exact for the label itself:
    the label is chosen before the answer is decoded, from the probabilities recorded."""
    lines = ["| model | path | labels | " + " | ".join(f"weight {w:g}" for w in CALIBRATION_WEIGHTS) + " |",
             "|---|---|---|" + "---|" * len(CALIBRATION_WEIGHTS)]
    for report in reports:
        right = [0] * len(CALIBRATION_WEIGHTS)
        total = 0
        for result in report.results:
            for expectation in result.case.expect:
                score = result.labels.get(str(expectation.get("path")))
                if expectation.get("kind") != "equals" or not isinstance(score, dict) or not score.get("scores"):
                    continue
                total += 1
                for index, weight in enumerate(CALIBRATION_WEIGHTS):
                    right[index] += _chosen(score["scores"], weight) == expectation.get("value")
        lines.append(f"| `{report.model}` | {report.path} | {total} | " + " | ".join(map(str, right)) + " |")
    return "\n".join(lines)


def _chosen(scores: list[dict[str, Any]], weight: float) -> Any:
    def calibrated(entry: dict[str, Any]) -> float:
        prior = max(float(entry.get("prior", 1.0)), 1e-4)
        return float(entry["raw_probability"]) / prior ** weight
    return max(scores, key=calibrated)["value"]
