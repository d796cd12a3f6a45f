"""The composer changes nothing a person typed without a word: a text past its limit is
refused with the limit named (never cut by the browser), the JSON view keeps a value's
type, each problem is one error named by its place in the packet, and saving an unchanged
form keeps its version."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.urls import reverse

from delegations.composer.services import delegation_create
from delegations.models import Delegation, Run
from delegations.runs.lint import lint_as_run
from skills.models import Skill
from tests.delegations import scripts
from tests.delegations.composer.test_pages import FILL, LINT, NEW, form_data, page
from tests.skills.factories import add_skill

pytestmark = [pytest.mark.django_db]

REVIEW = "The sound is warm and the battery lasts. " * 62   # 2,542 characters


@pytest.fixture
def skill(db: Any) -> Skill:
    return add_skill("review-check", "1.0.0", instructions="# Review check\n\nLabel the review.\n",
                     input_schema={"type": "object", "required": ["review"], "properties": {
                         "review": {"type": "string", "maxLength": 2000}}},
                     output_schema={"label": "string"})


def errors_in_panel(response: Any) -> list[tuple[str, str]]:
    """(field, message) of every error the check panel lists."""
    found = re.findall(r'<li class="finding error">\s*<a [^>]*>(.*?)</a>.*?<span class="finding-message">(.*?)</span>',
                       response.content.decode(), re.S)
    return [(field, message) for field, message in found]


def test_a_text_past_its_limit_is_refused_with_the_limit_named_and_kept_whole(composer_client, skill):
    start = composer_client.get(f"{NEW}?skill=review-check")
    field = re.search(r"<textarea name=\"input__review\"[^>]*>", start.content.decode())
    assert field is not None and "maxlength" not in field.group(0)   # the browser would cut a paste
    assert "At most 2,000 characters." in page(start)
    response = composer_client.post(NEW, form_data(start, input__review=REVIEW, goal="Label the review",
                                                   action="save", name="Reviews"))
    assert response.status_code == 422 and not Delegation.objects.exists()
    text = page(response)
    assert f"This is {len(REVIEW):,} characters long; the limit is 2,000. Shorten it: nothing was cut." in text
    assert REVIEW.strip() in " ".join(response.content.decode().split())


def test_a_refused_field_is_one_error_named_by_its_place_in_the_packet(composer_client, skill):
    start = composer_client.get(f"{NEW}?skill=review-check")
    response = composer_client.post(LINT, form_data(start, input__review=REVIEW, goal="Label the review"))
    errors = errors_in_panel(response)
    assert errors == [("input_data.review", f"This is {len(REVIEW):,} characters long; the limit is 2,000. "
                                            "Shorten it: nothing was cut.")]
    assert 'href="#id_input__review"' in response.content.decode()


def test_an_empty_goal_is_one_error(composer_client, skill):
    start = composer_client.get(f"{NEW}?skill=review-check")
    response = composer_client.post(LINT, form_data(start, input__review="Warm sound.", goal=""))
    errors = errors_in_panel(response)
    assert [field for field, _ in errors] == ["goal"], errors


def test_the_api_names_the_limit_too(skill):
    report = lint_as_run({"skill": "review-check", "goal": "Label the review", "input_data": {"review": REVIEW}})
    assert {"field": "input_data.review",
            "message": f"is {len(REVIEW):,} characters long; at most 2,000 allowed (skill review-check@1.0.0's "
                       "input_schema)"} in report.problems


def test_the_json_view_keeps_a_number_where_the_skill_wants_text_and_the_check_names_the_field(
        composer_client, skill):
    start = composer_client.get(f"{NEW}?skill=review-check")
    filled = composer_client.post(FILL, form_data(start, packet_json=json.dumps(
        {"skill": "review-check@1.0.0", "goal": "Label the review", "input_data": {"review": 42}})))
    assert filled.status_code == 200
    data = form_data(filled)
    assert data["input__review"] == ""                        # not shown as the text "42"
    assert json.loads(data["other"]) == {"input_data": {"review": 42}}
    errors = errors_in_panel(composer_client.post(LINT, data))
    assert ("input_data.review", "42 is not of type &#x27;string&#x27; (skill review-check@1.0.0&#x27;s "
                                 "input_schema)") in errors


@pytest.mark.django_db(transaction=True)
def test_save_and_run_on_an_unchanged_form_keeps_its_version(composer_client, composer, immediate_tasks):
    delegation = delegation_create(owner=composer, name="Study", packet=scripts.packet())
    url = reverse("delegations:delegation_edit", args=[delegation.pk])
    versions = []
    for _ in range(2):
        response = composer_client.post(url, form_data(composer_client.get(url), action="run", adapter="scripted",
                                                       adapter_config=json.dumps(scripts.leaf())))
        assert response.status_code == 302, page(response)
        delegation.refresh_from_db()
        versions.append(delegation.version)
    assert versions[1] == versions[0] and delegation.versions.count() == versions[0]
    assert Run.objects.filter(delegation=delegation).count() == 2
