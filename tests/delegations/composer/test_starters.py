"""Templates as starting points: the protocol examples the composer ships, the templates
people saved, and what a delegation started from one remembers."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group

from delegations.accounts.roles import COMPOSERS
from delegations.composer.services import delegation_create
from delegations.composer.starters import BY_KEY, STARTERS, Starter
from delegations.models import Delegation
from delegations.runs.lint import lint_as_run
from tests.delegations import scripts
from tests.delegations.composer.test_pages import form_data, page

pytestmark = pytest.mark.django_db

NEW = "/delegations/new/"


@pytest.fixture
def template(composer: Any) -> Delegation:
    return delegation_create(owner=composer, name="Price lookup", template=True,
                             packet=scripts.packet(goal="Look up the current price of TSLA"))


@pytest.mark.parametrize("starter", STARTERS, ids=lambda starter: starter.key)
def test_every_starter_lints_without_errors(starter: Starter) -> None:
    report = lint_as_run(starter.packet_copy())
    assert report.runnable, report.blocked_because


def test_there_is_a_starter_for_every_agloop_role_and_each_protocol_example() -> None:
    roles = {starter.packet.get("subagent_type") for starter in STARTERS if starter.key.startswith("agloop-")}
    assert roles == {"researcher", "planner", "critic", "executor", "verifier"}
    assert {"handoff-researcher", "handoff-coder", "delegation-contract", "openclaw-spawn"} <= set(BY_KEY)
    assert all(BY_KEY[f"agloop-{role}"].packet["anti_laziness_checklist"] for role in roles)


def test_the_start_page_lists_starters_and_templates_with_their_use_counts(
        composer_client: Any, composer: Any, template: Delegation) -> None:
    for name in ("first copy", "second copy"):
        delegation_create(owner=composer, name=name, packet=template.packet_dict(), copied_from=template)
    text = page(composer_client.get(NEW))
    assert "Start from a template" in text
    for starter in STARTERS:
        assert f'href="{NEW}?starter={starter.key}"><strong>{starter.title}</strong>' in text
    assert f'href="{NEW}?template={template.pk}"><strong>Price lookup</strong></a>' in text
    assert "used in 2 delegations" in text


def test_someone_elses_template_is_not_offered(client: Any, django_user_model: Any, template: Delegation) -> None:
    other = django_user_model.objects.create_user(username="dave")
    other.groups.add(Group.objects.get_or_create(name=COMPOSERS)[0])
    client.force_login(other)
    assert "Price lookup" not in page(client.get(NEW))
    response = client.get(f"{NEW}?template={template.pk}")
    assert "That template is not one you can use" in page(response)
    assert 'id="composer"' not in page(response)


def test_a_starter_fills_the_composer(composer_client: Any) -> None:
    data = form_data(composer_client.get(f"{NEW}?starter=agloop-executor"))
    assert data["goal"] == "Implement task-003: the search endpoint with pagination"
    assert data["subagent_type"] == "executor"
    assert data["executor_params__task_definition__id"] == "task-003"
    assert data["name"] == "Executor (agloop)"


def test_a_saved_template_fills_the_composer_and_remembers_where_it_came_from(
        composer_client: Any, template: Delegation) -> None:
    data = form_data(composer_client.get(f"{NEW}?template={template.pk}"))
    assert data["goal"] == "Look up the current price of TSLA"
    assert data["copied_from"] == str(template.pk)
    assert "template" not in data   # the copy is a delegation, not another template


def test_a_save_from_a_template_records_it_and_the_list_counts_it(
        composer_client: Any, template: Delegation) -> None:
    start = composer_client.get(f"{NEW}?template={template.pk}")
    response = composer_client.post(NEW, form_data(start, action="save", name="TSLA today"))
    copy = Delegation.objects.get(name="TSLA today")
    assert response.status_code == 302 and copy.copied_from == template
    assert list(template.copies.all()) == [copy]
    assert "used in 1 delegation</span>" in page(composer_client.get("/delegations/"))


def test_a_checked_copy_still_remembers_its_template(composer_client: Any, template: Delegation) -> None:
    start = composer_client.get(f"{NEW}?template={template.pk}")
    checked = composer_client.post(NEW, form_data(start, action="check", name="TSLA today"))
    composer_client.post(NEW, form_data(checked, action="save"))
    assert Delegation.objects.get(name="TSLA today").copied_from == template


def test_keep_as_a_template_makes_one_that_the_start_page_offers(composer_client: Any) -> None:
    start = composer_client.get(f"{NEW}?starter=handoff-researcher")
    composer_client.post(NEW, form_data(start, action="save", name="My price template", template="on"))
    saved = Delegation.objects.get(name="My price template")
    assert saved.template and saved.copied_from is None
    assert f'href="{NEW}?template={saved.pk}"' in page(composer_client.get(NEW))
