"""Exporting a run's whole record as one JSON file and importing it elsewhere to read:
the round trip through the API and the pages, who sees what, that no secret leaves with
it, and every kind of bad file refused with what is wrong and nothing stored."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from delegations.models import ImportedRun, Run, RunEvent
from delegations.runs.export import ExportError, read_export
from delegations.runs.workflows import run_create
from tests.delegations import scripts
from tests.delegations.runs.test_run_pages import finished_run_with_everything, make_run

pytestmark = pytest.mark.django_db

Document = dict[str, Any]


def stored_events(run: Run) -> list[dict[str, Any]]:
    """Every event of the run's tree, in the order the log stored them."""
    return [row.as_wire() for row in RunEvent.objects.filter(run__in=run.tree()).order_by("pk")]


def export_of(client: Client, run: Run) -> Document:
    response = client.get(f"/api/runs/{run.pk}/export")
    assert response.status_code == 200, response.content[:300]
    return json.loads(b"".join(response.streaming_content))  # type: ignore[attr-defined]


def import_through_api(client: Client, body: bytes | str) -> Any:
    return client.post("/api/runs/import", body, content_type="application/json")


def timeline_events(html: str) -> list[tuple[str, int]]:
    """(run id, seq) of each event on an imported run's page, top to bottom."""
    return [(run_id, int(seq)) for run_id, seq in
            re.findall(r'<li class="event [^"]*" data-run-id="([^"]+)" data-seq="(\d+)"', html)]


@pytest.fixture
def outsider_client(outsider: Any) -> Client:
    client = Client()
    client.force_login(outsider)
    return client


# -- the round trip -------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_an_executed_tree_exported_and_imported_elsewhere_keeps_its_events_in_order_and_its_result(
        immediate_tasks: None, composer: Any, composer_client: Client, other_composer: Any) -> None:
    config = scripts.with_child(scripts.leaf(text="Child answer streamed."))
    run = run_create(packet=scripts.packet(label="caching study"), adapter="scripted",
                     config=config, owner=composer)
    child = Run.objects.get(parent=run)
    response = composer_client.get(f"/api/runs/{run.pk}/export")
    assert response["Content-Disposition"] == 'attachment; filename="run-caching-study.json"'
    document = json.loads(b"".join(response.streaming_content))  # type: ignore[attr-defined]
    assert (document["format"], document["version"]) == ("handoff.run-export", 1)
    assert [record["id"] for record in document["runs"]] == [run.pk, child.pk]
    assert document["runs"][1]["parent"] == run.pk
    assert document["events"] == stored_events(run)
    assert document["run"]["result"]["output_payload"] == scripts.ANSWER
    assert document["run"]["criteria_report"] == run.criteria_report

    # someone else (on the other instance) imports the file as downloaded
    receiver = Client()
    receiver.force_login(other_composer)
    created = import_through_api(receiver, json.dumps(document))
    assert created.status_code == 201, created.content
    imported = ImportedRun.objects.get(pk=created.json()["id"])
    assert created.json()["url"] == f"/runs/imported/{imported.pk}/"
    assert imported.owner == other_composer and imported.label == "caching study"
    assert imported.document["events"] == document["events"]
    assert imported.document["run"]["result"] == document["run"]["result"]

    page = receiver.get(created.json()["url"])
    assert page.status_code == 200
    html = page.content.decode()
    assert "Imported from another instance, read-only" in html
    assert "Compare three caching options" in html and "&quot;answer&quot;: 42" in html
    assert "JSON is schema-valid" in html                       # the criteria report
    assert f'data-tree-run="{child.pk}"' in html                # the tree
    shown = [(event["run_id"], event["seq"]) for event in document["events"] if event["type"] != "text"]
    assert timeline_events(html) == shown                       # the timeline, in stored order
    child_page = receiver.get(f"{created.json()['url']}?run={child.pk}").content.decode()
    assert "Child answer streamed." in child_page
    assert {run_id for run_id, _ in timeline_events(child_page)} == {child.pk}

    again = receiver.get(f"/runs/imported/{imported.pk}/download/")
    assert again["Content-Disposition"] == 'attachment; filename="run-caching-study.json"'
    downloaded = json.loads(b"".join(again.streaming_content))  # type: ignore[attr-defined]
    assert downloaded["events"] == document["events"]
    assert read_export(downloaded).run.result == document["run"]["result"]


def test_the_import_page_takes_an_uploaded_file_or_a_pasted_export(composer: Any,
                                                                    composer_client: Client) -> None:
    run, _, _ = finished_run_with_everything(composer)
    text = json.dumps(export_of(composer_client, run))
    form = composer_client.get("/runs/import/")
    assert form.status_code == 200 and 'enctype="multipart/form-data"' in form.content.decode()

    uploaded = composer_client.post("/runs/import/", {
        "document_file": SimpleUploadedFile("run.json", text.encode(), "application/json")})
    assert uploaded.status_code == 302
    pasted = composer_client.post("/runs/import/", {"document_text": text})
    assert pasted.status_code == 302 and pasted.url != uploaded.url
    imports = list(ImportedRun.objects.order_by("pk"))
    assert [imported.get_absolute_url() for imported in imports] == [uploaded.url, pasted.url]
    assert imports[0].document == imports[1].document
    assert imports[0].document["events"] == stored_events(run)

    html = composer_client.get(pasted.url).content.decode()
    assert "coordinator" in html and "Option b is the fastest." in html
    assert "Include at least 2 sources" in html and "criteria met" in html and ">all met<" not in html
    assert "Approval requested: Delete stale.txt" in html and "Message from carol" in html
    # the link to the subagent stays inside the record
    assert f'href="?run={run.children.get().pk}"' in html
    assert f'href="/runs/{run.pk}/"' not in html
    listing = composer_client.get("/runs/import/").content.decode()
    assert pasted.url in listing and uploaded.url in listing   # "Runs you imported"


def test_a_subtree_exports_with_its_top_as_the_root(composer: Any, composer_client: Client) -> None:
    _, child, _ = finished_run_with_everything(composer)
    document = export_of(composer_client, child)
    assert [record["id"] for record in document["runs"]] == [child.pk]
    assert document["run"]["parent"] is None
    assert {event["run_id"] for event in document["events"]} == {child.pk}
    assert read_export(document).run.id == child.pk


def test_the_run_page_offers_the_export_and_the_run_list_the_import(composer: Any,
                                                                    composer_client: Client) -> None:
    run = make_run(composer, state="COMPLETE", label="done")
    html = composer_client.get(f"/runs/{run.pk}/").content.decode()
    controls = html[html.index('id="run-controls"'):]
    assert f'href="/api/runs/{run.pk}/export" download>Export as JSON' in controls
    assert 'href="/runs/import/">Import a run' in composer_client.get("/runs/").content.decode()


# -- who sees what ----------------------------------------------------------------------------------

def test_an_outsider_can_neither_export_a_run_nor_see_its_import(
        composer: Any, composer_client: Client, outsider_client: Client, admin_user: Any) -> None:
    run = make_run(composer, state="COMPLETE")
    assert outsider_client.get(f"/api/runs/{run.pk}/export").status_code == 404
    created = import_through_api(composer_client, json.dumps(export_of(composer_client, run)))
    url = created.json()["url"]
    assert outsider_client.get(url).status_code == 404
    assert outsider_client.get(f"{url}download/").status_code == 404
    assert "Runs you imported" not in outsider_client.get("/runs/import/").content.decode()
    staff = Client()
    staff.force_login(admin_user)
    assert staff.get(url).status_code == 200
    admin_page = staff.get(f"/admin/delegations/importedrun/{created.json()['id']}/change/")
    assert admin_page.status_code == 200 and "handoff.run-export" in admin_page.content.decode()
    assert staff.get("/admin/delegations/importedrun/add/").status_code == 403


def test_an_export_carries_no_secret_server_path_or_host_of_the_adapter(
        composer: Any, composer_client: Client, monkeypatch: Any) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted-secret-0001")
    run = make_run(composer, state="COMPLETE", adapter_name="openai", adapter_config={
        "model": "gpt-4o-mini", "temperature": 0.2, "base_url": "http://10.1.2.3:8080/v1",
        "api_key_env": "ACME_PRIVATE_KEY_VAR", "model_path": "/srv/models/private.gguf",
        "script": [{"text": "sk-planted-secret-0002"}]})
    response = composer_client.get(f"/api/runs/{run.pk}/export")
    text = b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]
    for planted in ("sk-planted-secret", "10.1.2.3", "ACME_PRIVATE_KEY_VAR", "/srv/models"):
        assert planted not in text
    assert json.loads(text)["run"]["adapter"] == {
        "name": "openai", "config": {"model": "gpt-4o-mini", "temperature": 0.2}}


# -- bad files ------------------------------------------------------------------------------------

def _drop(key: str) -> Callable[[Document], Any]:
    return lambda document: document.pop(key)


def _set(key: str, value: Any) -> Callable[[Document], Any]:
    return lambda document: document.__setitem__(key, value)


def _swap_first_two_events(document: Document) -> None:
    events = document["events"]
    events[0], events[1] = events[1], events[0]


def _root_run(document: Document) -> dict[str, Any]:
    return document["runs"][0]  # type: ignore[no-any-return]


def _add_runs(document: Document, parents: list[tuple[str, str]]) -> None:
    """Runs without events, each (id, parent id)."""
    for run_id, parent in parents:
        document["runs"].append({**_root_run(document), "id": run_id, "parent": parent, "last_seq": 0})


def _a_circle(document: Document) -> None:
    _add_runs(document, [("a" * 32, "b" * 32), ("b" * 32, "a" * 32)])


def _too_deep(document: Document) -> None:
    ids = [f"{level:032d}" for level in range(40)]
    _add_runs(document, list(zip(ids, [_root_run(document)["id"], *ids[:-1]], strict=True)))


BAD_DOCUMENTS: dict[str, tuple[Callable[[Document], Any], str]] = {
    "another format": (_set("format", "openclaw.session"),
                       'This is not a Handoff run export: it has "format": "openclaw.session"'),
    "no format": (_drop("format"), 'it has no "format"'),
    "a newer version": (_set("version", 2), "This export is version 2; this server reads version 1"),
    "a version that is no number": (_set("version", "one"), '"version" must be 1, not "one"'),
    "no events": (_drop("events"), "The export lacks 'events'"),
    "an event missing": (lambda document: document["events"].pop(3),
                         "are a gap: seq 5 where seq 4 was expected"),
    "events out of order": (_swap_first_two_events, "are out of order: seq 1 where seq 3 was expected"),
    "the last events cut off": (lambda document: document["events"].pop(),
                                "the export is cut short"),
    "an event of a run not in the file": (
        lambda document: document["events"][0].__setitem__("run_id", "f" * 32),
        "belongs to run ffffffff, which is not in \"runs\""),
    "an unknown state": (lambda document: _root_run(document).__setitem__("state", "SLEEPING"),
                         "runs[0].state: Input should be 'PENDING'"),
    "a run without an id": (lambda document: _root_run(document).pop("id"), "runs[0].id is missing"),
    "an unknown event type": (lambda document: document["events"][0].__setitem__("type", "beep"),
                              "events[0].type: Input should be"),
    "a parent not in the file": (lambda document: document["runs"][1].__setitem__("parent", "e" * 32),
                                 "(eeeeeeee) is not in \"runs\""),
    "a second top": (lambda document: document["runs"][1].__setitem__("parent", None),
                     "has no parent; only the exported run"),
    "parents in a circle": (_a_circle, "(its parents go round in a circle)"),
    "a tree too deep to draw": (_too_deep, "The tree is 40 levels deep; an imported tree may be at most 32"),
    # its page failed on it (a time past what a page can draw)
    "an event time past the year 9999": (lambda document: document["events"][0].__setitem__("ts", 1e20),
                                         "less than or equal to 253402300799"),
}


@pytest.fixture
def good_export(composer: Any, composer_client: Client) -> Document:
    run, _, _ = finished_run_with_everything(composer)
    return export_of(composer_client, run)


@pytest.mark.parametrize("case", sorted(BAD_DOCUMENTS))
def test_a_broken_export_is_refused_with_what_is_wrong_and_nothing_stored(
        case: str, good_export: Document, composer_client: Client) -> None:
    change, expected = BAD_DOCUMENTS[case]
    document = copy.deepcopy(good_export)
    change(document)
    response = import_through_api(composer_client, json.dumps(document))
    assert response.status_code == 422, response.content
    body = response.json()
    assert any(expected in problem for problem in body["problems"]), body
    assert body["detail"].startswith("The run export was not imported: ")
    page = composer_client.post("/runs/import/", {"document_text": json.dumps(document)})
    assert page.status_code == 422
    assert "The run was not imported" in page.content.decode()
    assert not ImportedRun.objects.exists()


@pytest.mark.parametrize(("body", "expected"), [
    (b"{not json", "The file is not valid JSON: Expecting property name enclosed in double quotes at line 1, column 2."),
    (b"[1, 2]", "A run export is a JSON object ({...}); this file holds a JSON array."),
    (b"", "The file is not valid JSON"),
    (b'{"format": "handoff.run-export", "version": 1, "x": NaN}', "NaN is not a JSON number"),
    (b"\xff\xfe{}", "The file is not UTF-8 text"),
    (b"[" * 100_000, "nests arrays or objects too deeply to read"),
])
def test_a_file_that_is_no_json_object_is_refused_with_a_reason(body: bytes, expected: str,
                                                                composer_client: Client) -> None:
    response = import_through_api(composer_client, body)
    assert response.status_code == 422
    assert expected in response.json()["detail"]
    assert not ImportedRun.objects.exists()


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(
        good_export: Document, composer_client: Client, settings: Any) -> None:
    settings.HANDOFF_RUN_IMPORT_LIMIT_BYTES = 2048
    text = json.dumps(good_export)
    assert len(text) > 2048
    response = import_through_api(composer_client, text)
    assert response.status_code == 413
    assert "run exports of up to 2.0 KB can be imported here" in response.json()["detail"]
    page = composer_client.post("/runs/import/", {
        "document_file": SimpleUploadedFile("big.json", text.encode(), "application/json")})
    assert page.status_code == 422
    assert "can be imported here (HANDOFF_RUN_IMPORT_LIMIT_BYTES)" in page.content.decode()
    with pytest.raises(ExportError) as refused:
        read_export(good_export)
    assert refused.value.status == 413
    assert not ImportedRun.objects.exists()


def test_the_import_page_asks_for_one_export(composer_client: Client, good_export: Document) -> None:
    empty = composer_client.post("/runs/import/", {})
    assert empty.status_code == 422 and "Nothing to import" in empty.content.decode()
    text = json.dumps(good_export)
    both = composer_client.post("/runs/import/", {
        "document_text": text, "document_file": SimpleUploadedFile("run.json", text.encode())})
    assert both.status_code == 422 and "not both" in both.content.decode()
    assert not ImportedRun.objects.exists()


def test_many_problems_are_listed_up_to_a_limit() -> None:
    error = ExportError([f"problem {number}" for number in range(30)])
    assert len(error.problems) == 21 and error.problems[-1] == "… and 10 more."
    assert error.message == "The run export was not imported: problem 0 (and 29 more problems)"


def test_an_imported_run_with_figures_this_instance_never_writes_still_reads(
        good_export: Document, composer_client: Client) -> None:
    for event in good_export["events"]:
        if event["type"] == "model_call":
            event["data"]["input_tokens"] = "lots"
    for record in (good_export["run"], good_export["runs"][0]):
        record["usage"] = {"total_tokens": "many", "model_calls": [1]}
        record["criteria_report"] = {"items": 5}
        record["result"]["open_questions"] = "Is c cheaper?"
    created = import_through_api(composer_client, json.dumps(good_export))
    assert created.status_code == 201
    page = composer_client.get(created.json()["url"])
    assert page.status_code == 200
    html = page.content.decode()
    assert "&quot;input_tokens&quot;: &quot;lots&quot;" in html and "Is c cheaper?" in html
