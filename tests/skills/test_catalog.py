"""The catalog page (full page and htmx partial), the skill page and the exports."""

from __future__ import annotations

import io
import json
import re
import zipfile

import pytest
from django.urls import NoReverseMatch

from skills.services import skill_import
from tests.skills.factories import INSTRUCTIONS, add_skill, bundle, manifest

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


@pytest.fixture
def catalog() -> None:
    add_skill("price-check", "1.0.0", description="Quotes for stocks", tags=["finance"],
              capabilities=["network_outbound", "search"], requires_approval=True)
    add_skill("price-check", "1.1.0", description="Quotes for stocks, with timestamps",
              tags=["finance"], capabilities=["network_outbound", "search"],
              requires_approval=True)
    add_skill("summarizer", description="Summarizes long documents", tags=["text"],
              subagent_type="reviewer", capabilities=["fs_read", "teleport"])
    add_skill("ledger-audit", description="Checks ledgers", tags=["finance", "audit"],
              subagent_type="verifier", capabilities=["fs_read"])


def text(response) -> str:
    return response.content.decode()


def card_names(page: str) -> list[str]:
    return re.findall(r'<h3><a href="[^"]+">([^<]+)</a>', page)


# -- catalog --------------------------------------------------------------------------------

def test_everyone_logged_in_can_browse_the_catalog(outsider_client, catalog):
    response = outsider_client.get("/skills/")
    page = text(response)
    assert response.status_code == 200
    assert "<h1>Skills</h1>" in page and "css/skills.css" in page
    assert card_names(page) == ["ledger-audit", "price-check", "summarizer"]
    assert "Import a skill" not in page  # only composers see the import button


def test_the_catalog_needs_a_login(client):
    response = client.get("/skills/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_cards_show_the_latest_version_badges_and_capabilities(composer_client, catalog):
    page = text(composer_client.get("/skills/"))
    assert "Import a skill" in page
    assert '<a href="/skills/price-check/">price-check</a> <span class="badge neutral mono" title="latest version">1.1.0</span>' in page
    assert "2 versions" in page
    assert "requires approval" in page
    assert 'class="badge capability warn approval"' in page  # network_outbound is marked
    assert 'class="badge capability neutral unknown"' in page  # teleport is flagged unknown
    assert 'href="/skills/price-check/"' in page


def test_search_as_you_type_returns_only_the_results_fragment(composer_client, catalog):
    response = composer_client.get("/skills/", {"q": "ledger"}, headers=HTMX)
    page = text(response)
    assert page.lstrip().startswith('<section id="catalog-results"')
    assert "<h1>" not in page and "<html" not in page
    assert card_names(page) == ["ledger-audit"]
    assert response["HX-Push-Url"] == "/skills/?q=ledger"


def test_the_search_box_is_wired_for_htmx_with_a_real_form_behind_it(composer_client, catalog):
    page = text(composer_client.get("/skills/"))
    assert 'hx-trigger="input changed delay:200ms, search"' in page
    assert 'hx-push-url="true"' in page and 'hx-target="#catalog-results"' in page
    assert '<form class="panel catalog-filters" method="get" action="/skills/"' in page


def test_the_same_search_works_as_a_full_page(composer_client, catalog):
    page = text(composer_client.get("/skills/", {"q": "stocks"}))
    assert "<h1>Skills</h1>" in page
    assert card_names(page) == ["price-check"]
    assert 'value="stocks"' in page


def test_search_matches_names_descriptions_and_tags(composer_client, catalog):
    found = lambda q: card_names(text(composer_client.get("/skills/", {"q": q}, headers=HTMX)))  # noqa: E731
    assert found("summar") == ["summarizer"]
    assert found("documents") == ["summarizer"]
    assert found("audit") == ["ledger-audit"]
    assert found("finance") == ["ledger-audit", "price-check"]


def test_filters_narrow_the_catalog(composer_client, catalog):
    def found(**params: str) -> list[str]:
        return card_names(text(composer_client.get("/skills/", params, headers=HTMX)))

    assert found(capability="network_outbound") == ["price-check"]
    assert found(subagent_type="verifier") == ["ledger-audit"]
    assert found(requires_approval="yes") == ["price-check"]
    assert found(requires_approval="no") == ["ledger-audit", "summarizer"]
    assert found(capability="fs_read", q="ledgers") == ["ledger-audit"]
    assert found(tag="text") == ["summarizer"]


def test_the_pushed_url_keeps_only_the_filters_in_use(composer_client, catalog):
    response = composer_client.get("/skills/", {"q": "", "capability": "fs_read",
                                                "subagent_type": "", "requires_approval": "no"},
                                   headers=HTMX)
    assert response["HX-Push-Url"] == "/skills/?capability=fs_read&requires_approval=no"


def test_filter_values_that_make_no_sense_are_ignored(composer_client, catalog):
    response = composer_client.get("/skills/", {"subagent_type": "wizard", "page": "banana"})
    assert response.status_code == 200
    assert card_names(text(response)) == ["ledger-audit", "price-check", "summarizer"]


def test_the_capability_filter_offers_known_and_declared_capabilities(composer_client, catalog):
    page = text(composer_client.get("/skills/"))
    for name in ("fs_read", "network_outbound", "financial_tx", "teleport"):
        assert f'<option value="{name}">' in page


def test_no_match_gets_a_helpful_empty_state(composer_client, catalog):
    page = text(composer_client.get("/skills/", {"q": "quantum"}, headers=HTMX))
    assert "No skill matches “quantum”" in page
    assert "clear the filters" in page and "names, descriptions and tags" in page


def test_an_empty_catalog_says_how_to_fill_it(composer_client):
    page = text(composer_client.get("/skills/"))
    assert "The catalog is empty." in page and "Import a skill</a> (a manifest.json" in page
    assert "load_builtin_skills" in page


def test_an_empty_catalog_tells_others_who_fills_it(outsider_client):
    page = text(outsider_client.get("/skills/"))
    assert "Skills appear here once a composer imports them" in page


def test_the_catalog_is_paginated_with_real_links(composer_client):
    for index in range(30):
        add_skill(f"skill-{index:02d}")
    first = text(composer_client.get("/skills/"))
    assert len(card_names(first)) == 24 and "page 1 of 2" in first
    assert 'href="?page=2"' in first and 'hx-get="?page=2"' in first
    second = composer_client.get("/skills/", {"page": 2}, headers=HTMX)
    assert card_names(text(second)) == [f"skill-{index}" for index in range(24, 30)]
    assert second["HX-Push-Url"] == "/skills/?page=2"


def test_pagination_links_keep_the_search(composer_client):
    for index in range(30):
        add_skill(f"report-{index:02d}")
    page = text(composer_client.get("/skills/", {"q": "report"}))
    assert 'href="?q=report&amp;page=2"' in page


def test_tag_links_filter_the_catalog_and_can_be_cleared(composer_client, catalog):
    page = text(composer_client.get("/skills/", {"tag": "audit"}))
    assert card_names(page) == ["ledger-audit"]
    assert "#audit ×" in page and '<input type="hidden" name="tag" value="audit">' in page
    assert 'href="/skills/?tag=finance"' in text(composer_client.get("/skills/"))


# -- skill page ------------------------------------------------------------------------------

def test_the_skill_page_shows_the_latest_version_and_every_version(outsider_client, catalog):
    page = text(outsider_client.get("/skills/price-check/"))
    assert "<title>price-check@1.1.0 · Handoff</title>" in page
    assert 'data-testid="current-version">1.1.0<' in page
    assert 'href="/skills/price-check/1.0.0/" hx-get="/skills/price-check/1.0.0/"' in page
    assert 'aria-current="page">1.1.0' in page


def test_switching_versions_with_htmx_swaps_the_skill_fragment(outsider_client, catalog):
    response = outsider_client.get("/skills/price-check/1.0.0/", headers=HTMX)
    page = text(response)
    assert '<div id="skill-detail">' in page and "<html" not in page
    assert 'data-testid="current-version">1.0.0<' in page and "older version" in page
    assert "<title>price-check@1.0.0 · Handoff</title>" in page


def test_schemas_are_rendered_as_tables(outsider_client):
    skill_import(source=manifest("critic", output_schema={
            "type": "object",
            "properties": {
                "verdict": {"type": "string", "enum": ["APPROVE", "REVISE"],
                            "description": "the call"},
                "specification_compliance": {"type": "object", "properties": {
                    "compliant": {"type": "boolean"}}, "required": ["compliant"]}},
            "required": ["verdict"]}), origin="api")
    page = text(outsider_client.get("/skills/critic/"))
    assert '<tr data-path="verdict">' in page
    assert "<code>APPROVE</code><code>REVISE</code>" in page and "the call" in page
    assert '<tr data-path="specification_compliance.compliant">' in page
    assert "padding-left: calc(.6rem + 1 * 1.25rem)" in page  # nested rows are indented
    assert '<tr data-path="query">' in page  # the input schema, from the shorthand
    assert page.count('<span class="badge ok">required</span>') >= 3


def test_success_criteria_read_as_sentences_and_say_who_reviews(outsider_client):
    add_skill("sentiment", output_schema={
        "type": "object", "properties": {
            "evidence": {"type": "string"},
            "sentiment": {"type": "string", "enum": ["positive", "negative"]}},
        "required": ["evidence", "sentiment"]},
        input_schema={"type": "object", "properties": {"review": {"type": "string"}}},
        success_criteria=["`evidence` is quoted from `review`",
                          {"kind": "confident", "path": "sentiment", "min": 0.7},
                          {"kind": "quoted_from", "path": "evidence", "source": "review"}])
    page = text(outsider_client.get("/skills/sentiment/"))
    criteria = re.search(r'<ul class="small" data-testid="skill-criteria">(.*?)</ul>', page, re.S)
    assert criteria is not None
    assert re.findall(r"<li>(.*?)</li>", criteria.group(1)) == [   # the names drawn as code
        "<code>evidence</code> is quoted from <code>review</code>",
        "<code>sentiment</code> is chosen with a probability of at least 0.7; otherwise a person confirms "
        "or corrects the answer",
        "<code>evidence</code> is quoted from <code>review</code>"]
    assert "{&#x27;kind&#x27;" not in page


def test_capabilities_say_what_they_allow_and_flag_unknown_ones(outsider_client, catalog):
    page = text(outsider_client.get("/skills/summarizer/"))
    assert "Read files and list folders in the run&#x27;s workspace." in page
    assert '<tr data-capability="teleport">' in page and "Unknown capability." in page
    approval_page = text(outsider_client.get("/skills/price-check/"))
    assert "Needs approval: each use waits for a person in the inbox." in approval_page


def test_the_skill_page_shows_entry_point_and_instructions(outsider_client):
    skill_import(source=bundle(), origin="bundle")
    page = text(outsider_client.get("/skills/price-check/"))
    assert '<span class="mono">instructions.md</span>' in page
    assert "instruction file in the bundle" in page
    assert "Find the current price and its currency." in page


def test_an_unknown_skill_or_version_is_a_404(outsider_client, catalog):
    assert outsider_client.get("/skills/nobody/").status_code == 404
    assert outsider_client.get("/skills/price-check/9.9.9/").status_code == 404


def test_the_compose_link_is_hidden_until_the_composer_exists(outsider_client, catalog):
    from django.urls import reverse

    page = text(outsider_client.get("/skills/price-check/"))
    try:
        compose = reverse("delegations:compose")
    except NoReverseMatch:
        assert "Compose a delegation with this skill" not in page
    else:
        assert f'href="{compose}?skill=price-check@1.1.0"' in page


# -- exports ---------------------------------------------------------------------------------

def test_the_manifest_downloads_as_json(outsider_client, catalog):
    response = outsider_client.get("/skills/price-check/1.0.0/manifest.json")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response["Content-Disposition"] == 'attachment; filename="manifest.json"'
    exported = json.loads(b"".join(response.streaming_content))
    assert exported["skill_name"] == "price-check" and exported["version"] == "1.0.0"
    assert exported["output_schema"]["properties"]["currency"] == {"type": "string"}


def test_the_bundle_downloads_as_a_zip_that_imports_again(outsider_client, composer):
    skill_import(source=bundle(extra={"examples/q.json": "{}"}), origin="bundle")
    response = outsider_client.get("/skills/price-check/1.0.0/bundle.zip")
    assert response["Content-Type"] == "application/zip"
    assert 'filename="price-check-1.0.0.zip"' in response["Content-Disposition"]
    data = b"".join(response.streaming_content)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert sorted(archive.namelist()) == ["examples/q.json", "instructions.md",
                                              "manifest.json"]
        assert archive.read("instructions.md").decode() == INSTRUCTIONS
    # an export is a valid bundle, identical to what is stored
    assert skill_import(source=data, origin="bundle").created is False


def test_a_bundle_stored_before_its_file_names_were_checked_still_downloads_without_them(outsider_client):
    skill = skill_import(source=bundle(extra={"examples/q.json": "{}"}), origin="bundle").skill
    skill.files.create(path=".git/hooks/post-checkout", content=b"#!/bin/sh", size=9)
    response = outsider_client.get("/skills/price-check/1.0.0/bundle.zip")
    assert response.status_code == 200
    with zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content))) as archive:
        assert sorted(archive.namelist()) == ["examples/q.json", "instructions.md", "manifest.json"]


def test_export_buttons_are_plain_download_links(outsider_client, catalog):
    page = text(outsider_client.get("/skills/price-check/"))
    assert 'href="/skills/price-check/1.1.0/manifest.json" download' in page
    assert 'href="/skills/price-check/1.1.0/bundle.zip" download' in page


def test_a_page_number_past_the_end_shows_the_last_page(composer_client):
    for index in range(30):
        add_skill(f"skill-{index:02d}")
    page = text(composer_client.get("/skills/", {"page": 99}))
    assert "page 2 of 2" in page and len(card_names(page)) == 6


def test_the_catalog_costs_the_same_few_queries_whatever_the_page_holds(
        composer_client, django_assert_max_num_queries):
    for index in range(30):
        add_skill(f"skill-{index:02d}", capabilities=["fs_read", "search"], tags=["a", "b"])
    with django_assert_max_num_queries(10):
        composer_client.get("/skills/")
    with django_assert_max_num_queries(9):
        composer_client.get("/skills/", {"q": "skill"}, headers=HTMX)


def test_a_skill_named_like_a_catalog_page_is_still_reachable(outsider_client):
    add_skill("import")
    assert 'href="/skills/import/1.0.0/">import</a>' in text(outsider_client.get("/skills/"))
    page = text(outsider_client.get("/skills/import/1.0.0/"))
    assert 'data-testid="current-version">1.0.0<' in page


def test_absurd_page_numbers_are_no_server_error(composer_client, catalog):
    for number in ("99999999999999999999999", "-5", "1e9", "%00"):
        response = composer_client.get("/skills/", {"page": number}, headers=HTMX)
        assert response.status_code == 200
        assert card_names(text(response))


def run_new_url() -> str:
    from django.urls import reverse

    try:
        return reverse("delegations:run_new")
    except NoReverseMatch:
        pytest.skip("the runs pages are not installed")


def test_composers_can_start_a_run_from_the_skill_page(composer_client, catalog):
    from django.urls import reverse

    page = text(composer_client.get("/skills/price-check/"))
    composer = reverse("delegations:delegation_new")
    assert f'href="{composer}?skill=price-check@1.1.0">Start a run with this skill' in page
    assert f'href="{run_new_url()}?skill=price-check@1.1.0" title="Paste a hand-off packet as JSON instead">Raw run form' in page


def test_others_are_not_offered_to_start_a_run(outsider_client, catalog):
    run_new_url()
    assert "Start a run with this skill" not in text(outsider_client.get("/skills/price-check/"))


def test_a_skill_page_lists_the_criteria_every_run_of_it_is_checked_against(composer_client):
    from django.core.management import call_command

    call_command("load_builtin_skills", verbosity=0)
    page = text(composer_client.get("/skills/review-sentiment/"))
    assert "Every run of it is also checked against these, so a copied example or a guess fails:" in page
    assert "<li><code>evidence</code> is quoted from <code>review</code></li>" in page


@pytest.mark.parametrize(("written", "drawn"), [
    ("`evidence` is quoted from `review`", "<code>evidence</code> is quoted from <code>review</code>"),
    ("<b>`x`</b>", "&lt;b&gt;<code>x</code>&lt;/b&gt;"),
    ("a `b` and a lone ` tick", "a <code>b</code> and a lone ` tick"),
    ("no names <i>", "no names &lt;i&gt;")])
def test_backticked_names_are_drawn_as_code_and_everything_else_escaped(written: str, drawn: str) -> None:
    from delegations.templatetags.run_display import code_spans

    assert code_spans(written) == drawn
