"""The run pages without a browser: the run list, starting a run, the run view's snapshot
and its live fragment, the controls, the dashboard, and who may see and do what."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from delegations.models import Approval, Run, RunEvent, RunMessage
from delegations.models.runs import new_run_id
from delegations.runs.record import append_events
from delegations.runs.workflows import run_create
from tests.delegations import scripts

pytestmark = pytest.mark.django_db

DIFF = "--- /dev/null\n+++ b/notes.md\n@@ -0,0 +1,2 @@\n+# Notes\n+Option b wins.\n"


def make_run(owner: Any, *, state: str = "PENDING", label: str = "", **fields: Any) -> Run:
    """A root run row as run_create leaves it, without executing anything."""
    run_id = new_run_id()
    defaults: dict[str, Any] = {
        "root_id": run_id, "packet": scripts.packet(), "input_hash": "0" * 64, "goal": "Compare three caching options",
        "subagent_type": "researcher", "adapter_name": "scripted",
        "session_key": f"agent:main:subagent:{run_id}",
        "budget": {"max_model_calls": 10, "max_tokens": 1000, "max_runtime_s": None, "max_cost_usd": 0.5},
    }
    defaults.update(fields)
    return Run.objects.create(id=run_id, owner=owner, state=state, label=label, **defaults)


def walk(run: Run, *states: str) -> None:
    """State events from the run's state through ``states`` (the rows follow the log)."""
    previous = run.state
    events = []
    for state in states:
        events.append((run, "state", {"state": state, "previous": previous}))
        previous = state
    append_events(events)


def finished_run_with_everything(owner: Any) -> tuple[Run, Run, Approval]:
    """A coordinator that streamed text, called tools (one edit), spawned a child, waited
    for an approval, received a message, logged, and finished with a result: every kind
    of event, written through the event log as a worker's sink writes them."""
    run = make_run(owner, label="coordinator", skill="price-check@1.0.0")
    walk(run, "ACCEPTED", "WORKING")
    child_id = new_run_id()
    append_events([
        (run, "text", {"delta": "Comparing the options"}),
        (run, "text", {"delta": " now."}),
        (run, "model_call", {"iteration": 1, "model": "scripted", "input_tokens": 120,
                             "output_tokens": 30, "cost_usd": 0.0125, "duration_ms": 812.5, "tool_calls": 2}),
        (run, "tool_call", {"id": "call_0_0", "name": "apply_edit", "arguments": {"edit": DIFF}}),
        (run, "tool_result", {"id": "call_0_0", "name": "apply_edit", "ok": True, "result": {"files": [
            {"path": "notes.md", "created": True, "deleted": False, "diff": DIFF}]}}),
        (run, "tool_call", {"id": "call_0_1", "name": "delegate_task", "arguments": {"label": "kid"}}),
        (run, "child", {"child_run_id": child_id, "call_id": "call_0_1", "label": "kid", "depth": 1,
                        "packet": scripts.packet(goal="Find part kid"),
                        "session_key": f"agent:main:subagent:{child_id}",
                        "budget": {"max_model_calls": 5}, "capabilities": ["fs_read"]}),
    ])
    child = Run.objects.get(pk=child_id)
    walk(child, "ACCEPTED", "WORKING")
    append_events([(child, "text", {"delta": "Part kid found."})])
    approval = Approval.objects.create(
        run=run, key=f"{run.pk}:capability:tool:call_1_0", kind="capability", title="Delete stale.txt",
        payload={"tool": "delete_file", "arguments": {"path": "stale.txt"}}, risk="high")
    append_events([
        (run, "approval", {"key": approval.key, "kind": "capability", "title": "Delete stale.txt",
                           "payload": approval.payload, "risk": "high"}),
        (run, "message", {"text": "Prefer option b if in doubt.", "from": "carol"}),
        (run, "log", {"level": "warning", "message": "Self-correction turn."}),
        (run, "error", {"code": "ERR_CONSTRAINT_VIOLATION", "message": "No tool 'rm'.", "call_id": "call_1_1"}),
    ])
    append_events([(run, "result", {
        "state": "COMPLETE", "usage": {"model_calls": 3, "input_tokens": 300, "output_tokens": 90,
                                       "total_tokens": 390, "cost_usd": 0.02, "runtime_s": 4.5},
        "result": {"status": "SUCCESS", "output_payload": {"answer": 42, "option": "b"},
                   "summary": "Option b is the fastest.", "evidence": [{"source": "benchmark", "artifact_id": "bench-1"}],
                   "files_modified": ["notes.md"], "open_questions": ["Is c cheaper at scale?"],
                   "handoff": {"recommended_role": "reviewer", "reason": "check the numbers"}},
        "criteria_report": {"items": [
            {"criterion": "JSON is schema-valid", "kind": "json_schema", "met": True, "detail": "valid"},
            {"criterion": "Include at least 2 sources", "kind": "evidence", "met": False, "detail": "1 source"}],
            "all_met": False}})])
    run.refresh_from_db()
    return run, child, approval


def detail(client: Any, run: Run) -> str:
    response = client.get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def section(html: str, element_id: str) -> str:
    """The text of the element with ``element_id`` up to the next element with an id of a section."""
    start = html.index(f'id="{element_id}"')
    following = [html.find(f'id="{other}"', start + 1) for other in (
        "run-approvals", "run-outcome", "run-streams", "run-timeline", "run-findings", "run-controls",
        "run-facts", "run-budget", "run-tree")]
    end = min([position for position in following if position > start] or [len(html)])
    return html[start:end]


# -- the list -----------------------------------------------------------------------------------

def test_the_run_list_shows_my_runs_with_their_state_and_not_other_peoples(composer_client, composer, outsider):
    make_run(composer, label="mine-working", state="WORKING")
    make_run(outsider, label="someone-elses")
    html = composer_client.get("/runs/").content.decode()
    assert "mine-working" in html and 'data-state="WORKING"' in html
    assert "someone-elses" not in html


def test_an_empty_run_list_says_how_to_start_a_run(composer_client):
    html = composer_client.get("/runs/").content.decode()
    assert "No runs yet" in html
    assert "/runs/new/" in html and "manage.py run_delegation" in html and "POST /api/runs" in html


def test_the_run_list_filters_by_state_skill_and_top_level_only(composer_client, composer):
    done = make_run(composer, label="done-run", state="COMPLETE", skill="price-check@1.0.0")
    make_run(composer, label="waiting-run", state="PENDING", skill="summarize@2.0.0")
    make_run(composer, label="child-run", state="COMPLETE", parent=done, depth=1, root_id=done.pk)
    by_state = composer_client.get("/runs/?state=COMPLETE").content.decode()
    assert "done-run" in by_state and "waiting-run" not in by_state and "child-run" not in by_state
    by_skill = composer_client.get("/runs/?skill=price-check").content.decode()
    assert "done-run" in by_skill and "waiting-run" not in by_skill
    by_part = composer_client.get("/runs/?skill=price").content.decode()   # part of a name, as the catalog
    assert "done-run" in by_part and "waiting-run" not in by_part
    bogus_state = composer_client.get("/runs/?state=BOGUS&skill=summarize").content.decode()
    assert "waiting-run" in bogus_state and "done-run" not in bogus_state   # the skill still applies
    everything = composer_client.get("/runs/?scope=all&state=COMPLETE").content.decode()
    assert "done-run" in everything and "child-run" in everything
    nothing = composer_client.get("/runs/?state=FAILED").content.decode()
    assert "No run matches these filters" in nothing


def test_the_run_list_pages_through_many_runs(composer_client, composer):
    for number in range(30):
        make_run(composer, label=f"run-{number:02d}", created_at=timezone.now() - timedelta(minutes=number))
    first = composer_client.get("/runs/").content.decode()
    assert "run-00" in first and "run-24" in first and "run-25" not in first
    assert "page 1 of 2" in first and 'href="?page=2"' in first
    second = composer_client.get("/runs/?page=2").content.decode()
    assert "run-25" in second and "run-29" in second and "run-00" not in second


def test_a_filter_change_from_htmx_gets_the_results_fragment_and_a_new_address(composer_client, composer):
    make_run(composer, label="done-run", state="COMPLETE")
    response = composer_client.get("/runs/?state=COMPLETE", headers={"HX-Request": "true"})
    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html
    assert html.lstrip().startswith('<section id="run-results"') and "done-run" in html
    assert response.headers["HX-Push-Url"] == "/runs/?state=COMPLETE"


def test_the_list_polls_itself_while_a_run_is_active_without_changing_the_address(composer_client, composer):
    run = make_run(composer, label="busy", state="WORKING")
    html = composer_client.get("/runs/").content.decode()
    assert 'hx-trigger="every 3s"' in html
    poll = composer_client.get("/runs/", headers={"HX-Request": "true", "HX-Trigger": "run-results"})
    assert "HX-Push-Url" not in poll.headers and 'data-state="WORKING"' in poll.content.decode()
    Run.objects.filter(pk=run.pk).update(state="COMPLETE")
    after = composer_client.get("/runs/", headers={"HX-Request": "true", "HX-Trigger": "run-results"}).content.decode()
    assert 'data-state="COMPLETE"' in after and "every 3s" not in after  # polling stops


def test_staff_choose_between_their_runs_and_everyones(client, admin_user, composer):
    make_run(composer, label="carols-run")
    client.force_login(admin_user)
    assert "carols-run" not in client.get("/runs/").content.decode()
    assert "carols-run" in client.get("/runs/?owner=all").content.decode()


# -- starting a run -----------------------------------------------------------------------------

def test_a_composer_starts_a_run_from_the_form_and_lands_on_its_page(composer_client, composer, queued_tasks):
    response = composer_client.post("/runs/new/", {
        "packet": json.dumps(scripts.packet()), "adapter": "scripted",
        "adapter_config": json.dumps(scripts.leaf())})
    run = Run.objects.get(owner=composer)
    assert response.status_code == 302 and response.url == f"/runs/{run.pk}/"
    assert run.adapter_name == "scripted" and run.adapter_config["script"] and run.state == "PENDING"
    assert "Run started" in detail(composer_client, run)


def test_the_form_accepts_another_dialect(composer_client, composer, queued_tasks):
    handoff_package = {"taskId": "t-1",
                       "task": {"id": "t-1", "type": "research",
                                "description": "Find the best caching option and answer with JSON",
                                "requirements": ["JSON is schema-valid"]},
                       "context": {"original_request": "Which cache?"}}
    response = composer_client.post("/runs/new/", {"packet": json.dumps(handoff_package),
                                                   "adapter": "scripted",
                                                   "adapter_config": json.dumps(scripts.leaf())})
    assert response.status_code == 302
    assert Run.objects.get(owner=composer).goal.startswith("Find the best caching option")


def test_the_form_defaults_to_the_configured_adapter(composer_client, settings):
    settings.HANDOFF_DEFAULT_ADAPTER = "scripted"
    html = composer_client.get("/runs/new/").content.decode()
    assert re.search(r'<option value="scripted" selected>', html)


def test_text_that_is_not_json_is_refused_with_where_it_breaks(composer_client, composer):
    response = composer_client.post("/runs/new/", {"packet": '{"goal": "x",}', "adapter": "scripted"})
    assert response.status_code == 422
    assert "not valid JSON" in response.content.decode() and "line 1, column" in response.content.decode()
    assert not Run.objects.exists()


def test_an_invalid_packet_lists_every_problem(composer_client):
    response = composer_client.post("/runs/new/", {
        "packet": json.dumps({"goal": 5, "budget": {"max_tokens": "lots"}}), "adapter": "scripted",
        "adapter_config": json.dumps(scripts.leaf())})
    html = response.content.decode()
    assert response.status_code == 422
    assert "The packet has 2 problems" in html
    assert ">goal<" in html and ">budget.max_tokens<" in html
    assert not Run.objects.exists()


def test_a_bad_adapter_config_is_shown_on_its_field(composer_client):
    response = composer_client.post("/runs/new/", {
        "packet": json.dumps(scripts.packet()), "adapter": "scripted",
        "adapter_config": json.dumps({"script": [], "colour": "red"})})
    html = response.content.decode()
    assert response.status_code == 422
    assert 'id="config-errors"' in html and "colour" in html
    assert not Run.objects.exists()


def test_a_packet_with_lint_errors_becomes_a_rejected_run_showing_its_findings(composer_client, composer):
    bad = scripts.packet(depth=9, max_depth=3)
    response = composer_client.post("/runs/new/", {"packet": json.dumps(bad), "adapter": "scripted",
                                                   "adapter_config": json.dumps(scripts.leaf())})
    run = Run.objects.get(owner=composer)
    assert response.status_code == 302 and run.state == "REJECTED"
    html = detail(composer_client, run)
    outcome = section(html, "run-outcome")
    assert "Rejected: the delegation is not well formed" in outcome
    errors = [finding for finding in run.findings if finding["severity"] == "error"]
    assert errors and all(finding["code"] in outcome for finding in errors)
    assert "ERR_INVALID_PACKET" in outcome   # the error report


def test_the_form_is_prefilled_from_a_skill(composer_client, composer):
    from tests.skills.factories import add_skill

    add_skill("price-check", "1.0.0", created_by=composer)
    html = composer_client.get("/runs/new/?skill=price-check@1.0.0").content.decode()
    assert "Prefilled from skill price-check@1.0.0" in html
    assert "&quot;skill&quot;: &quot;price-check@1.0.0&quot;" in html
    assert "&quot;query&quot;: &quot;&quot;" in html   # an input_data placeholder per input


def test_the_prefill_leaves_the_instructions_to_a_skill_that_has_them(composer_client):
    scripts.add_caching_skill("1.0.0")
    html = composer_client.get("/runs/new/?skill=caching@1.0.0").content.decode()
    assert "Prefilled from skill caching@1.0.0" in html
    assert "&quot;instruction_set&quot;" not in html


@pytest.mark.django_db(transaction=True)
def test_a_run_from_the_form_runs_the_skill_version_it_names_and_its_page_links_to_it(
        composer_client, composer, immediate_tasks):
    scripts.add_caching_skill("1.0.0")
    scripts.add_caching_skill("1.1.0", instructions="# Newer\n\nAnother way.\n")
    response = composer_client.post("/runs/new/", {
        "packet": json.dumps(scripts.skill_packet("caching@1.0.0")), "adapter": "scripted",
        "adapter_config": json.dumps(scripts.leaf(scripts.SKILL_OUTPUT))})
    run = Run.objects.get(owner=composer)
    assert response.status_code == 302 and run.state == "COMPLETE"
    assert run.skill == "caching@1.0.0" and run.packet["skill"] == "caching@1.0.0"
    assert scripts.SKILL_INSTRUCTIONS in scripts.first_system_message(run.pk)
    html = detail(composer_client, run)
    assert '<a class="badge neutral mono" href="/skills/caching/1.0.0/"' in section(html, "run-head")
    assert 'href="/skills/caching/1.0.0/">caching@1.0.0</a>' in section(html, "run-facts")


def test_the_form_lists_where_the_input_breaks_the_skills_input_schema(composer_client):
    scripts.add_caching_skill("1.0.0")
    response = composer_client.post("/runs/new/", {
        "packet": json.dumps(scripts.skill_packet("caching@1.0.0", input_data={"options": []})),
        "adapter": "scripted", "adapter_config": json.dumps(scripts.leaf())})
    html = response.content.decode()
    assert response.status_code == 422
    assert "The packet has 1 problem;" in html
    assert ">input_data.options<" in html and "skill caching@1.0.0&#x27;s input_schema" in html
    assert not Run.objects.exists()


def test_a_rejected_runs_page_leads_with_why_before_any_detail(composer_client, composer):
    run = run_create(packet=scripts.packet(depth=9, max_depth=3), adapter="scripted",
                     config=scripts.leaf(), owner=composer)
    assert run.state == "REJECTED"
    outcome = section(detail(composer_client, run), "run-outcome")
    headline = ('<p class="notice headline bad" id="failure-headline" role="status">Rejected: depth: '
                'depth is 9 but its own max_depth is 3.')
    assert headline in outcome
    assert outcome.index(headline) < outcome.index("the delegation is not well formed") < outcome.index("Error report")


def test_a_completed_runs_page_has_no_failure_headline(composer_client, composer):
    run = make_run(composer, state="COMPLETE", result={"status": "SUCCESS", "output_payload": {}})
    assert 'id="failure-headline"' not in detail(composer_client, run)


def test_a_run_page_names_a_skill_the_registry_no_longer_has_without_a_link(composer_client, composer):
    run = make_run(composer, skill="gone@1.0.0")
    facts = section(detail(composer_client, run), "run-facts")
    assert "gone@1.0.0" in facts and "no longer in the registry" in facts


def test_an_unknown_skill_leaves_the_form_blank_with_a_warning(composer_client):
    html = composer_client.get("/runs/new/?skill=nope@9.9.9").content.decode()
    assert "No skill nope@9.9.9 in the registry" in html


def test_the_form_copies_a_visible_run_to_run_it_again(composer_client, composer):
    run = make_run(composer, label="first", state="FAILED", adapter_config={"script": []})
    html = composer_client.get(f"/runs/new/?from={run.pk}").content.decode()
    assert "Prefilled from run first" in html and "Compare the options" in html


def test_people_without_the_composer_role_cannot_start_runs(outsider_client):
    page = outsider_client.get("/runs/new/")
    assert page.status_code == 403 and "composer role" in page.content.decode()
    post = outsider_client.post("/runs/new/", {"packet": json.dumps(scripts.packet()), "adapter": "scripted"})
    assert post.status_code == 403 and not Run.objects.exists()


# -- the run page -------------------------------------------------------------------------------

def test_the_run_page_renders_every_section_from_the_event_log(composer_client, composer):
    run, child, approval = finished_run_with_everything(composer)
    html = detail(composer_client, run)

    head = section(html, "run-head")
    assert "coordinator" in head and 'data-state="COMPLETE"' in head and "price-check@1.0.0" in head
    facts = section(html, "run-facts")
    for fact in (run.session_key, "scripted", composer.username, "Attempt", "Started", "Finished"):
        assert fact in facts

    timeline = section(html, "run-timeline")
    for kind in ("state", "model_call", "tool_call", "tool_result", "child", "approval", "message",
                 "log", "error", "result"):
        assert f'data-type="{kind}"' in timeline, kind
    assert 'data-type="text"' not in timeline           # text is in the output area
    assert "120 in · 30 out tokens" in timeline and "$0.0125" in timeline and "812 ms" in timeline
    assert "&quot;edit&quot;:" in timeline              # tool arguments as pretty JSON
    assert f'href="/runs/{child.pk}/"' in timeline      # the child spawn links to the child
    assert f"approval #{approval.pk}" in timeline
    assert "Prefer option b if in doubt." in timeline and "Self-correction turn." in timeline
    assert "ERR_CONSTRAINT_VIOLATION" in timeline

    streams = section(html, "run-streams")
    assert "Comparing the options now." in streams and "Part kid found." in streams

    tree = section(html, "run-tree")
    assert f'href="/runs/{child.pk}/"' in tree and "kid" in tree and "1 subagent" in tree

    budget = section(html, "run-budget")
    assert "3 / 10" in budget and "390 / 1,000" in budget and "$0.0200 / $0.5000" in budget
    assert 'style="width: 30.0%"' in budget and 'style="width: 39.0%"' in budget
    assert 'class="meter-soft" style="left: 80.0%"' in budget
    assert "no limit" in budget   # time has no limit

    outcome = section(html, "run-outcome")
    assert "SUCCESS" in outcome and "Option b is the fastest." in outcome
    assert "&quot;answer&quot;: 42" in outcome and "bench-1" in outcome and "notes.md" in outcome
    assert "Is c cheaper at scale?" in outcome and "reviewer" in outcome
    assert 'aria-label="met"' in outcome and 'aria-label="not met"' in outcome
    assert '<span class="dl add">+Option b wins.</span>' in outcome   # edits as coloured diffs
    assert '<span class="dl hunk">@@ -0,0 +1,2 @@</span>' in outcome

    approvals = section(html, "run-approvals")
    assert "Delete stale.txt" in approvals and f"/api/approvals/{approval.pk}/decision" in approvals
    assert "waiting for a person" in approvals


def test_the_run_page_carries_what_the_live_script_needs(composer_client, composer):
    run, child, _ = finished_run_with_everything(composer)
    html = detail(composer_client, run)
    found = re.search(r'data-cursors="([^"]+)"', html)
    assert found is not None
    cursors = json.loads(found.group(1).replace("&quot;", '"'))
    assert cursors == {run.pk: run.last_seq, child.pk: child.last_seq}
    assert f'data-ws-path="/ws/runs/{run.pk}/"' in html and f'data-live-url="/runs/{run.pk}/live/"' in html
    assert f'data-stream-run="{child.pk}" data-seq="{child.last_seq}"' in html
    assert 'id="live-status"' in html and "js/run_live.js" in html


def test_the_output_area_puts_each_model_turn_in_its_own_paragraph(composer_client, composer):
    run = make_run(composer, state="WORKING")
    append_events([(run, "text", {"delta": "First turn."}),
                   (run, "model_call", {"iteration": 1, "input_tokens": 1, "output_tokens": 1}),
                   (run, "text", {"delta": "Second "}), (run, "text", {"delta": "turn."})])
    assert "First turn.\n\nSecond turn." in section(detail(composer_client, run), "run-streams")


def test_the_live_fragment_sends_the_sections_and_only_newer_timeline_rows(composer_client, composer):
    run, _, _ = finished_run_with_everything(composer)
    message = RunEvent.objects.get(run=run, type="message")
    response = composer_client.get(f"/runs/{run.pk}/live/?since={message.pk}")
    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html
    for section_id in ("run-head", "run-approvals", "run-outcome", "run-controls", "run-facts",
                       "run-budget"):
        assert f'id="{section_id}"' in html
    # of the tree, only the runs with newer events (and their ancestors), to patch in place
    assert 'id="run-tree"' not in html and "data-live-tree" in html
    assert re.findall(r'data-tree-run="([^"]+)" data-parent="([^"]*)"', html) == [(run.pk, "")]
    whole = composer_client.get(f"/runs/{run.pk}/live/?since={message.pk}&tree=1").content.decode()
    assert 'id="run-tree"' in whole and "data-live-tree" not in whole
    rows = re.findall(r'data-seq="(\d+)" data-type="(\w+)"', html)
    assert rows and all(int(seq) > message.seq for seq, _ in rows)
    assert {kind for _, kind in rows} >= {"log", "error", "result"}
    last = RunEvent.objects.filter(run=run).order_by("-id").first()
    assert last is not None and f'data-after="{last.pk}"' in html
    assert 'id="run-streams"' not in html
    with_streams = composer_client.get(f"/runs/{run.pk}/live/?after=0&streams=1").content.decode()
    assert 'id="run-streams"' in with_streams and "Comparing the options now." in with_streams


def test_a_failed_run_shows_its_error_report_and_a_retry_control(composer_client, composer):
    run = make_run(composer, state="WORKING")
    append_events([(run, "error", {"code": "ERR_TOOL_FAILURE", "message": "The local model is missing."}),
                   (run, "result", {"state": "FAILED", "result": None, "usage": {},
                                    "error": {"code": "ERR_TOOL_FAILURE", "message": "The local model is missing."}})])
    html = detail(composer_client, run)
    assert "Error report" in section(html, "run-outcome") and "The local model is missing." in html
    controls = section(html, "run-controls")
    assert f'action="/runs/{run.pk}/retry/"' in controls and "Start attempt 2" in controls
    assert "Cancel run" not in controls and "Send a message" not in controls


def test_an_active_run_offers_a_message_box_and_a_confirmed_cancel(composer_client, composer):
    run = make_run(composer, state="WORKING")
    controls = section(detail(composer_client, run), "run-controls")
    assert f'action="/runs/{run.pk}/messages/"' in controls
    assert '<details class="confirm">' in controls and "Yes, cancel the run" in controls
    assert "retry" not in controls.lower()


def test_a_run_being_cancelled_says_it_is_stopping_instead_of_offering_a_message_box(composer_client, composer):
    root = make_run(composer, state="WORKING", cancel_requested_at=timezone.now())
    child = make_run(composer, state="WORKING", parent=root, root_id=root.pk)
    for run, whose in ((root, "A cancel was requested: this run is stopping"),
                       (child, "A cancel was requested for a run above this one: this run is stopping")):
        controls = section(detail(composer_client, run), "run-controls")
        assert whose in controls and "reads no more messages" in controls
        assert "Send a message" not in controls and "Yes, cancel the run" not in controls


def test_a_child_run_page_links_its_parent_and_root(composer_client, composer):
    run, child, _ = finished_run_with_everything(composer)
    html = detail(composer_client, child)
    assert f'href="/runs/{run.pk}/"' in section(html, "run-head")   # the breadcrumb
    facts = section(html, "run-facts")
    assert "Parent" in facts and "Root" in facts and child.session_key in facts


@pytest.mark.django_db(transaction=True)
def test_an_executed_tree_renders_its_child_its_text_and_its_result(immediate_tasks, composer, client):
    client.force_login(composer)
    config = scripts.with_child(scripts.leaf(text="Child answer streamed."))
    run = run_create(packet=scripts.packet(), adapter="scripted", config=config, owner=composer)
    child = Run.objects.get(parent=run)
    html = detail(client, run)
    assert 'data-state="COMPLETE"' in section(html, "run-head")
    assert f'href="/runs/{child.pk}/"' in section(html, "run-tree")
    assert "Child answer streamed." in section(html, "run-streams")
    assert "&quot;answer&quot;: 42" in section(html, "run-outcome")


# -- controls -----------------------------------------------------------------------------------

def test_cancelling_a_waiting_run_cancels_it(composer_client, composer, queued_tasks):
    run = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(), owner=composer)
    response = composer_client.post(f"/runs/{run.pk}/cancel/")
    assert response.status_code == 302 and response.url == f"/runs/{run.pk}/"
    run.refresh_from_db()
    assert run.state == "CANCELLED"
    assert "Run cancelled" in detail(composer_client, run)
    # a run that never reached a worker still hands back a result, saying so
    assert run.result["status"] == "FAILURE"
    assert run.result["error_report"]["code"] == "CANCELLED"
    assert run.result["summary"].endswith("Done so far: 0 model calls and no tool calls.")


def test_cancelling_a_finished_run_says_there_is_nothing_to_cancel(composer_client, composer):
    run = make_run(composer, state="COMPLETE")
    response = composer_client.post(f"/runs/{run.pk}/cancel/", follow=True)
    assert "already ended (COMPLETE); there is nothing to cancel" in response.content.decode()
    run.refresh_from_db()
    assert run.state == "COMPLETE"


def test_a_message_to_an_active_run_is_queued_for_its_next_turn(composer_client, composer):
    run = make_run(composer, state="WORKING")
    response = composer_client.post(f"/runs/{run.pk}/messages/", {"text": "Use option b."}, follow=True)
    assert "reads it at its next turn" in response.content.decode()
    message = RunMessage.objects.get(run=run)
    assert message.text == "Use option b." and message.sender == composer
    assert "1 message waiting" in section(response.content.decode(), "run-controls")


def test_a_message_to_a_finished_run_is_refused(composer_client, composer):
    run = make_run(composer, state="FAILED")
    response = composer_client.post(f"/runs/{run.pk}/messages/", {"text": "Hello?"}, follow=True)
    assert "already ended (FAILED); it cannot receive messages" in response.content.decode()
    assert not RunMessage.objects.exists()


def test_a_message_to_a_run_being_cancelled_or_under_one_is_refused(composer_client, composer):
    root = make_run(composer, state="WORKING", cancel_requested_at=timezone.now())
    child = make_run(composer, state="WORKING", parent=root, root_id=root.pk)
    for run, whose in ((root, "this run"), (child, "a run above this one")):
        response = composer_client.post(f"/runs/{run.pk}/messages/", {"text": "Hello?"}, follow=True)
        assert f"A cancel was requested for {whose}; it is stopping" in response.content.decode()
    assert not RunMessage.objects.exists()


def test_an_empty_message_is_refused(composer_client, composer):
    run = make_run(composer, state="WORKING")
    response = composer_client.post(f"/runs/{run.pk}/messages/", {"text": ""}, follow=True)
    assert "Write what the subagent should know." in response.content.decode()
    assert not RunMessage.objects.exists()


def test_retrying_a_failed_run_starts_a_new_attempt_with_the_failure(composer_client, composer, queued_tasks):
    run = make_run(composer, state="FAILED", error={"code": "ERR_TIMEOUT", "message": "Too slow."},
                   adapter_config=scripts.leaf())
    response = composer_client.post(f"/runs/{run.pk}/retry/", {"fix_instructions": "Be quicker."})
    retried = Run.objects.get(retry_of=run)
    assert response.status_code == 302 and response.url == f"/runs/{retried.pk}/"
    assert retried.attempt == 2 and retried.owner == composer and retried.previous_failure is not None
    assert retried.previous_failure["failure_report"] == "Too slow."
    assert retried.previous_failure["fix_instructions"] == "Be quicker."
    facts = section(detail(composer_client, retried), "run-facts")
    assert f'href="/runs/{run.pk}/"' in facts   # "retry of"


def test_retrying_a_run_that_is_still_going_is_refused(composer_client, composer):
    run = make_run(composer, state="WORKING")
    response = composer_client.post(f"/runs/{run.pk}/retry/", follow=True)
    assert "still going" in response.content.decode()
    assert not Run.objects.filter(retry_of=run).exists()


def test_an_approver_decides_a_pending_item_from_the_run_page(client, approver, queued_tasks, composer):
    run = make_run(composer, state="AWAITING_APPROVAL")
    approval = Approval.objects.create(run=run, key=f"{run.pk}:capability:x", kind="capability",
                                       title="Delete stale.txt", risk="high")
    client.force_login(approver)
    page = detail(client, run)
    assert f'action="/runs/{run.pk}/approvals/{approval.pk}/decision/"' in page
    response = client.post(f"/runs/{run.pk}/approvals/{approval.pk}/decision/", {"decision": "approve"})
    assert response.status_code == 302
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.decided_by == approver


def test_a_clarification_is_answered_from_the_run_page(client, approver, queued_tasks, composer):
    run = make_run(composer, state="AWAITING_APPROVAL")
    approval = Approval.objects.create(run=run, key=f"{run.pk}:clarification:1", kind="clarification",
                                       title="Which currency?")
    client.force_login(approver)
    page = detail(client, run)
    assert 'name="answer"' in page and 'value="approve"' not in page
    response = client.post(f"/runs/{run.pk}/approvals/{approval.pk}/decision/",
                           {"decision": "answer", "answer": "EUR"}, follow=True)
    assert "answered" in response.content.decode()
    approval.refresh_from_db()
    assert approval.status == "answered" and approval.answer == "EUR"


def test_a_rejection_needs_a_reason(client, approver, composer):
    run = make_run(composer, state="AWAITING_APPROVAL")
    approval = Approval.objects.create(run=run, key=f"{run.pk}:capability:x", kind="capability", title="x")
    client.force_login(approver)
    response = client.post(f"/runs/{run.pk}/approvals/{approval.pk}/decision/",
                           {"decision": "reject", "comment": ""}, follow=True)
    assert "A rejection needs a comment" in response.content.decode()
    approval.refresh_from_db()
    assert approval.is_pending


def test_the_run_owner_without_the_approver_role_cannot_decide(composer_client, composer):
    run = make_run(composer, state="AWAITING_APPROVAL")
    approval = Approval.objects.create(run=run, key=f"{run.pk}:capability:x", kind="capability", title="x")
    assert 'name="decision"' not in detail(composer_client, run)
    response = composer_client.post(f"/runs/{run.pk}/approvals/{approval.pk}/decision/", {"decision": "approve"})
    assert response.status_code == 403 and "approver role" in response.content.decode()
    approval.refresh_from_db()
    assert approval.is_pending


def test_state_changes_only_accept_post(composer_client, composer):
    run = make_run(composer, state="WORKING")
    for action in ("cancel", "messages", "retry"):
        assert composer_client.get(f"/runs/{run.pk}/{action}/").status_code == 405


# -- who sees what ------------------------------------------------------------------------------

def test_someone_elses_run_is_not_found_and_cannot_be_touched(outsider_client, composer):
    run = make_run(composer, state="WORKING")
    assert outsider_client.get(f"/runs/{run.pk}/").status_code == 404
    assert outsider_client.get(f"/runs/{run.pk}/live/").status_code == 404
    assert outsider_client.post(f"/runs/{run.pk}/cancel/").status_code == 404
    assert outsider_client.post(f"/runs/{run.pk}/messages/", {"text": "hi"}).status_code == 404
    assert outsider_client.get(f"/runs/new/?from={run.pk}").status_code == 403  # not a composer either
    run.refresh_from_db()
    assert run.state == "WORKING" and not RunMessage.objects.exists()


def test_staff_see_every_run(client, admin_user, composer):
    run = make_run(composer, label="carols-run")
    client.force_login(admin_user)
    assert "carols-run" in detail(client, run)


def test_pages_need_a_login(client, composer):
    run = make_run(composer)
    for url in ("/runs/", "/runs/new/", f"/runs/{run.pk}/", "/"):
        response = client.get(url)
        assert response.status_code == 302 and "/accounts/login/" in response.url


# -- the dashboard ------------------------------------------------------------------------------

def test_the_dashboard_shows_active_runs_recent_results_approvals_and_todays_usage(composer_client, composer):
    make_run(composer, label="busy-run", state="WORKING")
    done = make_run(composer, label="done-run", state="COMPLETE", finished_at=timezone.now(),
                    result={"status": "SUCCESS", "summary": "All three compared."},
                    usage={"model_calls": 4, "total_tokens": 1200, "cost_usd": 0.25})
    make_run(composer, label="yesterdays-run", state="COMPLETE",
             created_at=timezone.now() - timedelta(days=2), finished_at=timezone.now() - timedelta(days=2),
             usage={"model_calls": 100, "total_tokens": 99999, "cost_usd": 9.0})
    Approval.objects.create(run=done, key="k1", kind="clarification", title="x")  # theirs to answer
    Approval.objects.create(run=done, key="k2", kind="capability", title="y")     # an approver's
    response = composer_client.get("/")
    html = response.content.decode()
    assert "busy-run" in html and 'data-state="WORKING"' in html
    assert "done-run" in html and "All three compared." in html
    assert re.search(r'id="stat-approvals">1<', html)
    assert re.search(r'id="stat-calls">4 ', html) and "1,200 tokens" in html and "$0.2500" in html
    assert 'hx-trigger="every 5s"' in html   # active runs refresh themselves
    fragment = composer_client.get("/", headers={"HX-Request": "true"}).content.decode()
    assert fragment.lstrip().startswith('<div id="dashboard-live"') and "busy-run" in fragment


def test_an_empty_dashboard_points_to_skills_and_the_new_run_form(composer_client):
    html = composer_client.get("/").content.decode()
    assert "No run is active" in html and "No results yet" in html
    assert 'href="/skills/"' in html and 'href="/runs/new/"' in html
    assert "every 5s" not in html


def test_the_dashboard_counts_only_what_i_can_see(composer_client, composer, outsider):
    make_run(outsider, label="oscars-run", state="WORKING")
    html = composer_client.get("/").content.decode()
    assert "oscars-run" not in html and re.search(r'id="stat-active">0<', html)


@pytest.mark.django_db(transaction=True)
def test_a_composed_runs_tree_shows_planned_children_started_and_not_started(
        composer_client, composer, immediate_tasks):
    planned = [{"label": "pricer", "subagent_type": "researcher", "goal": "Read the price",
                "instruction_set": "Read it.", "input_data": {}, "success_criteria": ["JSON is schema-valid"]},
               {"label": "checker", "subagent_type": "verifier", "goal": "Check the price",
                "instruction_set": "Check it.", "input_data": {},
                "success_criteria": ["The price is a positive number"]}]
    config = {"script": [
        {"tool_calls": [{"name": "delegate_task", "arguments": {"label": "pricer", "input_data": {}}}]},
        scripts.yield_turn()],
        "children": {"pricer": scripts.leaf()}}
    run = run_create(packet=scripts.packet(planned_children=planned), adapter="scripted",
                     config=config, owner=composer)
    assert run.state == "COMPLETE", run.error
    tree = section(detail(composer_client, run), "run-tree")
    assert "pricer" in tree and ">planned<" in tree
    assert "checker" in tree and "planned, not started" in tree


def test_an_approver_opens_a_run_that_asks_them_but_cannot_act_on_it(client, approver, composer):
    run = make_run(composer, state="AWAITING_APPROVAL")
    Approval.objects.create(run=run, key=f"{run.pk}:capability:x", kind="capability", title="Delete stale.txt")
    client.force_login(approver)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "you can decide what it asks the inbox" in page
    assert f'action="/runs/{run.pk}/cancel/"' not in page
    assert client.post(f"/runs/{run.pk}/cancel/").status_code == 404
    quiet = make_run(composer, state="WORKING")   # asks nothing: not theirs to open
    assert client.get(f"/runs/{quiet.pk}/").status_code == 404


def test_a_run_waiting_for_a_person_shows_the_time_it_worked_not_the_time_since_it_started(composer):
    # the inbox said "Time 1 min 14 s" of a run whose page said it had worked 1.5 s: the
    # budget's clock stops while a run waits
    from delegations.run_pages.display import run_usage

    started = timezone.now() - timedelta(seconds=74)
    waiting = make_run(composer, state="AWAITING_APPROVAL", started_at=started, usage={"runtime_s": 1.5})
    working = make_run(composer, state="WORKING", started_at=started, usage={"runtime_s": 1.5})
    assert run_usage(waiting).runtime_s == 1.5
    assert run_usage(working).runtime_s >= 74
