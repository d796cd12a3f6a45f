from __future__ import annotations

import pytest

from skills.models import Skill
from tests.skills.factories import add_skill

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, admin_user):
    client.force_login(admin_user)
    return client


@pytest.fixture
def skills() -> list[Skill]:
    return [add_skill("fetcher", "1.0.0", capabilities=["network_outbound"],
                      requires_approval=True, subagent_type="researcher"),
            add_skill("fetcher", "1.1.0", capabilities=["network_outbound"],
                      requires_approval=True, subagent_type="researcher"),
            add_skill("reader", capabilities=["fs_read"], subagent_type="reviewer")]


def test_the_admin_lists_skills_with_their_filters(admin_client, skills):
    page = admin_client.get("/admin/skills/skill/").content.decode()
    for title in ("By capability", "By subagent type", "By requires approval"):
        assert title in page
    assert "network_outbound" in page and "fetcher" in page


def test_the_admin_filters_by_capability_and_searches(admin_client, skills):
    page = admin_client.get("/admin/skills/skill/", {"capability": "fs_read"}).content.decode()
    assert f"/admin/skills/skill/{skills[2].pk}/change/" in page
    assert f"/admin/skills/skill/{skills[0].pk}/change/" not in page
    found = admin_client.get("/admin/skills/skill/", {"q": "fetch"}).content.decode()
    assert "2 results" in found


def test_the_admin_shows_a_skill_read_only_with_schema_tables(admin_client, skills):
    page = admin_client.get(f"/admin/skills/skill/{skills[0].pk}/change/").content.decode()
    assert '<table class="schema">' in page and '<tr data-path="query">' in page
    assert 'name="description"' not in page  # nothing editable
    assert 'name="_save"' not in page


def test_deleting_in_the_admin_recomputes_the_latest_version(admin_client, skills):
    response = admin_client.post(f"/admin/skills/skill/{skills[1].pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert Skill.objects.resolve("fetcher").version == "1.0.0"


def test_skills_cannot_be_added_behind_validations_back(admin_client):
    assert admin_client.get("/admin/skills/skill/add/").status_code == 403
