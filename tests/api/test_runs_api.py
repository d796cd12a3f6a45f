"""/api/runs: create, list, detail, events, tree, cancel, messages, retry."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from delegations.models import Delegation, Run, RunMessage
from delegations.protocol.text_limits import MAX_MESSAGE_CHARS
from delegations.runs.workflows import run_create
from tests.delegations import scripts
from tests.skills.factories import add_skill

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def start(client: Client, headers: dict[str, str], body: dict[str, Any]) -> Any:
    return client.post("/api/runs", body, content_type="application/json", headers=headers)


def scripted(packet: dict[str, Any] | None = None, config: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"packet": packet or scripts.packet(),
            "adapter": {"name": "scripted", "config": config or scripts.leaf()}}


def test_a_composer_starts_a_run_and_reads_its_result(client: Client, composer_api: dict[str, str],
                                                       immediate_tasks: None) -> None:
    response = start(client, composer_api, scripted(config=scripts.with_child()))
    assert response.status_code == 201
    created = response.json()
    assert created["id"] and created["websocket"] == f"/ws/runs/{created['id']}/"
    detail = client.get(f"/api/runs/{created['id']}", headers=composer_api).json()
    assert detail["state"] == "COMPLETE" and detail["a2a_state"] == "TASK_STATE_COMPLETED"
    assert detail["result"]["output_payload"] == {"answer": 42}
    assert detail["usage"]["model_calls"] == 3 and detail["budget"]["max_model_calls"] == 20
    assert len(detail["input_hash"]) == 64 and detail["session_key"] == f"agent:main:subagent:{created['id']}"
    assert detail["children"][0]["state"] == "COMPLETE" and detail["parent"] is None
    assert detail["started_at"] and detail["finished_at"] and detail["attempt"] == 1
    assert detail["adapter"] == {"name": "scripted", "config": scripts.with_child()}


def test_an_invalid_packet_is_refused_with_every_issue(client: Client, composer_api: dict[str, str]) -> None:
    body = scripted(packet={"goal": 5, "max_iterations": "many", "budget": {"max_tokens": -1}})
    response = start(client, composer_api, body)
    assert response.status_code == 422
    fields = {issue["field"] for issue in response.json()["issues"]}
    assert {"goal", "max_iterations"} <= fields and any(f.startswith("budget") for f in fields)
    assert not Run.objects.exists()


def test_a_packet_with_lint_errors_becomes_a_rejected_run_showing_its_findings(
        client: Client, composer_api: dict[str, str]) -> None:
    response = start(client, composer_api, scripted(packet=scripts.packet(depth=9, max_depth=3)))
    assert response.status_code == 201
    run = response.json()
    assert run["state"] == "REJECTED" and run["error"]["code"] == "ERR_INVALID_PACKET"
    assert any(f["severity"] == "error" for f in run["findings"])
    events = client.get(f"/api/runs/{run['id']}/events", headers=composer_api).json()["events"]
    assert events[-1]["type"] == "result" and events[-1]["data"]["state"] == "REJECTED"


@pytest.mark.parametrize(("adapter", "named"), [
    ({"name": "gpt-banana"}, "gpt-banana"),
    ({"name": "scripted", "config": {"script": "not a list"}}, "script"),
    ({"name": "openai", "config": {"api_key": "sk-secret"}}, "api_key"),
])
def test_an_unknown_adapter_or_bad_config_is_refused_naming_it(
        client: Client, composer_api: dict[str, str], adapter: dict[str, Any], named: str) -> None:
    response = start(client, composer_api, {"packet": scripts.packet(), "adapter": adapter})
    assert response.status_code == 422
    assert named in response.json()["detail"]
    assert "sk-secret" not in response.content.decode()


@pytest.mark.parametrize("body", [{}, {"packet": scripts.packet(), "delegation_id": 1},
                                  {"packet": ["not", "an", "object"]}, {"packet": "{not json"}])
def test_a_body_without_exactly_one_usable_packet_source_is_422(
        client: Client, composer_api: dict[str, str], body: dict[str, Any]) -> None:
    assert start(client, composer_api, body).status_code == 422


def test_malformed_json_is_422_not_500(client: Client, composer_api: dict[str, str]) -> None:
    response = client.post("/api/runs", "{oops", content_type="application/json", headers=composer_api)
    assert response.status_code in (400, 422)


def test_a_saved_delegation_can_be_run(client: Client, composer: Any, composer_api: dict[str, str],
                                       queued_tasks: None) -> None:
    delegation = Delegation.objects.create(name="caching", packet=scripts.packet(), owner=composer)
    response = start(client, composer_api, {"delegation_id": delegation.pk,
                                            "adapter": {"name": "scripted", "config": scripts.leaf()}})
    assert response.status_code == 201
    assert Run.objects.get(pk=response.json()["id"]).delegation == delegation
    assert start(client, composer_api, {"delegation_id": delegation.pk + 99}).status_code == 404


def test_a_run_naming_a_skill_pins_its_latest_version_and_follows_its_instructions(
        client: Client, composer_api: dict[str, str], immediate_tasks: None) -> None:
    scripts.add_caching_skill("1.0.0", instructions="# Old\n\nThe first way.\n")
    scripts.add_caching_skill("1.1.0")
    response = start(client, composer_api, scripted(scripts.skill_packet("caching"),
                                                    scripts.leaf(scripts.SKILL_OUTPUT)))
    assert response.status_code == 201
    body = response.json()
    assert body["skill"] == "caching@1.1.0"
    run = Run.objects.get(pk=body["id"])
    assert run.packet["skill"] == "caching@1.1.0" and run.state == "COMPLETE"
    # the skill's instructions and output schema are what the model was given
    first = scripts.first_system_message(run.pk)
    assert scripts.SKILL_INSTRUCTIONS in first and '"currency"' in first
    assert run.result["output_payload"] == scripts.SKILL_OUTPUT


def test_input_that_breaks_the_skills_input_schema_is_422_naming_the_field_and_writes_no_run(
        client: Client, composer_api: dict[str, str], immediate_tasks: None) -> None:
    scripts.add_caching_skill("1.0.0")
    response = start(client, composer_api, scripted(scripts.skill_packet(
        "caching@1.0.0", input_data={"options": [""]})))
    assert response.status_code == 422
    body = response.json()
    assert body["code"] == "ERR_INVALID_PACKET"
    assert body["detail"] == "input_data.options[0]: '' should be non-empty (skill caching@1.0.0's input_schema)"
    assert [issue["field"] for issue in body["issues"]] == ["input_data.options[0]"]
    assert not Run.objects.exists()


@pytest.mark.parametrize(("ref", "says"), [
    ("no-such-skill@9.9.9", "Skill 'no-such-skill' is not in the registry"),
    ("caching@9.9.9", "Skill caching has no version '9.9.9' in the registry (it has 1.0.0)"),
])
def test_an_unknown_skill_or_version_is_422_and_writes_no_run(
        client: Client, composer_api: dict[str, str], immediate_tasks: None, ref: str, says: str) -> None:
    scripts.add_caching_skill("1.0.0")
    response = start(client, composer_api, scripted(scripts.skill_packet(ref)))
    assert response.status_code == 422
    body = response.json()
    assert body["code"] == "ERR_INVALID_PACKET" and says in body["detail"]
    assert body["issues"][0]["field"] == "skill"
    assert not Run.objects.exists()


def test_a_skill_whose_instruction_file_was_never_imported_is_422(
        client: Client, composer_api: dict[str, str], immediate_tasks: None) -> None:
    add_skill("caching", "1.0.0", input_schema={"options": ["string"]})  # manifest.json alone
    response = start(client, composer_api, scripted(scripts.skill_packet("caching@1.0.0")))
    assert response.status_code == 422
    assert "instruction file instructions.md is missing from its bundle" in response.json()["detail"]
    assert not Run.objects.exists()


def test_starting_runs_needs_the_composer_role_and_a_login(client: Client, outsider_api: dict[str, str]) -> None:
    assert start(client, outsider_api, scripted()).status_code == 403
    anonymous = start(client, {}, scripted())
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"] == "Bearer"
    assert "send `Authorization: Bearer <token>`" in anonymous.json()["detail"]
    wrong = start(client, {"Authorization": "Bearer hnd_wrong"}, scripted())
    assert wrong.status_code == 401 and wrong["WWW-Authenticate"] == 'Bearer error="invalid_token"'
    assert wrong.json()["detail"].startswith("This API token is wrong or was revoked")


def test_a_misspelt_field_is_refused_naming_it_and_nothing_starts(
        client: Client, composer_api: dict[str, str]) -> None:
    response = start(client, composer_api, {**scripted(), "adaptor": {"name": "scripted"}, "wiat": 30})
    assert response.status_code == 422
    assert [(error["loc"][-1], error["msg"].split(":")[0]) for error in response.json()["detail"]] == [
        ("adaptor", "Unknown field 'adaptor'"), ("wiat", "Unknown field 'wiat'")]
    assert not Run.objects.exists()


def test_the_list_filters_by_state_skill_owner_and_roots_and_pages(
        client: Client, composer: Any, composer_api: dict[str, str], queued_tasks: None) -> None:
    for index in range(3):
        scripts.add_caching_skill(f"1.{index}.0")
        run_create(packet=scripts.packet(skill=f"caching@1.{index}.0"), adapter="scripted",
                   config=scripts.leaf(), owner=composer, start=False)
    Run.objects.filter(skill="caching@1.0.0").update(state="COMPLETE")
    page = client.get("/api/runs?page_size=2", headers=composer_api).json()
    assert (page["count"], page["pages"], len(page["results"])) == (3, 2, 2)
    assert client.get("/api/runs?page=2&page_size=2", headers=composer_api).json()["results"]
    assert client.get("/api/runs?state=COMPLETE", headers=composer_api).json()["count"] == 1
    assert client.get("/api/runs?state=pending,complete", headers=composer_api).json()["count"] == 3
    assert client.get("/api/runs?skill=caching", headers=composer_api).json()["count"] == 3
    assert client.get("/api/runs?skill=caching@1.2.0", headers=composer_api).json()["count"] == 1
    assert client.get("/api/runs?owner=carol&root_only=true", headers=composer_api).json()["count"] == 3
    assert client.get("/api/runs?owner=nobody", headers=composer_api).json()["count"] == 0


@pytest.mark.parametrize("query", ["state=DANCING", "page=0", "page=x", "page_size=1000", "root_only=maybe"])
def test_bad_list_filters_are_422(client: Client, composer_api: dict[str, str], query: str) -> None:
    assert client.get(f"/api/runs?{query}", headers=composer_api).status_code == 422


def test_people_see_their_own_runs_and_staff_see_all(
        client: Client, composer: Any, composer_api: dict[str, str], outsider_api: dict[str, str],
        admin_user: Any) -> None:
    run = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(),
                     owner=composer, start=False)
    assert client.get(f"/api/runs/{run.pk}", headers=outsider_api).status_code == 404
    assert client.get("/api/runs", headers=outsider_api).json()["count"] == 0
    client.force_login(admin_user)
    assert client.get(f"/api/runs/{run.pk}").status_code == 200
    assert client.get("/api/runs/does-not-exist").status_code == 404


def test_events_after_n_and_the_tree(client: Client, composer_api: dict[str, str],
                                     immediate_tasks: None) -> None:
    run_id = start(client, composer_api, scripted(config=scripts.with_child())).json()["id"]
    everything = client.get(f"/api/runs/{run_id}/events", headers=composer_api).json()
    assert [e["seq"] for e in everything["events"]] == list(range(1, everything["last_seq"] + 1))
    later = client.get(f"/api/runs/{run_id}/events?after=3&limit=2", headers=composer_api).json()
    assert [e["seq"] for e in later["events"]] == [4, 5] and later["more"] is True
    assert client.get(f"/api/runs/{run_id}/events?after=-1", headers=composer_api).status_code == 422
    tree = client.get(f"/api/runs/{run_id}/tree", headers=composer_api).json()
    assert tree["id"] == run_id and tree["children"][0]["label"] == "kid"
    assert tree["children"][0]["children"] == []


def test_cancel_stops_a_waiting_run_and_is_409_once_it_ended(
        client: Client, composer: Any, composer_api: dict[str, str], queued_tasks: None) -> None:
    run = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(), owner=composer)
    response = client.post(f"/api/runs/{run.pk}/cancel", headers=composer_api)
    assert response.status_code == 200 and response.json()["state"] == "CANCELLED"
    again = client.post(f"/api/runs/{run.pk}/cancel", headers=composer_api)
    assert again.status_code == 409 and "already ended" in again.json()["detail"]


def test_messages_are_queued_for_a_live_run_and_409_for_a_finished_one(
        client: Client, composer: Any, composer_api: dict[str, str], immediate_tasks: None) -> None:
    parked = run_create(packet=scripts.approval_packet(), adapter="scripted",
                        config=scripts.needs_approval(), owner=composer)
    url = f"/api/runs/{parked.pk}/messages"
    response = client.post(url, {"text": "Keep the backup."}, content_type="application/json",
                           headers=composer_api)
    assert response.status_code == 202 and response.json()["queued"] is True
    assert RunMessage.objects.get().text == "Keep the backup."
    assert client.post(url, {"text": "  "}, content_type="application/json",
                       headers=composer_api).status_code == 422
    assert client.post(url, {}, content_type="application/json", headers=composer_api).status_code == 422
    done = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(), owner=composer)
    finished = client.post(f"/api/runs/{done.pk}/messages", {"text": "hello"},
                           content_type="application/json", headers=composer_api)
    assert finished.status_code == 409


def test_a_message_past_the_limit_is_422_naming_it_and_nothing_is_queued(
        client: Client, composer: Any, composer_api: dict[str, str], queued_tasks: None) -> None:
    run = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(), owner=composer)
    url = f"/api/runs/{run.pk}/messages"
    response = client.post(url, {"text": "x" * (MAX_MESSAGE_CHARS + 1)}, content_type="application/json",
                           headers=composer_api)
    assert response.status_code == 422
    assert f"at most {MAX_MESSAGE_CHARS:,} characters" in response.json()["detail"]
    assert not RunMessage.objects.exists()
    at_the_limit = client.post(url, {"text": "x" * MAX_MESSAGE_CHARS}, content_type="application/json",
                               headers=composer_api)
    assert at_the_limit.status_code == 202


def test_a_message_to_a_run_being_cancelled_is_409_saying_so(
        client: Client, composer: Any, composer_api: dict[str, str], queued_tasks: None) -> None:
    run = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(), owner=composer)
    # as when a worker holds the run: the cancel is asked for and the run stops at its next check
    Run.objects.filter(pk=run.pk).update(cancel_requested_at=timezone.now())
    response = client.post(f"/api/runs/{run.pk}/messages", {"text": "Keep the backup."},
                           content_type="application/json", headers=composer_api)
    assert response.status_code == 409
    assert "A cancel was requested for this run" in response.json()["detail"]
    assert not RunMessage.objects.exists()


def test_retry_starts_a_new_attempt_with_the_previous_failure(
        client: Client, composer: Any, composer_api: dict[str, str], immediate_tasks: None,
        settings: Any) -> None:
    settings.HANDOFF_INVALID_RESULT_POLICY = "fail"    # no inbox item: the run fails at once
    failing = {"script": [scripts.yield_turn({"answer": "not a number"}),
                          scripts.yield_turn({"answer": "still not"})]}
    run = run_create(packet=scripts.packet(), adapter="scripted", config=failing, owner=composer)
    assert run.state == "FAILED"
    response = client.post(f"/api/runs/{run.pk}/retry", {"fix_instructions": "Answer with an integer."},
                           content_type="application/json", headers=composer_api)
    assert response.status_code == 201
    retried = response.json()
    assert retried["attempt"] == 2 and retried["retry_of"] == run.pk
    assert retried["previous_failure"]["attempt_number"] == 1
    assert retried["previous_failure"]["fix_instructions"] == "Answer with an integer."
    assert retried["previous_failure"]["failure_report"]


def test_retrying_a_complete_run_returns_it_first_and_a_running_one_is_409(
        client: Client, composer: Any, composer_api: dict[str, str], queued_tasks: None,
        settings: Any) -> None:
    settings.TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
    done = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(), owner=composer)
    assert client.post(f"/api/runs/{done.pk}/retry", headers=composer_api).status_code == 201
    done.refresh_from_db()
    assert done.state == "RETURNED"
    waiting = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(),
                         owner=composer, start=False)
    assert client.post(f"/api/runs/{waiting.pk}/retry", headers=composer_api).status_code == 409


def test_a_body_past_the_upload_limit_is_a_413_naming_the_limit(client: Client, composer_api: dict[str, str],
                                                                 settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    response = client.post("/api/runs", {**scripted(), "note": "a" * 20_000}, content_type="application/json",
                           headers=composer_api)
    assert response.status_code == 413
    assert response.json()["detail"] == ("The request body is larger than this server accepts "
                                         "(10,000 bytes, DATA_UPLOAD_MAX_MEMORY_SIZE).")
    assert not Run.objects.exists()


def test_an_idempotency_key_sent_again_answers_with_the_run_it_started(
        client: Client, composer_api: dict[str, str], immediate_tasks: None) -> None:
    """A program whose start timed out sends it again: one run, not two."""
    keyed = {**composer_api, "Idempotency-Key": "order-7"}
    first = start(client, keyed, scripted())
    again = start(client, keyed, scripted())
    assert first.status_code == again.status_code == 201
    assert again.json()["id"] == first.json()["id"] and Run.objects.count() == 1
    assert again["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first
    assert again.json()["state"] == "COMPLETE"
    assert start(client, composer_api, scripted()).json()["id"] != first.json()["id"]  # no key: a new run


def test_an_idempotency_key_with_another_body_is_422_and_starts_nothing(
        client: Client, composer_api: dict[str, str], immediate_tasks: None) -> None:
    keyed = {**composer_api, "Idempotency-Key": "order-8"}
    first = start(client, keyed, scripted())
    other = start(client, keyed, scripted(packet=scripts.packet(goal="Another goal")))
    assert other.status_code == 422 and Run.objects.count() == 1
    assert "started an earlier run with another body" in other.json()["detail"]
    assert first.json()["id"] in {run.pk for run in Run.objects.all()}


@pytest.mark.parametrize("key", ["   ", "k" * 201])
def test_an_empty_or_overlong_idempotency_key_is_422(client: Client, composer_api: dict[str, str], key: str) -> None:
    response = start(client, {**composer_api, "Idempotency-Key": key}, scripted())
    assert response.status_code == 422 and "must be 1 to 200 characters" in response.json()["detail"]
    assert not Run.objects.exists()


def test_a_refused_start_does_not_keep_its_idempotency_key(
        client: Client, composer_api: dict[str, str], immediate_tasks: None) -> None:
    keyed = {**composer_api, "Idempotency-Key": "order-9"}
    assert start(client, keyed, scripted(packet={"goal": 5})).status_code == 422
    assert start(client, keyed, scripted()).status_code == 201 and Run.objects.count() == 1


def test_the_schema_documents_the_idempotency_key_header(client: Client) -> None:
    operation = client.get("/api/openapi.json").json()["paths"]["/api/runs"]["post"]
    header = next(p for p in operation["parameters"] if p["name"] == "Idempotency-Key")
    assert header["in"] == "header" and "kept a day" in header["description"]


def test_a_field_of_the_wrong_type_is_named_as_a_person_writes_it_once(
        client: Client, composer_api: dict[str, str]) -> None:
    """Pydantic says a union's every branch failed, at locations such as
    body.body.packet.dict[str,any]: the answer names the field once, with both kinds."""
    response = start(client, composer_api, {"packet": 5, "adapter": {"name": 5}})
    assert response.status_code == 422
    assert [(error["field"], error["msg"]) for error in response.json()["detail"]] == [
        ("packet", "Input should be a valid dictionary or a valid string"),
        ("adapter.name", "Input should be a valid string")]
    assert not Run.objects.exists()
