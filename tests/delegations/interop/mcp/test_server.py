"""Handoff as an MCP server, driven by the official ``mcp`` client against a live server
process on loopback (``manage.py serve``: uvicorn, the embedded worker, the scripted adapter)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import jsonschema
import mcp_types
import pytest
from django.core.management import call_command

from delegations.models import APIToken, Approval, Delegation, Run
from skills.models import Skill
from tests.conftest import make_user
from tests.delegations import scripts
from tests.delegations.interop.mcp.client import call, raw, rpc_tool, structured, text, tool

pytestmark = [pytest.mark.slow]

SENTIMENT = {"evidence": "stopped charging after a week", "sentiment": "negative"}
REVIEW = {"review": "My headphones stopped charging after a week."}


@pytest.fixture
def site(live_url: str, django_user_model: Any) -> dict[str, Any]:
    """The live server with the built-in catalog, a composer and an approver with tokens."""
    call_command("load_builtin_skills", verbosity=0)
    composer = make_user(django_user_model, "carol", "composers", password=None)
    approver = make_user(django_user_model, "alice", "approvers", password=None)
    outsider = make_user(django_user_model, "oscar", password=None)
    tokens = {name: APIToken.issue(user=user, name="mcp")[1]
              for name, user in (("composer", composer), ("approver", approver), ("outsider", outsider))}
    return {"url": live_url, **tokens, "composer_user": composer}


def _start(site: dict[str, Any], **arguments: Any) -> Any:
    return tool(site["url"], site["composer"], "start_run", arguments)


def _wait(site: dict[str, Any], run_id: str, token: str | None = None, *, calls: int = 8) -> dict[str, Any]:
    """wait_for_run until the run ends or parks (each call at most 25 s)."""
    for _ in range(calls):
        view = structured(tool(site["url"], token or site["composer"], "wait_for_run",
                               {"run_id": run_id, "timeout_s": 20}))
        if not view["status"].startswith("working"):
            return view
    raise AssertionError(f"run {run_id} still working: {view}")


def test_waiting_for_a_run_id_that_names_no_run_says_so(site: dict[str, Any]) -> None:
    for run_id in ("W\x1c\xf7:[K", "r" * 120):
        result = tool(site["url"], site["composer"], "wait_for_run", {"run_id": run_id, "timeout_s": 1})
        assert result.is_error and "Internal" not in text(result), text(result)


def test_a_client_lists_the_tools_with_their_hints(site: dict[str, Any]) -> None:
    async def job(client: Any) -> Any:
        return await client.list_tools()
    tools = {t.name: t for t in call(site["url"], site["composer"], job).tools}
    assert {"find_skills", "describe_skill", "lint_packet", "start_run", "read_run", "wait_for_run",
            "cancel_run", "send_message", "answer_clarification"} <= set(tools)
    assert tools["read_run"].annotations.read_only_hint is True
    assert tools["cancel_run"].annotations.destructive_hint is True
    assert tools["start_run"].annotations.open_world_hint is True
    assert not any("approv" in name for name in tools), "no tool decides an approval"


def test_find_and_describe_a_skill(site: dict[str, Any]) -> None:
    found = structured(tool(site["url"], site["composer"], "find_skills", {"text": "review sentiment"}))
    assert [s["name"] for s in found["skills"]] == ["review-sentiment"]
    described = structured(tool(site["url"], site["composer"], "describe_skill", {"name": "review-sentiment"}))
    assert described["version"] == "1.2.0" and described["versions"] == ["1.2.0", "1.1.0", "1.0.0"]
    assert described["input_schema"]["required"] == ["review"]
    assert described["examples"][0]["output"]["sentiment"] == "negative"


def test_a_built_in_skill_runs_to_a_schema_valid_result(site: dict[str, Any]) -> None:
    started = structured(_start(site, skill="review-sentiment", input=REVIEW, adapter="scripted",
                                adapter_config=scripts.leaf(SENTIMENT)))
    assert started["state"] in {"PENDING", "ACCEPTED", "WORKING"}
    assert started["page_url"] == f"{site['url']}/runs/{started['run_id']}/"
    ended = _wait(site, started["run_id"])
    assert ended["state"] == "COMPLETE", ended
    schema = Skill.objects.get(name="review-sentiment", version="1.2.0").output_schema
    jsonschema.validate(ended["result"]["output_payload"], schema)
    assert ended["result"]["output_payload"] == SENTIMENT
    assert Run.objects.get(pk=started["run_id"]).owner == site["composer_user"]
    # a scripted model gives no probabilities: its sentiment is not shown as checked
    report = ended["criteria_report"]
    assert report["summary"] == "1 of 2 criteria met" and "cannot be checked with this model" in \
        report["items"][1]["detail"]


def test_a_run_that_needs_the_network_parks_until_an_approver_decides_in_the_inbox(site: dict[str, Any]) -> None:
    script = {"script": [
        {"text": "Fetching the quote.", "tool_calls": [
            {"name": "http_get", "arguments": {"url": "http://127.0.0.1:9/quote"}}]},
        scripts.yield_turn({"price": 1.5, "currency": "EUR"})]}
    started = structured(_start(site, skill="price-research@1.2.0", input={"query": "price of a kettle"},
                                adapter="scripted", adapter_config=script))
    parked = _wait(site, started["run_id"])
    assert parked["status"].startswith("awaiting approval"), parked
    item = parked["waiting_for_a_person"][0]
    assert item["kind"] == "capability"
    assert item["inbox_url"] == f"{site['url']}/inbox/#approval-{item['item_id']}"
    # the caller cannot decide it through any tool
    refused = tool(site["url"], site["composer"], "answer_clarification",
                   {"item_id": item["item_id"], "answer": "approve"})
    assert refused.is_error and "only an approver decides" in text(refused)
    assert Approval.objects.get(pk=item["item_id"]).status == "pending"
    decisions: list[httpx.Response] = []
    approver = threading.Timer(1.5, lambda: decisions.append(httpx.post(
        f"{site['url']}/api/approvals/{item['item_id']}/decision", json={"decision": "approve", "comment": "ok"},
        headers={"Authorization": f"Bearer {site['approver']}"})))
    approver.start()
    began = time.monotonic()
    waited = structured(tool(site["url"], site["composer"], "wait_for_run",
                             {"run_id": started["run_id"], "timeout_s": 20}))
    approver.join()
    assert decisions[0].status_code == 200, decisions[0].text
    # a wait on a run already waiting for a decision waits for it (it answered at once before)
    assert time.monotonic() - began >= 1.4 and not waited["status"].startswith("awaiting approval"), waited
    ended = waited if waited["status"].startswith("ended") else _wait(site, started["run_id"])
    assert ended["state"] == "COMPLETE" and ended["result"]["output_payload"]["currency"] == "EUR"


def test_the_same_start_twice_is_one_run(site: dict[str, Any]) -> None:
    arguments = {"skill": "review-sentiment", "input": REVIEW, "adapter": "scripted",
                 "adapter_config": scripts.leaf(SENTIMENT)}
    first = structured(_start(site, **arguments))
    again = structured(_start(site, **arguments))
    assert (again["run_id"], again["replayed"], first["replayed"]) == (first["run_id"], True, False)
    keyed = [structured(_start(site, **arguments, idempotency_key="order-7"))["run_id"] for _ in range(2)]
    assert keyed[0] == keyed[1] != first["run_id"]
    reused = _start(site, **{**arguments, "input": {"review": "Another review."}}, idempotency_key="order-7")
    assert reused.is_error and "idempotency_key 'order-7' was used for an earlier start with other" in text(reused)
    assert Run.objects.filter(parent__isnull=True).count() == 2


@pytest.mark.parametrize(("arguments", "expected"), [
    ({"skill": "no-such-skill", "input": {}}, ["'no-such-skill' is not in the registry"]),
    ({"skill": "review-sentiment@9.9.9", "input": REVIEW}, ["has no version '9.9.9'"]),
    ({"skill": "review-sentiment", "input": {"review": "", "stars": 5}},
     ["input_data.review", "input_data"]),
    ({"packet": "{not json"}, ["packet"]),
    ({"packet": scripts.packet(timeout_s=0, budget={"max_tokens": -1})}, ["timeout_s", "budget.max_tokens"]),
    ({"packet": scripts.packet(goal="", depth=9)}, ["- goal:", "- depth:"]),
    ({"skill": "review-sentiment", "input": REVIEW, "budget": {"max_tokens": "lots", "nope": 1}},
     ["budget.max_tokens", "budget.nope"]),
    ({}, ["exactly one of"]),
])
def test_bad_input_is_one_tool_error_listing_every_issue_and_no_run(
        site: dict[str, Any], arguments: dict[str, Any], expected: list[str]) -> None:
    result = _start(site, **arguments)
    assert result.is_error
    for words in expected:
        assert words in text(result), text(result)
    assert not Run.objects.exists()


def test_a_budget_above_the_saved_delegation_is_refused(site: dict[str, Any]) -> None:
    delegation = Delegation.objects.create(name="capped", owner=site["composer_user"],
                                           packet=scripts.packet(budget={"max_model_calls": 5, "max_tokens": 1000}))
    result = _start(site, delegation_id=delegation.pk, budget={"max_model_calls": 50, "max_tokens": 100000})
    assert result.is_error
    assert "budget.max_model_calls: at most 5" in text(result) and "budget.max_tokens: at most 1000" in text(result)
    assert not Run.objects.exists()


def test_a_tool_the_role_may_not_use_says_which_role_it_needs(site: dict[str, Any]) -> None:
    result = tool(site["url"], site["outsider"], "start_run", {"skill": "review-sentiment", "input": REVIEW})
    assert result.is_error and "start_run needs the composer role" in text(result)
    assert not Run.objects.exists()


def test_a_wrong_or_revoked_token_is_401_and_too_many_wrong_ones_429(site: dict[str, Any]) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    assert raw(site["url"], dict(body), method="tools/list").status_code == 401
    assert raw(site["url"], dict(body), token="hnd_wrong", method="tools/list").status_code == 401
    token = APIToken.objects.get(user__username="oscar")
    token.revoke()
    assert raw(site["url"], dict(body), token=site["outsider"], method="tools/list").status_code == 401
    statuses = [raw(site["url"], dict(body), token="hnd_wrong", method="tools/list") for _ in range(25)]
    assert statuses[-1].status_code == 429 and int(statuses[-1].headers["Retry-After"]) > 0


def test_broken_requests_get_the_protocols_error_codes(site: dict[str, Any]) -> None:
    token = site["composer"]
    malformed = raw(site["url"], b"{not json", token=token)
    assert malformed.json()["error"]["code"] == -32700
    nested = raw(site["url"], b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": '
                 + b"[" * 50_000 + b"]" * 50_000 + b"}", token=token, method="tools/list")
    assert nested.status_code == 400 and nested.json()["error"]["code"] == -32700
    assert "too deeply" in nested.json()["error"]["message"]
    unknown = raw(site["url"], {"jsonrpc": "2.0", "id": 2, "method": "tools/frobnicate"}, token=token,
                  method="tools/frobnicate")
    assert unknown.json()["error"]["code"] == -32601
    huge = raw(site["url"], b'{"jsonrpc": "2.0", "id": 3, "method": "tools/list", "x": "' + b"a" * 3_000_000 + b'"}',
               token=token, method="tools/list")
    assert huge.status_code == 413 and huge.json()["error"]["code"] == -32600
    for response in (malformed, unknown, huge):
        assert response.status_code < 500


def test_lint_returns_findings_by_field_and_severity(site: dict[str, Any]) -> None:
    report = rpc_tool(site["url"], site["composer"], "lint_packet",
                      {"packet": scripts.packet(budget={"max_model_calls": -1})})
    found = report["structuredContent"]
    assert found["runnable"] is False
    assert {"field", "message"} <= set((found["problems"] + found["findings"])[0])


def _asking(site: dict[str, Any]) -> str:
    """A run (of the built-in review skill) that asks one question, then answers."""
    script = {"script": [
        {"text": "Which product is this about?", "tool_calls": [{"name": "yield_control", "arguments": {
            "status": "BLOCKED_AWAITING_CLARIFICATION", "output_payload": {},
            "open_questions": ["Which product is this review about?"]}}]},
        scripts.yield_turn(SENTIMENT)]}
    started = structured(_start(site, skill="review-sentiment", input=REVIEW, adapter="scripted",
                                adapter_config=script))
    return str(started["run_id"])


def test_a_question_is_returned_to_a_client_that_cannot_ask_and_answered_with_the_answer_tool(
        site: dict[str, Any]) -> None:
    run_id = _asking(site)
    asked = _wait(site, run_id)
    assert asked["status"].startswith("awaiting clarification"), asked
    item = asked["waiting_for_a_person"][0]
    assert item["questions"] == ["Which product is this review about?"]
    # too long an answer is refused whole, saying the limit, not cut short in silence
    refused = tool(site["url"], site["composer"], "answer_clarification",
                   {"item_id": item["item_id"], "answer": "x" * 20_001})
    assert refused.is_error and "20,001 characters; at most 20,000" in text(refused), text(refused)
    assert Approval.objects.get(pk=item["item_id"]).status == "pending"
    answered = structured(tool(site["url"], site["composer"], "answer_clarification",
                               {"item_id": item["item_id"], "answer": "The headphones."}))
    assert answered["run_id"] == run_id
    assert Approval.objects.get(pk=item["item_id"]).answer == "The headphones."
    assert _wait(site, run_id)["state"] == "COMPLETE"


def test_a_client_that_can_ask_puts_the_question_to_its_user(site: dict[str, Any]) -> None:
    run_id = _asking(site)
    asked: list[str] = []

    async def answer(context: Any, params: Any) -> Any:
        asked.append(params.message)
        return mcp_types.ElicitResult(action="accept", content={"answer": "The headphones."})

    ended = None
    for _ in range(6):
        ended = structured(tool(site["url"], site["composer"], "wait_for_run",
                                {"run_id": run_id, "timeout_s": 20}, elicitation_callback=answer))
        if ended["state"] == "COMPLETE":
            break
    assert ended is not None and ended["state"] == "COMPLETE", ended
    assert asked == [f"Run {run_id} asks: Which product is this review about?"]
    assert Approval.objects.get(run_id=run_id).answer == "The headphones."


def test_waiting_sends_progress_notifications_until_the_run_ends(site: dict[str, Any]) -> None:
    slow = {"script": [scripts.yield_turn(SENTIMENT, delay_ms=3000)]}
    run_id = structured(_start(site, skill="review-sentiment", input=REVIEW, adapter="scripted",
                               adapter_config=slow))["run_id"]
    notes: list[tuple[float, str | None]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        notes.append((value, message))

    async def job(client: Any) -> Any:
        return await client.call_tool("wait_for_run", {"run_id": run_id, "timeout_s": 20},
                                      progress_callback=progress)
    ended = structured(call(site["url"], site["composer"], job))
    assert ended["state"] == "COMPLETE"
    assert len(notes) >= 2 and [value for value, _ in notes] == sorted({value for value, _ in notes})
    assert notes[-1][1] is not None and notes[-1][1].startswith("COMPLETE")


def test_skill_manifests_and_run_records_are_resources(site: dict[str, Any]) -> None:
    run_id = structured(_start(site, skill="review-sentiment", input=REVIEW, adapter="scripted",
                               adapter_config=scripts.leaf(SENTIMENT)))["run_id"]

    async def job(client: Any) -> Any:
        listed = await client.list_resources()
        manifest = await client.read_resource("handoff://skills/review-sentiment/1.2.0/manifest")
        record = await client.read_resource(f"handoff://runs/{run_id}")
        return listed, manifest, record
    listed, manifest, record = call(site["url"], site["composer"], job)
    assert "handoff://skills/review-sentiment/1.2.0/manifest" in {str(r.uri) for r in listed.resources}
    assert json.loads(manifest.contents[0].text)["skill_name"] == "review-sentiment"
    assert json.loads(record.contents[0].text)["run_id"] == run_id
    hidden = raw(site["url"], {"jsonrpc": "2.0", "id": 9, "method": "resources/read",
                               "params": {"uri": f"handoff://runs/{run_id}"}},
                 token=site["approver"], method="resources/read")
    assert hidden.json()["error"]["code"] == -32002, "an approver reads only runs that ask them"


def test_a_client_of_the_2025_revisions_starts_and_reads_a_run(site: dict[str, Any]) -> None:
    """Claude Code and Cursor open with an initialize handshake (2025 revisions)."""
    async def job(client: Any) -> Any:
        tools = await client.list_tools()
        started = await client.call_tool("start_run", {
            "skill": "review-sentiment", "input": REVIEW, "adapter": "scripted",
            "adapter_config": scripts.leaf(SENTIMENT)})
        resources = await client.list_resources()
        notes: list[float] = []

        async def progress(value: float, total: float | None, message: str | None) -> None:
            notes.append(value)
        waited = await client.call_tool("wait_for_run", {"run_id": started.structured_content["run_id"],
                                                         "timeout_s": 20}, progress_callback=progress)
        assert structured(waited)["state"] == "COMPLETE" and notes, (waited, notes)
        return client.protocol_version, client.server_capabilities, tools, structured(started), resources
    version, capabilities, tools, started, resources = call(site["url"], site["composer"], job, mode="legacy")
    assert version.startswith("2025-") and capabilities.resources is not None
    assert "wait_for_run" in {t.name for t in tools.tools}
    assert started["state"] in {"PENDING", "ACCEPTED", "WORKING"}
    assert any(str(r.uri).endswith("review-sentiment/1.2.0/manifest") for r in resources.resources)
    assert _wait(site, started["run_id"])["state"] == "COMPLETE"


@pytest.mark.local_model
def test_a_client_runs_a_built_in_skill_on_the_default_local_model(site: dict[str, Any]) -> None:
    """The README's path: an MCP client starts a skill on the default adapter (the local
    model) and waits; the right values come back, or the run says visibly that it did not."""
    from delegations.protocol.adapters.local_models import DEFAULT_LOCAL_MODEL
    from tests.protocol.conftest import local_model_or_skip

    local_model_or_skip(DEFAULT_LOCAL_MODEL)
    quote = {"query": "Price of the Kettle Pro 2",
             "quote_text": "Kettle Pro 2, brushed steel: now EUR 39.90 at the online store."}
    started = structured(_start(site, skill="price-research", input=quote, adapter="local"))
    ended = _wait(site, started["run_id"], calls=30)   # a small model on a busy machine
    if ended["state"] == "COMPLETE":
        assert (ended["result"]["output_payload"]["price"], ended["result"]["output_payload"]["currency"]) \
            == (39.90, "EUR")
    else:   # a wrong answer is never a success: it waits in the inbox or fails, saying why
        assert ended["state"] in ("AWAITING_APPROVAL", "FAILED"), ended
        assert ended["waiting_for_a_person"] or ended["error"]


def test_each_skill_is_a_tool_whose_hints_follow_what_its_runs_may_do(site: dict[str, Any]) -> None:
    async def job(client: Any) -> Any:
        return await client.list_tools()
    tools = {t.name: t for t in call(site["url"], site["composer"], job).tools}
    sentiment, cleanup = tools["run_skill.review-sentiment"], tools["run_skill.workspace-cleanup"]
    research = tools["run_skill.price-research"]   # the latest: 1.3.0 reads the quote it is given
    assert (sentiment.annotations.read_only_hint, sentiment.annotations.open_world_hint) == (True, False)
    assert (cleanup.annotations.destructive_hint, cleanup.annotations.read_only_hint) == (True, False)
    assert research.annotations.open_world_hint is False
    assert sentiment.input_schema["properties"]["input"]["required"] == ["review"]
    assert "waits for a person's approval" in cleanup.description
    started = structured(tool(site["url"], site["composer"], "run_skill.review-sentiment", {
        "input": REVIEW, "adapter": "scripted", "adapter_config": scripts.leaf(SENTIMENT)}))
    assert started["skill"] == "review-sentiment@1.2.0"
    refused = tool(site["url"], site["composer"], "run_skill.review-sentiment", {"input": {"stars": 5}})
    assert refused.is_error and "review" in text(refused)


def test_a_run_started_over_mcp_continues_the_trace_in_the_requests_meta(site: dict[str, Any]) -> None:
    caller = "00-6bf92f3577b34da6a3ce929d0e0e4736-20f067aa0ba902b7-01"

    async def job(client: Any) -> mcp_types.CallToolResult:
        return await client.call_tool("start_run", {
            "skill": "review-sentiment", "input": REVIEW, "adapter": "scripted",
            "adapter_config": scripts.leaf(SENTIMENT)}, meta={"traceparent": caller})

    started = structured(call(site["url"], site["composer"], job))
    assert Run.objects.get(pk=started["run_id"]).traceparent == caller
