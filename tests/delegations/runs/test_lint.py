"""A run is linted as it will run: the skill it names merged in, the server's limits; so
``run_create`` refuses what the runner would refuse, with the runner's own finding."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from delegations.protocol.adapters.scripted import ScriptedAdapter
from delegations.protocol.approvals import AutoGate
from delegations.protocol.checkpoints import MemoryCheckpointStore
from delegations.protocol.events import MemorySink
from delegations.protocol.manifest import SkillManifest
from delegations.protocol.runner import Runner
from delegations.runs.runner_setup import runner_settings
from delegations.runs.workflows import run_create
from tests.delegations import scripts

pytestmark = [pytest.mark.django_db]


def executor_skill_packet() -> dict[str, Any]:
    """A packet that lints clean alone, naming a skill that makes it an executor: with the
    skill merged it is an executor with no success criteria (CRITERIA_MISSING, an error)."""
    packet = scripts.skill_packet("caching")
    del packet["subagent_type"], packet["success_criteria"]
    return packet


def runner_verdict(packet: dict[str, Any], skill: SkillManifest) -> tuple[dict[str, Any] | None, list[str]]:
    """What the worker's runner decides for ``packet``: its error and its error codes."""
    async def resolve(ref: str) -> SkillManifest:
        return skill

    runner = Runner(sink=MemorySink(), gate=AutoGate(), checkpoints=MemoryCheckpointStore(),
                    settings=runner_settings(), skills=resolve)
    outcome = asyncio.run(runner.start(packet, adapter=ScriptedAdapter(scripts.leaf())))
    assert outcome.state == "REJECTED", outcome.state
    return outcome.error, [f.code for f in outcome.findings if f.severity == "error"]


def test_a_packet_whose_skill_makes_its_contract_an_error_is_rejected_with_the_runners_finding(
        composer: Any) -> None:
    skill = scripts.add_caching_skill("1.0.0", subagent_type="executor")
    packet = executor_skill_packet()
    error, codes = runner_verdict(packet, skill.to_manifest())
    assert codes == ["CRITERIA_MISSING"]

    run = run_create(packet=packet, adapter="scripted", config=scripts.leaf(), owner=composer)

    assert run.state == "REJECTED"
    assert run.error is not None and error is not None
    assert run.error["code"] == error["code"] and run.error["message"] == error["message"]
    assert [finding["code"] for finding in run.error["findings"]] == codes
    assert run.packet["skill"] == "caching@1.0.0"


@pytest.mark.parametrize("input_data", [{}, {"review": ""}])
def test_a_skill_whose_input_is_refused_still_brings_its_criteria_and_schema_to_the_lint(
        input_data: dict[str, Any]) -> None:
    """A blank composer form for a skill was told its success criteria and output schema
    were missing, beside "Checked on every run of review-sentiment": the skill was merged
    only once its input passed."""
    from django.core.management import call_command

    from delegations.runs.lint import lint_as_run

    call_command("load_builtin_skills", verbosity=0)
    blank = lint_as_run({"skill": "review-sentiment@1.2.0", "goal": "Classify it.", "input_data": input_data})
    filled = lint_as_run({"skill": "review-sentiment@1.2.0", "goal": "Classify it.",
                          "input_data": {"review": "The lamp is bright."}})
    assert not blank.runnable and "review" in blank.problems[0]["message"]   # the input, said once
    assert [f["code"] for f in blank.findings] == [f["code"] for f in filled.findings]
    assert "COMPLETION_CRITERIA_MISSING" not in {f["code"] for f in blank.findings}
