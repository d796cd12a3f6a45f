"""Deciding an inbox item: a person's decision is recorded once, and the parked run resumes."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from delegations.live import feed
from delegations.models import Approval
from delegations.protocol.approvals import Decision
from delegations.runs.queue import enqueue_run
from delegations.runs.workflows import RunError


def approval_decide(*, approval: Approval, user: Any, decision: str, comment: str = "",
                    answer: str = "", edited_arguments: dict[str, Any] | None = None) -> Approval:
    """Record a person's decision and resume the parked tree from its checkpoint."""
    try:
        choice = Decision(decision)
    except ValueError:
        raise RunError(f"decision must be one of {', '.join(d.value for d in Decision)}, "
                       f"not {decision!r}.", status=422) from None
    if choice == Decision.REJECT and not comment.strip():
        raise RunError("A rejection needs a comment saying why (it is shown to the run).", status=422)
    if choice == Decision.ANSWER and not answer.strip():
        raise RunError("decision 'answer' needs the answer text in 'answer'.", status=422)
    if choice == Decision.EDIT and not isinstance(edited_arguments, dict):
        raise RunError("decision 'edit' needs 'edited_arguments', a JSON object with the "
                       "tool call's new arguments.", status=422)
    with transaction.atomic():
        locked = Approval.objects.select_for_update().select_related("run").get(pk=approval.pk)
        if not locked.is_pending:
            raise RunError(f"This item was already {locked.status}; decisions are final.")
        locked.record(choice, user=user, comment=comment.strip(), answer=answer.strip(),
                      edited_arguments=edited_arguments)
        locked.save()
        notice = feed.inbox_message("approval.decided", locked.as_event_data())
        transaction.on_commit(lambda: feed.publish_sync(notice))
        enqueue_run(locked.run.root_run_id)
    return locked
