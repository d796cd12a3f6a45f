"""The newcomer's path on the real default model: open a built-in skill, take the run form
as it is prefilled, start it on the local adapter, and read a structured result on the run
page."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from django.core.management import call_command

from delegations.models import Run
from skills.models import Skill

pytestmark = [pytest.mark.local_model, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def default_model() -> None:
    from delegations.protocol.adapters.local_models import DEFAULT_LOCAL_MODEL
    from tests.protocol.conftest import local_model_or_skip

    local_model_or_skip(DEFAULT_LOCAL_MODEL)


# what must come back exactly; the rest of the payload is held to the skill's schema (a
# 270M model's label for a review is not something to pin a test on: make eval scores it)
@pytest.mark.parametrize(("skill", "expected"), [
    ("price-research", {"price": 189.84, "currency": "USD"}),
    ("review-sentiment", {}),
    ("context-answer", {}),
])
def test_a_built_in_skill_started_from_its_prefilled_form_hands_back_a_structured_result(
        composer_client: Any, composer: Any, immediate_tasks: None, default_model: None,
        skill: str, expected: dict[str, Any]) -> None:
    call_command("load_builtin_skills", verbosity=0)
    form = composer_client.get(f"/runs/new/?skill={skill}").context["form"]
    packet = json.loads(form.initial["packet"]) if isinstance(form.initial["packet"], str) \
        else form.initial["packet"]
    response = composer_client.post("/runs/new/", {
        "packet": json.dumps(packet), "adapter": "local", "adapter_config": ""})
    run = Run.objects.get(owner=composer)
    assert response.status_code == 302, response.content.decode()[:500]
    assert run.state == "COMPLETE", run.error
    payload = run.result["output_payload"]
    jsonschema.validate(payload, Skill.objects.get(name=skill, version=run.skill.split("@")[1]).output_schema)
    assert {key: payload.get(key) for key in expected} == expected
    page = composer_client.get(f"/runs/{run.pk}/").content.decode()
    assert run.skill.startswith(f"{skill}@") and run.skill in page
    for value in expected.values():
        assert json.dumps(value) in page or str(value) in page


def test_a_who_question_is_answered_with_the_name_not_the_year_beside_it(
        composer_client: Any, composer: Any, immediate_tasks: None, default_model: None) -> None:
    """The answer is one of the passage's spans, scored on the skill's worked examples; left
    to write it freely, Gemma 3 270M answered such questions with the year."""
    call_command("load_builtin_skills", verbosity=0)
    form = composer_client.get("/runs/new/?skill=context-answer").context["form"]
    packet = json.loads(form.initial["packet"]) if isinstance(form.initial["packet"], str) \
        else form.initial["packet"]
    packet["input_data"] = {
        "question": "Who restored the chapel at Brekke?",
        "context": "The chapel at Brekke dates from 1650. It was restored in 1988 by the architect "
                   "Sofie Lind. It seats 80 people."}
    composer_client.post("/runs/new/", {"packet": json.dumps(packet), "adapter": "local", "adapter_config": ""})
    run = Run.objects.get(owner=composer)
    assert run.skill == "context-answer@1.2.0"
    assert run.state == "COMPLETE", run.error
    assert run.result["output_payload"]["answer"] == "Sofie Lind"
    assert run.result["output_payload"]["found"] is True
