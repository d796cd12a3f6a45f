"""The composer opened from a remote skill's "Compose" in the catalog: prefilled with the
skill and the agent's capability, its check passes once the goal is written (lint_as_run
accepts the remote ref), and "Save and run" starts a run of the remote skill."""

from __future__ import annotations

import json
from html import unescape
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from delegations.models import RemoteAgent, Run
from tests.delegations.composer.test_pages import LINT, form_data, page
from tests.skills import test_remote_skills_in_catalog
from tests.skills.test_remote_skills_in_catalog import REF

pytestmark = pytest.mark.django_db
pricing = test_remote_skills_in_catalog.pricing   # an enabled agent offering REF, and a disabled one


def compose_link(html: str, ref: str) -> str:
    card = html.split(f'data-remote-skill="{ref}"', 1)[1].split("</article>", 1)[0]
    return unescape(card.split('href="', 1)[1].split('"', 1)[0])


def test_compose_opens_the_composer_with_the_remote_skill_and_its_capability(
        composer_client: Any, pricing: RemoteAgent) -> None:
    link = compose_link(composer_client.get("/skills/").content.decode(), REF)
    assert urlsplit(link).path == "/delegations/new/" and parse_qs(urlsplit(link).query) == {"skill": [REF]}
    opened = composer_client.get(link)
    assert opened.status_code == 200
    data = form_data(opened)
    assert data["skill"] == REF and data["capabilities"] == ["search"]
    text = page(opened)
    assert "remote · pricing" in text and 'placeholder="What to ask pricing' in text
    panel = text.split('id="lint-panel"', 1)[1]
    assert "No enabled remote agent" not in panel and "needs the capability" not in panel
    assert "Fix goal first" in panel   # what is left to write


def test_the_composers_check_passes_a_prefilled_remote_skill_once_it_has_a_goal(
        composer_client: Any, pricing: RemoteAgent) -> None:
    opened = composer_client.get(f"/delegations/new/?skill={REF}")
    checked = page(composer_client.post(LINT, form_data(opened, goal="Quote the current price of TSLA in USD")))
    assert 'name="action" value="run">' in checked, checked   # Save and run is enabled
    refused = page(composer_client.post(LINT, form_data(opened, goal="Quote TSLA", capabilities=[])))
    assert "needs the capability &#x27;search&#x27;" in refused


def test_save_and_run_from_the_prefilled_composer_starts_a_run_of_the_remote_skill(
        composer_client: Any, pricing: RemoteAgent, queued_tasks: None) -> None:
    opened = composer_client.get(f"/delegations/new/?skill={REF}")
    response = composer_client.post("/delegations/new/", form_data(
        opened, action="run", goal="Quote the current price of TSLA in USD", adapter="scripted",
        adapter_config=json.dumps({"script": []})))   # the remote agent stands in for the model
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/"
    assert run.skill == REF and run.capabilities == ["search"] and run.state != "REJECTED"


def test_a_remote_ref_no_agent_offers_is_not_prefilled(composer_client: Any, pricing: RemoteAgent) -> None:
    text = page(composer_client.get("/delegations/new/?skill=archive/lookup", follow=True))
    assert "No skill archive/lookup in the registry and no enabled remote agent offers it" in text
