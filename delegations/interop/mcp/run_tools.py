"""MCP tools that start and follow runs, through the workflows ``/api/runs`` calls.

Starting refuses what a run could not do before anything is written: the packet is linted
as it will run, and any error (a packet that does not parse, a skill or version the
registry lacks, input the skill's schema refuses, a lint error, a budget above a saved
delegation's) comes back as one tool error listing every issue. Approvals are never asked
or decided here: a run that waits for one is reported with its inbox URL, and only a person
in the inbox decides it. A clarification question is asked through the client
(elicitation) when it can ask one, else returned for ``answer_clarification``.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from django.db.models import Q
from django.http import HttpRequest
from django.urls import reverse
from django_mcpz.server import (
    ElicitationDeclinedError,
    ElicitationUnavailableError,
    ToolError,
    elicit,
)

from delegations.accounts.roles import visible_runs
from delegations.inbox.decisions import approval_decide
from delegations.interop.mcp.server import about, log_call, require_role, server
from delegations.models import Approval, Delegation, Run
from delegations.protocol import text_limits
from delegations.protocol.approvals import ApprovalKind
from delegations.protocol.budgets import exceeds, parse_budget
from delegations.protocol.errors import ProtocolError
from delegations.protocol.lifecycle import A2A_STATE, RunState
from delegations.refusals import Refusal
from delegations.runs.idempotency import KeyReused, StillStarting, once
from delegations.runs.lint import lint_as_run
from delegations.runs.workflows import run_cancel, run_create, run_send_message

WAIT_MAX_S = 25.0


RunId = Annotated[str, about("The run's id, as start_run (or read_run's children) returned it.")]


class StartRunParams(msgspec.Struct, forbid_unknown_fields=True):
    skill: Annotated[str, about("A skill to run: its name (latest version) or name@version, "
                                "from find_skills.")] = ""
    input: Annotated[dict[str, Any], about("The skill's input: an object its input_schema "
                                           "accepts (describe_skill shows it).")] = {}
    delegation_id: Annotated[int | None, about("A saved delegation to run instead.")] = None
    packet: Annotated[dict[str, Any] | str | None, about(
        "A hand-off packet to run instead (object or JSON text): goal, input_data, "
        "expected_output_schema, budget, capabilities, success_criteria...")] = None
    budget: Annotated[dict[str, Any] | None, about(
        "Limits for the run, e.g. {\"max_model_calls\": 10, \"max_tokens\": 20000, "
        "\"max_runtime_s\": 300, \"max_cost_usd\": 0.5}; replaces the packet's.")] = None
    adapter: Annotated[str, about("Which model runs it: local, openai, anthropic or scripted; "
                                  "empty for the server's default.")] = ""
    adapter_config: Annotated[dict[str, Any] | None, about(
        "The adapter's settings (e.g. {\"model\": ...}); keys and hosts come from the "
        "server, never from here.")] = None
    idempotency_key: Annotated[str, about(
        "Any text unique to this logical start: calling again with it returns the same run.")] = ""


class RunParams(msgspec.Struct, forbid_unknown_fields=True):
    run_id: RunId


class WaitParams(msgspec.Struct, forbid_unknown_fields=True):
    run_id: RunId
    timeout_s: Annotated[float, about(f"Seconds to wait, at most {WAIT_MAX_S:g}.")] = WAIT_MAX_S


class CancelParams(msgspec.Struct, forbid_unknown_fields=True):
    run_id: Annotated[str, about("The run to cancel with everything below it (a child's id "
                                 "cancels that subtree only).")]
    reason: Annotated[str, about("Why, for the run's record.")] = ""


class MessageParams(msgspec.Struct, forbid_unknown_fields=True):
    run_id: RunId
    text: Annotated[str, about(f"What the run's subagent should know; at most "
                               f"{text_limits.MAX_MESSAGE_CHARS:,} characters.")]


class AnswerParams(msgspec.Struct, forbid_unknown_fields=True):
    item_id: Annotated[int, about("The question's item_id, from waiting_for_a_person.")]
    answer: Annotated[str, about(f"Your answer to the run's question; at most "
                                 f"{text_limits.MAX_MESSAGE_CHARS:,} characters.")]


# -- what a run looks like to the caller ------------------------------------------------------

def _absolute(request: HttpRequest, path: str) -> str:
    return request.build_absolute_uri(path)


def _waiting_items(request: HttpRequest, run: Run) -> list[dict[str, Any]]:
    """What waits for a person in the run's subtree, each with where it is decided."""
    items = Approval.objects.pending().filter(run__in=run.tree()).order_by("requested_at", "pk")
    inbox = reverse("delegations:inbox")
    return [{"item_id": item.pk, "kind": item.kind, "title": item.title, "run_id": item.run_id,
             "questions": (item.payload or {}).get("questions") if item.kind == ApprovalKind.CLARIFICATION else None,
             "inbox_url": _absolute(request, f"{inbox}#approval-{item.pk}")} for item in items]


def _status(run: Run, waiting: list[dict[str, Any]]) -> str:
    """One phrase for a model: what the run is doing and what the caller should do next."""
    if run.is_terminal:
        return f"ended {run.state}"
    if any(item["kind"] == ApprovalKind.CLARIFICATION for item in waiting):
        return "awaiting clarification: answer it with answer_clarification"
    if waiting or run.state == RunState.AWAITING_APPROVAL:
        return "awaiting approval: a person decides in the inbox (inbox_url); wait again"
    return "working: wait_for_run again"


def run_view(request: HttpRequest, run: Run) -> dict[str, Any]:
    """The run as read_run, wait_for_run and start_run return it."""
    waiting = [] if run.is_terminal else _waiting_items(request, run)
    return {
        "run_id": run.pk, "state": run.state, "a2a_state": A2A_STATE[RunState(run.state)],
        "status": _status(run, waiting), "skill": run.skill or None, "label": run.label,
        "page_url": _absolute(request, reverse("delegations:run_detail", args=[run.pk])),
        "result": run.result, "criteria_report": run.criteria_report, "error": run.error,
        "findings": run.findings or [], "usage": run.usage or {}, "budget": run.budget or {},
        "capabilities": run.capabilities or [],
        "children": [{"run_id": child.pk, "label": child.label, "state": child.state}
                     for child in run.children.order_by("created_at", "pk")],
        "waiting_for_a_person": waiting,
    }


def _readable_run(request: HttpRequest, run_id: str, *, to_act: bool = False) -> Run:
    """A run the caller may read (``to_act``: one of their own trees), as /api/runs/{id}."""
    runs = Run.objects.visible_to(request.user) if to_act else visible_runs(request.user)
    run = runs.filter(pk=run_id).first()
    if run is None:
        raise ToolError(f"No run {run_id!r} that you can {'act on' if to_act else 'see'}; "
                        "start_run returns the run_id to use.")
    return run


# -- starting -----------------------------------------------------------------------------

def _issue_lines(issues: list[dict[str, str]]) -> str:
    return "\n".join(f"- {issue.get('field') or 'packet'}: {issue['message']}" for issue in issues)


def _packet_to_run(request: HttpRequest, params: StartRunParams) -> tuple[dict[str, Any] | str, Delegation | None]:
    """The packet to run and its saved delegation, from exactly one of skill, delegation, packet."""
    given = [name for name, value in (("skill", params.skill), ("delegation_id", params.delegation_id),
                                      ("packet", params.packet)) if value not in ("", None)]
    if len(given) != 1:
        raise ToolError("Give exactly one of `skill` (with its `input`), `delegation_id` or "
                        f"`packet`; this call gave {', '.join(given) or 'none'}.")
    if params.skill:
        return {"skill": params.skill, "goal": f"Do the job of the skill {params.skill} on the given input.",
                "input_data": params.input, "allowed_inputs": sorted(params.input)}, None
    if params.input:
        raise ToolError("`input` goes with `skill`; a packet carries its own input_data.")
    if params.delegation_id is not None:
        mine = Q() if request.user.is_staff else Q(owner=request.user) | Q(owner__isnull=True)
        delegation = Delegation.objects.filter(mine, pk=params.delegation_id).first()
        if delegation is None:
            raise ToolError(f"No saved delegation {params.delegation_id} that you can see.")
        return delegation.packet_dict(), delegation
    assert params.packet is not None
    return params.packet, None


def _with_budget(packet: dict[str, Any], budget: dict[str, Any] | None,
                 delegation: Delegation | None) -> dict[str, Any]:
    """The canonical packet with the caller's budget; a saved delegation's budget is the most
    its caller may spend, so a budget may narrow it, never widen it."""
    if budget is None:
        return packet
    try:
        wanted = parse_budget(budget)
    except ProtocolError as exc:
        raise ToolError(f"The budget is not valid:\n{_issue_lines([i.as_dict() for i in exc.issues])}") from None
    if delegation is not None:
        ceiling = parse_budget(packet.get("budget"))
        over = exceeds(wanted, ceiling)
        if over:
            raise ToolError("The budget asks for more than the saved delegation allows (its "
                            "budget is the most a run of it may spend):\n" + "\n".join(
                                f"- {issue.field}: at most {ceiling.as_dict()[issue.field.split('.')[-1]]:g}"
                                for issue in over))
    return {**packet, "budget": wanted.as_dict(include_unlimited=False)}


def _traceparent(request: HttpRequest) -> str:
    """The caller's W3C trace context: MCP carries it in the request's ``_meta`` (the MCP
    SDKs' clients put it there), a plain HTTP client in the ``traceparent`` header."""
    try:
        message = text_limits.parse(request.body)
    except ValueError:
        message = None
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    carried = meta.get("traceparent") if isinstance(meta, dict) else None
    return carried if isinstance(carried, str) else request.headers.get("traceparent", "")


def _start(request: HttpRequest, params: StartRunParams) -> Run:
    data, delegation = _packet_to_run(request, params)
    report = lint_as_run(data)
    if report.packet is None:
        raise ToolError(f"The packet cannot be read; no run was started:\n{_issue_lines(report.problems)}")
    packet = _with_budget(report.packet, params.budget, delegation)
    if params.budget is not None:
        report = lint_as_run(packet)
    if not report.runnable:
        issues = report.problems + report.error_findings
        raise ToolError(f"Not started: {len(issues)} issue(s) block this run (lint_packet shows "
                        f"warnings too):\n{_issue_lines(issues)}")
    try:
        return run_create(packet=packet, adapter=params.adapter or None, linted=report,
                          config=params.adapter_config, owner=request.user, delegation=delegation,
                          traceparent=_traceparent(request))
    except ProtocolError as exc:
        issues = [issue.as_dict() for issue in exc.issues] or [{"field": "", "message": exc.message}]
        raise ToolError(f"Not started:\n{_issue_lines(issues)}") from None
    except Refusal as exc:
        raise ToolError(f"Not started: {exc.message}") from None


@server.tool(
    title="Start a run",
    description=(
        "Start a Handoff run, in the background, and return at once with its run_id, state and "
        "page_url (where a person watches it live). Give exactly one of: `skill` (a skill's "
        "name or name@version from find_skills) with `input` (an object that must satisfy the "
        "skill's input_schema, see describe_skill); `delegation_id` (a saved delegation); or "
        "`packet` (a hand-off packet, as for lint_packet). Optional: `budget` (e.g. "
        "{\"max_model_calls\": 10, \"max_tokens\": 20000}), `adapter` (local, openai, "
        "anthropic, scripted) and its `adapter_config`, and `idempotency_key`: the same key "
        "returns the same run instead of starting another (without one, an identical call "
        "within a minute does the same). Anything that blocks the run is an error listing "
        "every issue, and nothing starts. Follow the run with wait_for_run. Runs whose skill "
        "reaches the network or deletes files ask a person in Handoff's inbox first."),
    destructive=False, idempotent=True, open_world=True)
def start_run(request: HttpRequest, params: StartRunParams) -> dict[str, Any]:
    require_role(request, "composer", "start_run")
    arguments = msgspec.to_builtins(params)
    try:
        run, replayed = once(request, "start_run", arguments, params.idempotency_key,
                             lambda: _start(request, params))
    except KeyReused:
        raise ToolError(f"idempotency_key {params.idempotency_key!r} was used for an earlier start "
                        f"with other arguments; use a new key for a new run, or the same arguments "
                        f"to get that run back.") from None
    except StillStarting:
        raise ToolError("The same start is still being handled by an earlier call; read_run or "
                        "call start_run again in a few seconds.") from None
    log_call(request, "start_run", run=run.pk, replayed=replayed)
    return {**run_view(request, run), "replayed": replayed}


# -- following -------------------------------------------------------------------------------

@server.tool(
    title="Read a run",
    description=(
        "A run's state now: its result (when it ended), the success criteria report, usage "
        "against its budget, its child runs with their states, and what waits for a person, "
        "each with the inbox URL where a person decides it. `status` says what to do next."),
    read_only=True, open_world=False)
def read_run(request: HttpRequest, params: RunParams) -> dict[str, Any]:
    return run_view(request, _readable_run(request, params.run_id))


def _ask_clarification(request: HttpRequest, run: Run, view: dict[str, Any]) -> bool:
    """Ask the run's open question through the client, and answer it in the inbox with what
    the person typed (True); False when the client cannot ask (the question is returned)."""
    item = next((i for i in view["waiting_for_a_person"] if i["kind"] == ApprovalKind.CLARIFICATION), None)
    if item is None:
        return False
    question = "\n".join(item["questions"] or [item["title"]])
    try:
        reply = elicit(request, f"Run {run.pk} asks: {question}",
                       {"type": "object", "properties": {"answer": {"type": "string", "title": "Your answer"}},
                        "required": ["answer"]}, key=f"clarification-{item['item_id']}")
    except ElicitationUnavailableError:
        return False
    except ElicitationDeclinedError:
        raise ToolError("You declined the run's question; answer it later with "
                        "answer_clarification, or cancel the run.") from None
    _answer(request, item["item_id"], str(reply.get("answer", "")))
    return True


@server.tool(
    title="Wait for a run",
    description=(
        f"Wait up to `timeout_s` seconds (at most {WAIT_MAX_S:g}) for a run to end, park for "
        "a person, or ask a question; a run already waiting for approval is waited on until "
        "a person decides. Returns the run as read_run does. Call it again while "
        "`status` says working or awaiting approval. A run waiting for approval is decided "
        "by a person in Handoff's inbox (inbox_url), never by you. A question the run asks "
        "is put to you directly when your client can ask, else answer it with "
        "answer_clarification."),
    read_only=True, open_world=False)
def wait_for_run(request: HttpRequest, params: WaitParams) -> dict[str, Any]:
    """The run once the wait is over: /mcp waits (waiting.py, on the run's live feed, with no
    thread held) before it calls this, so this answers at once, after putting the run's
    question to the client when it can ask."""
    run = _readable_run(request, params.run_id)
    while True:
        view = run_view(request, run)
        if not view["waiting_for_a_person"] or not _ask_clarification(request, run, view):
            return view
        run.refresh_from_db()


# -- acting on a run -------------------------------------------------------------------------

@server.tool(
    title="Cancel a run",
    description=("Cancel a run and every run below it (a subtree: give a child's run_id). "
                 "Work in progress stops within a second; what it did so far stays on record."),
    destructive=True, idempotent=True, open_world=False)
def cancel_run(request: HttpRequest, params: CancelParams) -> dict[str, Any]:
    run = _readable_run(request, params.run_id, to_act=True)
    try:
        run = run_cancel(run=run, reason=params.reason[:500])
    except Refusal as exc:
        raise ToolError(exc.message) from None
    log_call(request, "cancel_run", run=run.pk)
    return run_view(request, run)


@server.tool(
    title="Send a message to a run",
    description=("Tell a running run something it should know (a correction, a hint); its "
                 "subagent reads it at its next turn. It grants no capability or budget."),
    destructive=False, open_world=False)
def send_message(request: HttpRequest, params: MessageParams) -> dict[str, Any]:
    run = _readable_run(request, params.run_id, to_act=True)
    try:
        message = run_send_message(run=run, text=params.text, sender=request.user)
    except Refusal as exc:
        raise ToolError(exc.message) from None
    log_call(request, "send_message", run=run.pk)
    return {"run_id": run.pk, "message_id": message.pk, "queued": True}


def _answer(request: HttpRequest, item_id: int, answer: str) -> Approval:
    item = Approval.objects.select_related("run", "run__root").filter(
        pk=item_id, run__in=Run.objects.visible_to(request.user)).first()
    if item is None:
        raise ToolError(f"No inbox item {item_id} on a run of yours.")
    if item.kind != ApprovalKind.CLARIFICATION:
        raise ToolError(f"Item {item_id} is a {item.kind} item, which only an approver decides, "
                        "in Handoff's inbox; these tools answer questions, never approvals.")
    try:
        decided = approval_decide(approval=item, user=request.user, decision="answer", answer=answer)
    except Refusal as exc:
        raise ToolError(exc.message) from None
    log_call(request, "answer_clarification", item=item_id, run=item.run_id)
    return decided


@server.tool(
    title="Answer a run's question",
    description=("Answer the clarification question a run asked (read_run lists it under "
                 "waiting_for_a_person with its item_id and questions); the run goes on with "
                 "your answer. Approvals of risky actions are not questions: a person decides "
                 "those in Handoff's inbox."),
    destructive=False, open_world=False)
def answer_clarification(request: HttpRequest, params: AnswerParams) -> dict[str, Any]:
    item = _answer(request, params.item_id, params.answer)
    return run_view(request, Run.objects.get(pk=item.run_id))
