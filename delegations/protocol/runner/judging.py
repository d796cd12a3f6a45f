"""Judging a run's answer: accepted, corrected once, retried, clarified or failed.

The answer (a ``yield_control`` call, or plain text holding an agloop ``## RESULT`` block or
a JSON envelope) is parsed with ``parse_result``, ``output_payload`` validated against the
expected output schema and every success criterion evaluated. A result that fails gets
exactly one self-correction turn (the hand-off protocol's recovery), then the run ends
FAILED with ERR_INVALID_RESULT, or, with ``RunnerSettings.invalid_result_inbox``, is put
to a person (kind ``invalid_result``): accept it as PARTIAL_COMPLETION, retry with a fresh
context, or fail. ``BLOCKED_AWAITING_CLARIFICATION`` asks a person (kind
``clarification``) and the answer continues the same run. A result whose only unmet criteria
are review criteria (``confident``, or marked ``review``) goes to a person instead of the
self-correction turn (``review.py``): confirmed or corrected, it completes the run with
the person's value. The adapter's label scores are put in the result's
``metrics["labels"]`` before it is checked (``confident`` reads them). A FAILURE with an agloop failed
reason follows the retry table (``errors.recovery_for``): a retried one starts a fresh
context with ``previous_failure`` attached, at most ``min(rule.max_retries,
RunnerSettings.retry_limit)`` times. PARTIAL_COMPLETION ends COMPLETE with a warning.
"""

from __future__ import annotations

from typing import Any

from ..adapters.base import ToolCall
from ..approvals import ApprovalDecision, ApprovalKind, Decision
from ..criteria import CriteriaReport, evaluate_criteria, missing_inputs
from ..errors import ErrorCode, ProtocolError, recovery_for
from ..events import EventType
from ..lifecycle import RunState
from ..packet import HandoffPacket, PreviousFailure
from ..results import ErrorReport, ResponsePackage, ResultStatus, parse_result
from ..schemas import validate_instance
from ..tools import YIELD_CONTROL
from .fetched import fetched_pages, grounding_sources
from .prompt import initial_messages
from .questions import Questions
from .reporting import Reporter
from .review import Review, review_items, with_label_scores
from .settings import RunnerSettings
from .state import ActiveRun

_LOG = EventType.LOG.value
_MESSAGE = EventType.MESSAGE.value

_PARTIAL_WARNING = "Partial completion: treated as complete; check what is missing before relying on it."


def read_answer(answer: object, *, triggered: bool) -> tuple[ResponsePackage | None, list[str]]:
    """The result an answer holds, or why there is none. Text that reached the termination
    trigger without a result reads as a SUCCESS summarized by that text."""
    try:
        return (answer if isinstance(answer, ResponsePackage) else parse_result(answer)), []
    except ProtocolError as exc:
        if triggered and isinstance(answer, str):
            return ResponsePackage(status=ResultStatus.SUCCESS, summary=answer.strip() or None,
                                   output_payload={}), []
        return None, [exc.message if answer else
                      "The answer was empty: no yield_control call and no RESULT block."]


def check_result(result: ResponsePackage, packet: HandoffPacket,
                 fetched: str = "") -> tuple[CriteriaReport | None, list[str]]:
    """The criteria report and what the result gets wrong: unmet criteria, then
    ``output_payload`` against the expected output schema. ``fetched``: the pages the run
    fetched (the ``fetched_pages`` source)."""
    problems: list[str] = []
    criteria: CriteriaReport | None = None
    schema = packet.expected_output_schema
    schema_checked = False
    wanted = packet.success_criteria
    if wanted:
        criteria = evaluate_criteria(result, wanted, schema, grounding_sources(packet.input_data, fetched))
        for raw, item in zip(wanted, criteria.items, strict=False):
            # a free-text "JSON is schema-valid" already validated output_payload
            # against the expected schema: no need to do it twice
            schema_checked = schema_checked or (item.kind == "json_schema" and isinstance(raw, str))
            if item.checkable and not item.met:
                problems.append(f"criterion not met: {item.criterion} ({item.detail})")
    if schema and not schema_checked:
        for issue in validate_instance(schema, result.output_payload, "output_payload"):
            problems.append(f"{issue.field}: {issue.message}")
    return criteria, problems


class Judge:
    """Decides what a run's answer means for the run; True from each step: the run ended."""

    def __init__(self, settings: RunnerSettings, reporter: Reporter, questions: Questions) -> None:
        self.settings = settings
        self.reporter = reporter
        self.questions = questions
        self.review = Review(reporter, questions)

    async def conclude(self, run: ActiveRun, answer: object, yield_call: ToolCall | None,
                       triggered: bool) -> bool:
        packet = run.scope.packet
        assert packet is not None
        result, problems = read_answer(answer, triggered=triggered)
        criteria: CriteriaReport | None = None
        if result is not None:
            if result.status is ResultStatus.BLOCKED_AWAITING_CLARIFICATION:
                return await self._clarify(run, result, yield_call)
            if result.status is ResultStatus.FAILURE:
                return await self._failed(run, result)
            turn = run.chat.turn
            result = with_label_scores(result, turn.scores if turn is not None else {})
            fetched = fetched_pages(run.chat.messages)
            criteria, problems = check_result(result, packet, fetched)
            unsure = review_items(packet, criteria, problems)
            if unsure:
                assert criteria is not None
                return await self.review.ask(run, result, criteria, unsure,
                                             lambda reviewed: check_result(reviewed, packet, fetched))
        if not problems:
            assert result is not None
            if result.status is ResultStatus.PARTIAL_COMPLETION:
                result = result.model_copy(update={"warnings": [*result.warnings, _PARTIAL_WARNING]})
                await self.reporter.emit(run.run_id, _LOG, {"level": "warning", "message": _PARTIAL_WARNING})
            await self.reporter.end(run, RunState.COMPLETE, result=result, criteria=criteria)
            return True
        attempts, chat = run.attempts, run.chat
        listing = "\n".join(f"- {problem}" for problem in problems)
        # an answer checked against an input the run was not given cannot be right: say what is missing
        missing = missing_inputs(packet.success_criteria, packet.input_data) if result is not None else []
        if not attempts.correction_used and not triggered and chat.iteration < run.scope.max_iterations:
            attempts.correction_used = True
            chat.answer_turn()
            if yield_call is not None:
                chat.answer(yield_call.id, YIELD_CONTROL, {"ok": False, "error": {
                    "code": ErrorCode.INVALID_RESULT.value, "message": "result rejected"}})
            chat.messages.append({"role": "user", "content": (
                "Your result was not accepted:\n" + listing + "\nCorrect it and hand it back once "
                "more with yield_control (this is the one self-correction turn)." + (
                    f" The input has no {', '.join(missing)}: do not guess, hand back status "
                    "BLOCKED_AWAITING_CLARIFICATION asking for it." if missing else ""))})
            await self.reporter.emit(run.run_id, _LOG, {"level": "warning", "message": "Self-correction turn.",
                                                        "problems": problems})
            chat.next_turn()
            await self.reporter.save(run)
            return False
        message = ("The result is still invalid after the self-correction turn:\n" if attempts.correction_used
                   else "The result is invalid:\n") + listing
        code = ErrorCode.INSUFFICIENT_CONTEXT if missing else ErrorCode.INVALID_RESULT
        if missing:
            message = (f"The input lacks {', '.join(missing)}, which the success criteria check the "
                       f"answer against; give {'it' if len(missing) == 1 else 'them'} and run again.\n"
                       + message)
        if self.settings.invalid_result_inbox:
            decision = await self._ask_about_invalid(run, result, problems, criteria)
            if decision.decision is Decision.APPROVE:
                return await self._accept_as_partial(run, result, problems, criteria, decision)
            if decision.decision is Decision.RETRY:
                await self._retry_invalid(run, message, problems, decision)
                return False
            message += f"\nFailed by a person{': ' + decision.comment if decision.comment else ''}."
        failure = ResponsePackage(
            status=ResultStatus.FAILURE,
            output_payload=result.output_payload if result is not None else {},
            summary=result.summary if result is not None else None,
            error_report=ErrorReport(code=code.value, message=message,
                                     details={"problems": problems, **({"missing_inputs": missing} if missing else {})}))
        await self.reporter.end(run, RunState.FAILED, result=failure, criteria=criteria,
                                error={"code": code.value, "message": message})
        return True

    async def _clarify(self, run: ActiveRun, result: ResponsePackage, yield_call: ToolCall | None) -> bool:
        attempts, chat = run.attempts, run.chat
        questions = result.open_questions or [result.summary or result.log_summary or "The subagent needs clarification."]
        decision = await self.questions.ask(
            run, ApprovalKind.CLARIFICATION, str(attempts.clarifications + 1),
            f"{run.asker} needs clarification: {questions[0]}"[:300],
            {"questions": questions, "summary": result.summary, "blockers": result.blockers}, "low")
        if not decision.allows:
            message = f"Clarification refused by a person{': ' + decision.comment if decision.comment else ''}."
            failure = result.model_copy(update={
                "status": ResultStatus.FAILURE,
                "error_report": ErrorReport(code=ErrorCode.INSUFFICIENT_CONTEXT.value, message=message)})
            await self.reporter.end(run, RunState.FAILED, result=failure,
                                    error={"code": ErrorCode.INSUFFICIENT_CONTEXT.value, "message": message})
            return True
        attempts.clarifications += 1
        chat.answer_turn()
        answer = decision.answer or decision.comment or "(no answer given)"
        if yield_call is not None:
            chat.answer(yield_call.id, YIELD_CONTROL, {"ok": True, "result": {
                "status": "clarification answered below"}})
        chat.messages.append({"role": "user", "content": f"Answer to your question: {answer}"})
        await self.reporter.emit(run.run_id, _MESSAGE, {"text": answer, "from": decision.decided_by or "approver",
                                                        "clarification": True})
        chat.next_turn()
        await self.reporter.save(run)
        return False

    async def _ask_about_invalid(self, run: ActiveRun, result: ResponsePackage | None, problems: list[str],
                                 criteria: CriteriaReport | None) -> ApprovalDecision:
        """Put a result that is still invalid to a person (kind ``invalid_result``): accept
        it as partial, retry with a fresh context, or fail. One question per attempt."""
        return await self.questions.ask(
            run, ApprovalKind.INVALID_RESULT, str(run.attempts.retries + 1),
            f"{run.asker} handed back an invalid result: {problems[0]}"[:300],
            {"problems": problems, "attempt": run.attempts.retries + 1,
             "result": result.model_dump(mode="json", exclude_none=True) if result is not None else None,
             "criteria_report": criteria.model_dump(mode="json") if criteria is not None else None},
            "medium")

    async def _accept_as_partial(self, run: ActiveRun, result: ResponsePackage | None, problems: list[str],
                                 criteria: CriteriaReport | None, decision: ApprovalDecision) -> bool:
        """A person keeps the invalid result: the run completes with it as PARTIAL_COMPLETION."""
        who = decision.decided_by or "a person"
        warning = (f"Accepted as partial by {who} although it is invalid: {'; '.join(problems)}"
                   + (f" ({decision.comment})" if decision.comment else ""))
        base = result if result is not None else ResponsePackage(
            status=ResultStatus.PARTIAL_COMPLETION, output_payload={})
        partial = base.model_copy(update={"status": ResultStatus.PARTIAL_COMPLETION,
                                          "warnings": [*base.warnings, warning]})
        await self.reporter.emit(run.run_id, _LOG, {"level": "warning", "message": warning})
        await self.reporter.end(run, RunState.COMPLETE, result=partial, criteria=criteria)
        return True

    async def _retry_invalid(self, run: ActiveRun, message: str, problems: list[str],
                             decision: ApprovalDecision) -> None:
        """A person asks for another attempt at an invalid result, in a fresh context."""
        attempts = run.attempts
        attempts.retries += 1
        previous = PreviousFailure(
            attempt_number=attempts.retries + 1, failure_report=message, specific_failures=problems,
            fix_instructions=decision.comment or "Hand back a result that fits the expected output "
                                                 "schema and meets every success criterion.")
        self._fresh_context(run, previous)
        await self.reporter.emit(run.run_id, _LOG, {
            "level": "warning", "action": "retry", "attempt": attempts.retries + 1,
            "message": f"{decision.decided_by or 'A person'} asked for another attempt with a fresh "
                       f"context (attempt {attempts.retries + 1})."})
        run.chat.next_turn()
        await self.reporter.save(run)

    def _fresh_context(self, run: ActiveRun, previous: PreviousFailure) -> None:
        """Start the run's conversation again, with ``previous_failure`` in its packet."""
        scope, chat = run.scope, run.chat
        assert scope.packet is not None
        scope.replace_packet(scope.packet.model_copy(update={"previous_failure": previous}))
        chat.messages = initial_messages(scope.packet, scope.packet_dict(), examples=scope.examples,
                                         compact=run.adapter.compact_prompt)
        chat.answered = set()
        chat.iteration = 0
        run.attempts.correction_used = False

    async def _failed(self, run: ActiveRun, result: ResponsePackage) -> bool:
        """A FAILURE result: the agloop retry table decides on a fresh-context retry."""
        attempts = run.attempts
        reason = result.failed_reason
        rule = recovery_for(reason) if reason is not None else None
        limit = min(rule.max_retries, self.settings.retry_limit) if rule is not None and rule.retry else 0
        report = result.error_report
        if rule is not None and attempts.retries < limit:
            attempts.retries += 1
            scope, chat = run.scope, run.chat
            assert scope.packet is not None
            previous = PreviousFailure(
                attempt_number=attempts.retries + 1,
                failure_report=(report.message if report and report.message else result.summary) or str(reason),
                specific_failures=list(result.blockers) or ([report.message] if report and report.message else []),
                fix_instructions=rule.description)
            self._fresh_context(run, previous)
            await self.reporter.emit(run.run_id, _LOG, {
                "level": "warning", "failed_reason": str(reason), "action": rule.action.value,
                "attempt": attempts.retries + 1,
                "message": f"Attempt {attempts.retries} failed ({reason}): {rule.description}; "
                           f"retrying with a fresh context ({attempts.retries} of {limit})."})
            chat.next_turn()
            await self.reporter.save(run)
            return False
        code = report.code if report is not None and report.code else ErrorCode.TOOL_FAILURE.value
        message = (report.message if report is not None and report.message else
                   result.summary or "The subagent reported FAILURE.")
        error: dict[str, Any] = {"code": code, "message": message}
        if reason is not None:
            error["failed_reason"] = str(reason)
            if attempts.retries:
                error["retries"] = attempts.retries
        await self.reporter.end(run, RunState.FAILED, result=result, error=error)
        return True
