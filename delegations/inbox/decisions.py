"""Deciding inbox items: who may, what each kind allows, and recording a decision once.

The rules, in the order they are checked:

- when: an item is decided once (409, naming who decided and when); past its deadline it
  expires and its run times out (409); an item whose run ended is cancelled (409).
- who: only approvers (or superusers) decide, and nobody decides an item raised by a run
  they started (the run's owner or its root's owner) unless ``HANDOFF_ALLOW_SELF_APPROVAL``
  is on (403). A clarification is the exception: the person who started the run answers
  its question too (an answer grants nothing), as an MCP client asks it of its user. No
  tool a model is offered can reach this module: deciding is a person's request, through
  the inbox pages, the API or an MCP client's answer.
- what: the decision must be one the item's kind allows (``allowed_decisions``), with what
  it needs (a rejection's comment, an answer, edited arguments valid against the tool's
  schema, a review's corrected values valid against their fields' schemas, a raised budget
  on the limit the item asks about only and within the parent's remainder) (422, every
  problem listed).

Approval rules (``delegations.inbox.rules``) decide through :func:`approval_decide_by_rule`,
which records as a click does with the rule in the audit; a rule that requires two
approvers keeps the first approval as a sign-off and lets a different approver decide.

A decision is recorded under a row lock, so of two people deciding at once one wins and
the other gets 409; the parked run is enqueued again once the decision commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from delegations.accounts.roles import decider_refusal
from delegations.live import feed
from delegations.models import (
    Approval,
    ApprovalRule,
    ApprovalSignoff,
    RuleDecision,
    RuleEffect,
    Run,
    RunCheckpoint,
)
from delegations.protocol.approvals import (
    ALWAYS_ALLOW_DECISIONS,
    ALWAYS_ALLOW_KINDS,
    ApprovalKind,
    Decision,
    allowed_decisions,
    ancestors_left,
    raised_budget,
)
from delegations.protocol.budgets import Budget, Usage, parse_budget
from delegations.protocol.errors import ProtocolError
from delegations.protocol.schemas import validate_instance
from delegations.protocol.text_limits import MAX_MESSAGE_CHARS
from delegations.protocol.tools import RUNTIME_TOOLS
from delegations.refusals import Refusal
from delegations.runs.maintenance import approval_expire
from delegations.runs.queue import enqueue_run

# -- who and when ------------------------------------------------------------------------

def decide_refusal(user: Any, approval: Approval) -> str | None:
    """None when ``user`` may decide ``approval`` now; else one plain sentence saying why not."""
    refusal = _refusal(user, approval)
    return refusal.message if refusal is not None else None


def _refusal(user: Any, approval: Approval, now: datetime | None = None) -> Refusal | None:
    # an item nobody can decide any more says so first: that holds whoever asks
    closed = closed_reason(approval, now)
    if closed is not None:
        return Refusal(closed, status=409)
    who = decider_refusal(user, approval)
    return Refusal(who, status=403) if who is not None else None


def _when(moment: datetime | None) -> str:
    """A time as people read it in a sentence: the local hour today, else the date too."""
    if moment is None:
        return "an unknown time"
    local = timezone.localtime(moment)
    if local.date() == timezone.localdate():
        return local.strftime("%H:%M")
    return local.strftime("%Y-%m-%d %H:%M")


def closed_reason(approval: Approval, now: datetime | None = None) -> str | None:
    """Why nobody can decide ``approval`` any more (decided, expired, cancelled, past its
    deadline), else None."""
    status = approval.status
    if not approval.is_closed:
        deadline = approval.expires_at
        if deadline is not None and deadline <= (now or timezone.now()):
            return f"Expired at {_when(deadline)}: nobody decided in time, so its run timed out."
        return None
    if status == Approval.Status.EXPIRED:
        return f"Expired at {_when(approval.expires_at)}: nobody decided in time, so its run timed out."
    if status == Approval.Status.CANCELLED:
        return "Cancelled: its run ended."
    who = approval.decided_by.get_username() if approval.decided_by is not None else "someone"
    return f"Already {status} by {who} at {_when(approval.decided_at)}; decisions are final."


# -- what --------------------------------------------------------------------------------

def validate_edited_arguments(approval: Approval, arguments: Any) -> list[str]:
    """Every place ``arguments`` break the parameters schema of the tool the item asks to
    call, or, for a review, the schemas of the fields under review (empty when they fit)."""
    if approval.kind == ApprovalKind.REVIEW:
        return validate_review_values(approval, arguments)
    if not isinstance(arguments, dict):
        return ["edited_arguments: expected a JSON object with the tool call's arguments."]
    tool_name = (approval.payload or {}).get("tool")
    tool = RUNTIME_TOOLS.get(tool_name) if isinstance(tool_name, str) else None
    if tool is None:
        return [f"This item asks for no tool call whose arguments can be edited (tool: {tool_name!r})."]
    issues = validate_instance(tool.schema["parameters"], arguments, "")
    return [f"{issue.field}: {issue.message}" if issue.field else issue.message for issue in issues]


def review_fields(approval: Approval) -> dict[str, dict[str, Any]]:
    """The fields a review item asks about, by name (each with its proposed value, schema,
    choices and scores, as the runner put them in the payload)."""
    fields = (approval.payload or {}).get("fields") if isinstance(approval.payload, dict) else None
    return {str(entry["field"]): entry for entry in fields or []
            if isinstance(entry, dict) and isinstance(entry.get("field"), str)}


def validate_review_values(approval: Approval, values: Any) -> list[str]:
    """Every reason ``values`` ({field: corrected value}) cannot replace what a review item
    proposes: a field not under review, or a value its schema refuses (empty when they fit)."""
    fields = review_fields(approval)
    names = ", ".join(fields) or "none"
    if not isinstance(values, dict) or not values:
        return [f"edited_arguments: expected a JSON object with the corrected value of a field under "
                f"review ({names}), e.g. {{\"{next(iter(fields), 'field')}\": ...}}."]
    problems = []
    for name, value in values.items():
        entry = fields.get(name)
        if entry is None:
            problems.append(f"{name}: not a field under review; correct {names}.")
            continue
        schema = entry.get("schema")
        problems.extend(f"{name}: {issue.message}"
                        for issue in validate_instance(schema if isinstance(schema, dict) else {}, value, name))
    return problems


def _choice(approval: Approval, decision: str) -> Decision:
    allowed = allowed_decisions(approval.kind)
    names = ", ".join(d.value for d in allowed)
    try:
        choice = Decision(decision)
    except ValueError:
        raise Refusal(f"decision must be one of {names} for a {approval.kind} item, "
                       f"not {decision!r}.", status=422) from None
    if choice not in allowed:
        raise Refusal(f"decision '{choice.value}' does not fit a {approval.kind} item; "
                       f"choose {names}.", status=422)
    return choice


def _check_fields(approval: Approval, choice: Decision, *, comment: str, answer: str,
                  edited_arguments: dict[str, Any] | None, always_allow: bool,
                  budget_limit: dict[str, Any] | None) -> None:
    """422 for what the decision lacks or carries that does not belong to it."""
    if choice == Decision.REJECT and not comment:
        raise Refusal("A rejection needs a comment saying why (it is shown to the run).", status=422)
    if choice == Decision.ANSWER and not answer:
        raise Refusal("An answer needs its text ('answer'): write what the run should know.", status=422)
    if len(answer) > MAX_MESSAGE_CHARS:
        # the run reads an answer as it reads a message: in its next turn's context
        raise Refusal(f"The answer is {len(answer):,} characters; at most {MAX_MESSAGE_CHARS:,}. "
                      "Shorten it to what the run needs to go on.", status=422)
    if choice == Decision.EDIT:
        review = approval.kind == ApprovalKind.REVIEW
        if not isinstance(edited_arguments, dict):
            raise Refusal("decision 'edit' needs 'edited_arguments', a JSON object with "
                          + ("the corrected value of each field under review."
                             if review else "the tool call's new arguments."), status=422)
        errors = validate_edited_arguments(approval, edited_arguments)
        if errors:
            what = "the fields under review" if review else "the tool's schema"
            raise Refusal(f"The edited {'values' if review else 'arguments'} do not fit {what}: "
                          f"{'; '.join(errors)}", status=422, details={"errors": errors})
    elif edited_arguments is not None:
        raise Refusal("edited_arguments go with decision 'edit' only.", status=422)
    if always_allow and (approval.kind not in ALWAYS_ALLOW_KINDS or choice not in ALWAYS_ALLOW_DECISIONS):
        raise Refusal("always_allow goes with approve or edit on a tool call (capability) item only.",
                       status=422)
    if budget_limit is not None and (approval.kind != ApprovalKind.BUDGET or choice != Decision.APPROVE):
        raise Refusal("budget_limit goes with approve on a budget item only.", status=422)
    if budget_limit is not None:
        _check_budget_axis(approval, budget_limit)


def _check_budget_axis(approval: Approval, budget_limit: dict[str, Any]) -> None:
    """422 for a raise on another limit than the one the item asks about: whoever approves
    saw the figures of that limit only, so a raise elsewhere would be granted unseen."""
    axis = approval.budget_axis
    others = sorted(name for name in budget_limit if name != axis)
    if not others:
        return
    if axis is None:
        raise Refusal("This budget item does not say which limit it asks about, so no limit can be "
                      "raised on it; approve without budget_limit to let the run go on.", status=422)
    raise Refusal(f"This item asks about {axis}; budget_limit may raise {axis} only, not "
                  f"{', '.join(others)}. Send {{\"{axis}\": <new limit>}}, or approve without "
                  f"budget_limit to let the run go on at its current limits.", status=422)


def run_budgets(runs: Sequence[Run]) -> dict[str, tuple[Budget, Usage]]:
    """Each run's budget and usage as its runner last saved them (its checkpoint: the
    runner charges every ancestor at once, and holds a raised limit), else its row's."""
    saved = dict(RunCheckpoint.objects.filter(run_id__in=[r.pk for r in runs]).values_list("run_id", "data"))
    out: dict[str, tuple[Budget, Usage]] = {}
    for run in runs:
        data = saved.get(run.pk)
        data = data if isinstance(data, dict) else {}
        try:
            budget = parse_budget(data.get("budget") or run.budget or {})
        except ProtocolError:
            budget = Budget.unlimited()
        out[run.pk] = (budget, Usage.from_dict(data.get("usage") or run.usage))
    return out


def _raised_limits(run: Run, budget_limit: dict[str, Any]) -> Budget:
    """The run's budget with ``budget_limit`` raised on it; 422 with every problem, among
    them a limit above what its ancestors have left."""
    ancestors = list(Run.objects.filter(pk__in=run.ancestor_ids()))
    figures = run_budgets([run, *ancestors])
    budget, usage = figures[run.pk]
    raised, problems = raised_budget(budget, budget_limit, usage=usage,
                                     ancestors=ancestors_left(figures[a.pk] for a in ancestors))
    if problems:
        raise Refusal(f"The raised budget cannot be taken: {' '.join(problems)}", status=422,
                       details={"errors": problems})
    return raised


# -- deciding ----------------------------------------------------------------------------

def approval_decide(*, approval: Approval, user: Any, decision: str, comment: str = "",
                    answer: str = "", edited_arguments: dict[str, Any] | None = None,
                    always_allow: bool = False, budget_limit: dict[str, Any] | None = None) -> Approval:
    """Record a person's decision and resume the parked tree from its checkpoint. Raises
    Refusal: 403 (not an approver, their own run), 409 (decided, expired, cancelled), 422
    (a decision the kind does not allow, or what it needs missing or invalid)."""
    comment, answer = comment.strip(), answer.strip()
    refusal = _refusal(user, approval)
    if refusal is not None:
        _expire_if_due(approval)
        raise refusal
    choice = _choice(approval, decision)
    _check_fields(approval, choice, comment=comment, answer=answer, edited_arguments=edited_arguments,
                  always_allow=always_allow, budget_limit=budget_limit)
    raised = _raised_limits(approval.run, budget_limit) if budget_limit is not None else None
    try:
        with transaction.atomic():
            locked = _locked([approval.pk])[0]
            _refuse_closed(locked)
            if choice != Decision.REJECT and _first_of_two(locked, user):
                return locked
            _record(locked, choice, user=user, comment=comment, answer=answer,
                    edited_arguments=edited_arguments, always_allow=always_allow,
                    budget_limit=budget_limit, raised=raised)
            enqueue_run(locked.run.root_run_id)
    except Refusal:
        _expire_if_due(approval)
        raise
    return locked


def approvals_decide_batch(*, approvals: Sequence[Approval], user: Any, decision: str,
                           comment: str = "") -> list[Approval]:
    """The same decision on several items of one run's tree, all or nothing: 422 naming the
    item of another tree (or one the decision does not fit), 409 naming one decided or
    expired, 403 naming one this person may not decide; then nothing is decided."""
    items = list(approvals)
    if not items:
        raise Refusal("A batch needs at least one item.", status=422)
    if len({a.pk for a in items}) != len(items):
        raise Refusal("A batch names an item twice.", status=422)
    comment = comment.strip()
    if decision == Decision.REJECT and not comment:   # said once for the batch, not for its first item
        raise Refusal("Rejecting needs a comment saying why (it is shown to the run); nothing was "
                      "decided.", status=422)
    root_id = items[0].run.root_run_id
    for approval in items:
        if approval.run.root_run_id != root_id:
            raise Refusal(f"Item #{approval.pk} belongs to another run's tree ({approval.run.root_run_id}); "
                           f"a batch decides the items of one run.", status=422)
    for approval in items:
        refusal = _refusal(user, approval)
        if refusal is not None:
            _expire_if_due(approval)
            raise Refusal(f"Item #{approval.pk}: {refusal.message}", status=refusal.status)
        try:
            choice = _choice(approval, decision)
            _check_fields(approval, choice, comment=comment, answer="", edited_arguments=None,
                          always_allow=False, budget_limit=None)
        except Refusal as error:
            raise Refusal(f"Item #{approval.pk}: {error.message}", status=error.status,
                           details=error.details) from None
    try:
        with transaction.atomic():
            locked = _locked([a.pk for a in items])
            for item in locked:
                try:
                    _refuse_closed(item)
                except Refusal as error:
                    raise Refusal(f"Item #{item.pk}: {error.message}", status=error.status) from None
                if decision != Decision.REJECT and RuleDecision.objects.filter(
                        approval=item, effect=RuleEffect.TWO_APPROVERS).exists():
                    raise Refusal(f"Item #{item.pk} needs two different approvers (a rule says so); "
                                   f"approve it on its own page.", status=422)
            for item in locked:
                _record(item, Decision(decision), user=user, comment=comment)
            enqueue_run(root_id)
    except Refusal:
        for approval in items:
            _expire_if_due(approval)
        raise
    return locked


def approval_decide_by_rule(*, approval: Approval, rule: ApprovalRule, matched: dict[str, Any],
                            resume: bool) -> Approval | None:
    """Record what ``rule`` decides on ``approval`` as a person's click is recorded, with the
    rule, its version and what it matched in the audit (:class:`RuleDecision`). ``resume``:
    enqueue the parked tree (an item waiting already); an item being opened is answered by
    the gate itself. None when the item closed meanwhile (nothing recorded)."""
    audit = {"rule": rule, "rule_name": rule.name, "rule_version": rule.version,
             "effect": rule.effect, "matched": matched}
    with transaction.atomic():
        locked = _locked([approval.pk])[0]
        if closed_reason(locked) is not None or RuleDecision.objects.filter(approval=locked).exists():
            return None
        RuleDecision.objects.create(approval=locked, **audit)
        if rule.effect == RuleEffect.TWO_APPROVERS:
            return locked
        choice = Decision.APPROVE if rule.effect == RuleEffect.APPROVE else Decision.REJECT
        _record(locked, choice, user=None, comment=rule.comment.strip() or rule.label)
        if resume:
            enqueue_run(locked.run.root_run_id)
    return locked


def _first_of_two(locked: Approval, user: Any) -> bool:
    """Whether this approval is only the first of the two a rule requires (then it is kept
    as a sign-off and the item waits for a different approver); 409 for the same person twice."""
    audit = RuleDecision.objects.filter(approval=locked, effect=RuleEffect.TWO_APPROVERS).first()
    if audit is None:
        return False
    first = locked.signoffs.select_related("user").first()
    if first is None:
        ApprovalSignoff.objects.create(approval=locked, user=user)
        return True
    if first.user_id == user.pk:
        raise Refusal(f"You approved this already; {audit.label} requires a second, different "
                       f"approver.", status=409)
    return False


def _locked(ids: list[int]) -> list[Approval]:
    """The items, locked until the transaction ends, in the order of ``ids``. Locked
    first and read after: on PostgreSQL a ``FOR UPDATE`` that waited for another decider
    returns the row as that one left it, but the rows it joins (who decided) as they were
    before, so the decider would read as nobody."""
    list(Approval.objects.select_for_update().filter(pk__in=ids).values_list("pk", flat=True))
    rows = {a.pk: a for a in Approval.objects.select_related("run", "decided_by").filter(pk__in=ids)}
    return [rows[pk] for pk in ids]


def _refuse_closed(locked: Approval) -> None:
    """409 when the locked item can no longer be decided (someone else was faster, or its
    deadline passed)."""
    closed = closed_reason(locked)
    if closed is not None:
        raise Refusal(closed, status=409)


def _expire_if_due(approval: Approval) -> None:
    """Expire an item found past its deadline (its run times out), without waiting for the
    sweeper: deciding it is refused either way."""
    if approval.is_pending and approval.expires_at is not None and approval.expires_at <= timezone.now():
        approval_expire(approval.pk)


def _record(locked: Approval, choice: Decision, *, user: Any, comment: str = "", answer: str = "",
            edited_arguments: dict[str, Any] | None = None, always_allow: bool = False,
            budget_limit: dict[str, Any] | None = None, raised: Budget | None = None) -> None:
    locked.record(choice, user=user, comment=comment, answer=answer, edited_arguments=edited_arguments,
                  always_allow=always_allow, budget_limit=budget_limit)
    if raised is not None:
        # the run's row shows the limits it goes on with (the runner takes the same raise)
        Run.objects.filter(pk=locked.run_id).update(budget=raised.as_dict())
    notice = feed.inbox_message("approval.decided", locked.as_event_data())
    transaction.on_commit(lambda: feed.publish_sync(notice))
