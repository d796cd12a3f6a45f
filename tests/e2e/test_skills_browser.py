"""A person finds a skill, reads it, switches versions and exports it, in a real browser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skills.services import skill_import
from tests.conftest import login
from tests.skills.factories import add_skill, bundle, manifest

pytestmark = pytest.mark.browser


@pytest.fixture
def catalog(composer) -> None:
    """Created with the ORM: the live server reads the same (transactional) test database."""
    add_skill("price-check", "1.0.0", description="Quotes for stocks.", tags=["finance"],
              capabilities=["network_outbound"], requires_approval=True, created_by=composer)
    newer = manifest("price-check", "1.1.0", description="Quotes for stocks, with the time of "
                     "the quote.", tags=["finance"], capabilities=["network_outbound"],
                     requires_approval=True)
    skill_import(source=bundle(newer), origin="bundle", created_by=composer)
    add_skill("summarizer", description="Summarizes long documents.", tags=["text"],
              subagent_type="reviewer", capabilities=["fs_read"])
    add_skill("ledger-audit", description="Checks ledgers.", subagent_type="verifier")


def test_search_open_switch_versions_and_export_a_manifest(live_url, page, composer, catalog,
                                                           tmp_path: Path):
    login(page, live_url, composer.username)
    page.click("nav[aria-label=Main] >> text=Skills")
    page.wait_for_url(f"{live_url}/skills/")
    cards = page.locator("#catalog-results article")
    assert cards.count() == 3

    # search as you type: the results swap in place and the address follows
    page.fill("#skill-search", "quotes")
    page.wait_for_url(f"{live_url}/skills/?q=quotes")
    assert cards.count() == 1
    assert "price-check" in cards.first.inner_text()
    assert "network_outbound" in cards.first.inner_text()

    # open it: the latest version, by semver
    cards.first.locator("h3 a").click()
    page.wait_for_url(f"{live_url}/skills/price-check/")
    assert page.locator("[data-testid=current-version]").inner_text() == "1.1.0"
    assert page.locator("table.schema tr[data-path=currency]").first.is_visible()
    assert page.locator("tr[data-capability=network_outbound]").is_visible()

    # switch to the older version without a page load; the address follows
    page.click(".versions >> text=1.0.0")
    page.wait_for_url(f"{live_url}/skills/price-check/1.0.0/")
    assert page.locator("[data-testid=current-version]").inner_text() == "1.0.0"
    assert page.title() == "price-check@1.0.0 · Handoff"

    # export its manifest
    with page.expect_download() as download_info:
        page.click("text=Download manifest.json")
    download = download_info.value
    assert download.suggested_filename == "manifest.json"
    saved = tmp_path / "manifest.json"
    download.save_as(saved)
    exported = json.loads(saved.read_text())
    assert exported["skill_name"] == "price-check" and exported["version"] == "1.0.0"

    # the browser's back button returns to the latest version's page
    page.go_back()
    page.wait_for_url(f"{live_url}/skills/price-check/")
    assert page.locator("[data-testid=current-version]").inner_text() == "1.1.0"


def test_filters_and_an_empty_search_explain_themselves(live_url, page, composer, catalog):
    login(page, live_url, composer.username)
    page.goto(f"{live_url}/skills/")
    page.select_option("#skill-type", "verifier")
    page.wait_for_url(f"{live_url}/skills/?subagent_type=verifier")
    assert page.locator("#catalog-results article").count() == 1
    page.fill("#skill-search", "nothing-like-this")
    page.wait_for_url("**/skills/?q=nothing-like-this&subagent_type=verifier")
    assert "No skill matches" in page.locator("#catalog-results .empty").inner_text()


def test_a_composer_imports_a_bundle_in_the_browser(live_url, page, composer, tmp_path: Path):
    archive = tmp_path / "reviewer.zip"
    archive.write_bytes(bundle(manifest("reviewer", subagent_type="reviewer")))
    login(page, live_url, composer.username)
    page.goto(f"{live_url}/skills/import/")
    page.set_input_files("#id_bundle_file", str(archive))
    page.click("button:has-text('Import')")
    page.wait_for_url(f"{live_url}/skills/reviewer/1.0.0/")
    assert "Imported reviewer@1.0.0." in page.locator(".messages").inner_text()
