"""Review items end to end with scripted runs whose model scores its labels: a value the
model is unsure of parks as a review item; a person confirms or corrects it within the
schema (from the inbox page or the API), a rule may confirm it, and the run completes
with the decided value, audited on the item, the run's result and its criteria report."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from delegations.inbox.decisions import approval_decide
from delegations.inbox.rule_store import rule_save
from delegations.models import Approval, Run
from delegations.refusals import Refusal
from delegations.runs.workflows import run_create
from tests.conftest import bearer, make_user
from tests.delegations import scripts

pytestmark = [pytest.mark.django_db(transaction=True)]

SCHEMA = {"type": "object", "required": ["evidence", "sentiment"],
          "properties": {"evidence": {"type": "string"},
                         "sentiment": {"type": "string", "enum": ["positive", "negative", "mixed"]}}}
REVIEW = "The kettle is loud, but it boils in a minute."
MIXED = {"evidence": "loud, but it boils in a minute", "sentiment": "mixed"}


def scores(value: str, probability: float) -> dict[str, Any]:
    others = [name for name in ("positive", "negative", "mixed") if name != value]
    return {"sentiment": {"value": value, "probability": probability, "calibrated": True,
                          "alternatives": [{"value": others[0], "probability": round(1 - probability - 0.05, 2)},
                                           {"value": others[1], "probability": 0.05}]}}


def reviewing_run(owner: Any, payload: dict[str, Any] = MIXED, probability: float = 0.55) -> Run:
    turn = {**scripts.yield_turn(payload), "label_scores": scores(payload["sentiment"], probability)}
    packet = scripts.packet(goal="Classify the review.", input_data={"review": REVIEW},
                            allowed_inputs=["review"], expected_output_schema=SCHEMA,
                            success_criteria=["`evidence` is quoted from `review`",
                                              {"kind": "confident", "path": "sentiment", "min": 0.8}])
    run = run_create(packet=packet, adapter="scripted", config={"script": [turn, turn]}, owner=owner)
    run.refresh_from_db()
    return run


def item_of(run: Run) -> Approval:
    return Approval.objects.select_related("run", "decided_by").get(run_id=run.pk, kind="review")


def test_an_unsure_label_parks_a_review_item_that_says_what_is_reviewed(composer, immediate_tasks):
    run = reviewing_run(composer)
    assert run.state == "AWAITING_APPROVAL", run.error
    item = item_of(run)
    assert item.allowed == ("approve", "edit", "reject")
    assert item.title.startswith(f"Review sentiment of {run.label}")
    assert 'proposes sentiment = "mixed" (55 %)' in item.title
    assert item.payload["input"] == {"review": REVIEW}


def test_a_correction_completes_the_run_with_the_persons_value_audited(composer, approver, immediate_tasks):
    run = reviewing_run(composer)
    decided = approval_decide(approval=item_of(run), user=approver, decision="edit",
                              edited_arguments={"sentiment": "negative"})
    assert decided.status == "edited" and decided.edited_arguments == {"sentiment": "negative"}
    run.refresh_from_db()
    assert run.state == "COMPLETE", run.error
    assert run.result["output_payload"] == {**MIXED, "sentiment": "negative"}
    assert run.result["metrics"]["review"]["decided_by"] == approver.username
    report = run.criteria_report
    assert report["summary"] == "all met"
    assert f"by {approver.username} in review" in report["items"][1]["detail"]


@pytest.mark.parametrize(("values", "problem"), [
    ({"sentiment": "furious"}, "sentiment: 'furious' is not one of"),
    ({"evidence": "it is noisy"}, "evidence: not a field under review; correct sentiment."),
    ({}, "expected a JSON object with the corrected value of a field under review (sentiment)"),
])
def test_a_correction_outside_the_schema_is_refused_naming_the_field(composer, approver, immediate_tasks,
                                                                    values: dict[str, Any], problem: str):
    item = item_of(reviewing_run(composer))
    with pytest.raises(Refusal) as caught:
        approval_decide(approval=item, user=approver, decision="edit", edited_arguments=values)
    assert caught.value.status == 422 and problem in caught.value.message
    item.refresh_from_db()
    assert item.is_pending


def test_the_inbox_page_shows_the_input_the_proposal_and_its_alternatives_then_the_audit(
        composer, approver_client, immediate_tasks):
    run = reviewing_run(composer)
    item = item_of(run)
    html = approver_client.get("/inbox/").content.decode()
    assert "Value to review" in html and REVIEW in html
    assert 'data-proposed>mixed<' in html and "data-probability" in html and "55 %" in html
    assert "Alternatives:" in html and "negative" in html
    assert ">Confirm mixed<" in html and "Correct sentiment to" in html and ">Fail<" in html
    assert "Why fail it?" in html and "Why reject? (shown" not in html   # the button says Fail
    assert "Confirm completes run “" in html and "&#x27;s run with" not in html   # not "run “x”'s run"
    choice = json.dumps({"sentiment": "negative"})
    assert choice.replace('"', "&quot;") in html
    response = approver_client.post(f"/inbox/{item.pk}/decision/", {
        "decision": "edit", "confirm": "on", "edited_arguments": choice})
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.state == "COMPLETE" and run.result["output_payload"]["sentiment"] == "negative"
    history = approver_client.get("/inbox/history/").content.decode()
    assert "Corrected <span class=\"mono\">sentiment</span> to <strong class=\"mono\">negative</strong>" in history
    # the outcome in a review's own words, once: not "edited · edit by alice"
    assert re.search(r'<span class="badge [^"]*">corrected</span>\s*<span class="audit-who">by <strong>alice', history)
    # and in the inbox's "Recently decided" and the run's timeline, not "edited" and "edit"
    recent = approver_client.get("/inbox/").content.decode().split('id="inbox-history"')[1]
    assert re.search(r'<span class="badge [^"]*">corrected</span>', recent) and ">edited<" not in recent
    timeline = approver_client.get(f"/runs/{run.pk}/").content.decode()
    assert "Review decided: corrected by alice" in timeline and "Approval decided: edit" not in timeline
    assert ">edited<" not in timeline.split('id="run-approvals"')[1].split("</section>")[0]


def test_the_api_confirms_and_the_run_completes_with_the_proposed_value(composer, approver_api, immediate_tasks,
                                                                        client):
    run = reviewing_run(composer)
    item = item_of(run)
    detail = client.get(f"/api/approvals/{item.pk}", headers=approver_api).json()
    assert detail["context"]["review"]["fields"][0]["proposed"] == "mixed"
    assert any(line.startswith("edit, with edited_arguments") for line in detail["grants"])
    bad = client.post(f"/api/approvals/{item.pk}/decision", data={"decision": "edit",
                      "edited_arguments": {"sentiment": 3}}, content_type="application/json", headers=approver_api)
    assert bad.status_code == 422 and "sentiment: 3 is not of type 'string'" in bad.json()["detail"]
    done = client.post(f"/api/approvals/{item.pk}/decision", data={"decision": "approve"},
                       content_type="application/json", headers=approver_api)
    assert done.status_code == 200
    run.refresh_from_db()
    assert run.state == "COMPLETE" and run.result["output_payload"] == MIXED
    assert run.result["metrics"]["review"]["decision"] == "confirmed"


def test_a_rule_confirms_positive_reviews_above_its_probability_and_leaves_the_rest(
        django_user_model, composer, immediate_tasks):
    author = make_user(django_user_model, "rita", "approvers", "rule_authors", password=None)
    rule_save(rule=None, user=author, data={
        "name": "confirm positive reviews above 0.7", "reason": "a wrong positive costs little",
        "effect": "approve", "match": {"kinds": ["review"], "arguments": [
            {"name": "value", "op": "equals", "value": "positive"},
            {"name": "probability", "op": "range", "min": 0.7}]}})
    sure = reviewing_run(composer, {**MIXED, "sentiment": "positive"}, probability=0.75)
    unsure = reviewing_run(composer, {**MIXED, "sentiment": "positive"}, probability=0.6)
    assert sure.state == "COMPLETE", sure.error
    assert item_of(sure).decider == "rule 'confirm positive reviews above 0.7' v1"
    assert sure.result["metrics"]["review"]["decided_by"] == "rule 'confirm positive reviews above 0.7' v1"
    assert unsure.state == "AWAITING_APPROVAL" and item_of(unsure).is_pending


def test_the_run_page_and_the_api_name_each_unchecked_field(composer, composer_client, composer_api, client,
                                                           immediate_tasks):
    run = run_create(packet=scripts.packet(expected_output_schema=SCHEMA, success_criteria=["JSON is schema-valid"]),
                     adapter="scripted", config={"script": [scripts.yield_turn(MIXED)]}, owner=composer)
    run.refresh_from_db()
    html = composer_client.get(f"/runs/{run.pk}/").content.decode()
    assert "1 of 1 criteria met · 2 fields unchecked" in html and ">all met<" not in html
    assert 'data-unchecked-field="sentiment"' in html
    report = client.get(f"/api/runs/{run.pk}", headers=composer_api).json()["criteria_report"]
    assert report["fields_unchecked"] == ["evidence", "sentiment"]
    assert report["summary"] == "1 of 1 criteria met · 2 fields unchecked"


def test_lint_names_a_confident_criterion_on_a_field_that_is_not_a_label(composer_api, client):
    packet = scripts.packet(expected_output_schema=SCHEMA, input_data={"review": REVIEW}, allowed_inputs=["review"],
                            success_criteria=[{"kind": "confident", "path": "evidence", "min": 0.8},
                                              "`evidence` is quoted from `reviews`",
                                              {"kind": "confident", "path": "sentiment", "min": 1.5}])
    body = client.post("/api/delegations/lint", data=packet, content_type="application/json",
                       headers=composer_api).json()
    assert body["problems"] == [{"field": "success_criteria[2].min",
                                 "message": "expected a probability between 0 and 1; got 1.5 (write 80% as 0.8)"}]
    fixed = {**packet, "success_criteria": packet["success_criteria"][:2]}
    findings = client.post("/api/delegations/lint", data=fixed, content_type="application/json",
                           headers=composer_api).json()["findings"]
    errors = {(finding["code"], finding["field"]) for finding in findings if finding["severity"] == "error"}
    assert errors == {("CONFIDENT_NOT_A_LABEL", "success_criteria[0]"),
                      ("CRITERION_SOURCE_UNKNOWN", "success_criteria[1]")}


def test_an_approver_token_is_what_decides(composer, immediate_tasks, client, django_user_model):
    run = reviewing_run(composer)
    outsider = make_user(django_user_model, "otto", password=None)
    refused = client.post(f"/api/approvals/{item_of(run).pk}/decision", data={"decision": "approve"},
                          content_type="application/json", headers=bearer(outsider))
    assert refused.status_code in (403, 404)
