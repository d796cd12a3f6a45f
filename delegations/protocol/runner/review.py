"""Unsure goes to a person, with the work done.

A result whose only unmet criteria are review criteria (``confident``: the model chose a
label with too low a probability; or any criterion marked ``"review": true``) is not sent
back to the model (greedy decoding would give the same guess again): it parks as an inbox
item of kind ``review`` showing the input, the proposed value, its probability and the
alternatives. A person confirms it (approve), corrects it within the output schema (edit,
``edited_arguments`` holding the corrected fields), or fails the run (reject). The run then
completes with the person's value; the result's ``metrics["review"]`` and each reviewed
label's score say who decided what, and the criteria report says it too.
"""

from __future__ import annotations

from typing import Any

from ..approvals import ApprovalDecision, ApprovalKind, Decision
from ..criteria import LABEL_SCORES, CriteriaReport, label_score, output_field, parse_criterion
from ..criteria.shaping import label_values
from ..errors import ErrorCode, ProtocolError
from ..events import EventType
from ..lifecycle import RunState
from ..packet import HandoffPacket
from ..results import ErrorReport, ResponsePackage, ResultStatus
from ..schemas import validate_instance
from .questions import Questions
from .reporting import Reporter
from .state import ActiveRun

_LOG = EventType.LOG.value


def with_label_scores(result: ResponsePackage, scores: dict[str, Any]) -> ResponsePackage:
    """``result`` with the adapter's label scores in ``metrics["labels"]``: those of the
    fields whose value is the one scored, and nothing a model wrote there itself."""
    payload = result.output_payload
    kept = {name: score for name, score in scores.items()
            if isinstance(score, dict) and name in payload and payload[name] == score.get("value")}
    metrics = {key: value for key, value in result.metrics.items() if key != LABEL_SCORES}
    if kept:
        metrics[LABEL_SCORES] = kept
    if metrics == result.metrics:
        return result
    return result.model_copy(update={"metrics": metrics})


def review_items(packet: HandoffPacket, criteria: CriteriaReport | None,
                 problems: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """The unmet review criteria (field, report item) when they are all that is wrong with
    the result; empty when something else is (or nothing is)."""
    if criteria is None or not problems:
        return []
    unmet: list[tuple[str, dict[str, Any]]] = []
    for raw, item in zip(packet.success_criteria, criteria.items, strict=False):
        if item.met or not item.checkable:
            continue
        try:
            criterion = parse_criterion(raw)
        except ProtocolError:
            return []
        path = criterion.field_path if criterion is not None else None
        if criterion is None or not criterion.review or path is None:
            return []
        unmet.append((output_field(path), item.as_dict()))
    return unmet if len(unmet) == len(problems) else []


def review_payload(packet: HandoffPacket, result: ResponsePackage, criteria: CriteriaReport,
                   unmet: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """What the review item shows: the input, each field to review with its proposed
    value, probability, alternatives and the values the schema allows, and the result."""
    properties = (packet.expected_output_schema or {}).get("properties") or {}
    fields: dict[str, dict[str, Any]] = {}
    for name, item in unmet:
        entry = fields.setdefault(name, {"field": name, "proposed": result.output_payload.get(name),
                                         "schema": properties.get(name) or {},
                                         "choices": label_values(properties.get(name)), "criteria": []})
        entry["criteria"].append({"criterion": item["criterion"], "detail": item["detail"]})
        score = label_score(result, name)
        if score is not None:
            entry.update(probability=score.get("probability"), alternatives=score.get("alternatives") or [],
                         calibrated=bool(score.get("calibrated")))
    return {"fields": list(fields.values()), "input": dict(packet.input_data), "goal": packet.goal,
            "result": result.model_dump(mode="json", exclude_none=True),
            "criteria_report": criteria.as_dict()}


def review_title(asker: str, payload: dict[str, Any]) -> str:
    """One line saying what is reviewed: 'Review sentiment of review-sentiment: "mixed" (55 %)'."""
    parts = []
    for entry in payload["fields"]:
        probability = entry.get("probability")
        shown = f" ({probability * 100:.0f} %)" if isinstance(probability, int | float) else ""
        parts.append(f"{entry['field']} = {_short(entry['proposed'])}{shown}")
    return f"Review {', '.join(entry['field'] for entry in payload['fields'])} of {asker}: " \
           f"the model proposes {'; '.join(parts)}"[:300]


def corrected(packet: HandoffPacket, result: ResponsePackage, payload: dict[str, Any],
              decision: ApprovalDecision) -> tuple[ResponsePackage, list[str]]:
    """The result as the person left it (confirmed, or with their corrected fields) with the
    review recorded in its metrics; and what makes their correction unusable, if anything."""
    names = [entry["field"] for entry in payload["fields"]]
    edited = decision.edited_arguments if decision.decision is Decision.EDIT else None
    changes = {name: value for name, value in (edited or {}).items()}
    problems = [f"{name}: not a field under review ({', '.join(names)})" for name in changes if name not in names]
    output = {**result.output_payload, **{k: v for k, v in changes.items() if k in names}}
    schema = packet.expected_output_schema
    if schema and not problems:
        problems = [f"{issue.field}: {issue.message}" for issue in validate_instance(schema, output, "output_payload")]
    who = decision.decided_by or "a person"
    labels = dict(result.metrics.get(LABEL_SCORES) or {})
    for name in names:
        before = labels.get(name) or {}
        labels[name] = {**before, "value": output.get(name), "proposed": result.output_payload.get(name),
                        "reviewed_by": who}
    review = {"decided_by": who, "decision": "corrected" if changes else "confirmed",
              "fields": {name: {"proposed": result.output_payload.get(name), "value": output.get(name)}
                         for name in names}}
    if decision.comment:
        review["comment"] = decision.comment
    metrics = {**result.metrics, LABEL_SCORES: labels, "review": review}
    return result.model_copy(update={"output_payload": output, "metrics": metrics}), problems


class Review:
    """Puts a result to a person for review and finishes the run with their decision."""

    def __init__(self, reporter: Reporter, questions: Questions) -> None:
        self.reporter = reporter
        self.questions = questions

    async def ask(self, run: ActiveRun, result: ResponsePackage, criteria: CriteriaReport,
                  unmet: list[tuple[str, dict[str, Any]]],
                  recheck: Any) -> bool:
        """Ask, then end the run as decided (True: it ended). ``recheck(result)`` gives the
        criteria report and problems of a result (the judge's own check)."""
        packet = run.scope.packet
        assert packet is not None
        payload = review_payload(packet, result, criteria, unmet)
        decision = await self.questions.ask(run, ApprovalKind.REVIEW, str(run.attempts.retries + 1),
                                            review_title(run.asker, payload), payload, "low")
        who = decision.decided_by or "a person"
        if decision.decision is Decision.REJECT:
            comment = decision.comment.strip().rstrip(".")
            message = f"Failed in review by {who}{': ' + comment if comment else ''}."
            failure = result.model_copy(update={
                "status": ResultStatus.FAILURE,
                "error_report": ErrorReport(code=ErrorCode.INVALID_RESULT.value, message=message)})
            await self.reporter.end(run, RunState.FAILED, result=failure, criteria=criteria,
                                    error={"code": ErrorCode.INVALID_RESULT.value, "message": message})
            return True
        reviewed, problems = corrected(packet, result, payload, decision)
        if problems:
            message = f"The values set in review do not fit the output schema: {'; '.join(problems)}."
            await self.reporter.end(run, RunState.FAILED, result=result, criteria=criteria,
                                    error={"code": ErrorCode.INVALID_RESULT.value, "message": message})
            return True
        review = reviewed.metrics["review"]
        changes = ", ".join(f"{name} {_short(values['proposed'])} -> {_short(values['value'])}"
                            for name, values in review["fields"].items() if values["proposed"] != values["value"])
        await self.reporter.emit(run.run_id, _LOG, {
            "level": "info", "review": review,
            "message": (f"{who} corrected {changes} in review." if changes else
                        f"{who} confirmed {', '.join(review['fields'])} in review.")})
        report, _ = recheck(reviewed)
        await self.reporter.end(run, RunState.COMPLETE, result=reviewed, criteria=report)
        return True


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, str) else f'"{value}"'
    return text if len(text) <= 60 else text[:57] + "..."
