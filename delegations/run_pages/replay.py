"""A finished run's replay: the tree's stored events, in the order they were stored, cut
down to what the run page re-plays (states, usage, tool calls, streamed text). The page
steps through them at 0.5x–10x and re-draws the tree, the meters and the timeline at each
one; ``?at=N`` opens it at the N-th event, a link to that moment."""

from __future__ import annotations

from typing import Any

from delegations.models import Run, RunEvent
from delegations.protocol.lifecycle import RunState
from delegations.run_pages.display import state_label, state_tone


def replay_events(run: Run) -> dict[str, Any]:
    """The run's tree as the replay needs it: ``runs`` (ids, parents first), and ``events``,
    each ``[event id, run index, type, ms since the epoch, extra]`` where extra is the new
    state of a ``state`` event, ``[tokens, cost]`` of a ``model_call``, the delta of a
    ``text`` event, else null."""
    members = list(run.tree().order_by("depth", "created_at", "pk").values_list("pk", "parent_id"))
    index = {pk: place for place, (pk, _parent) in enumerate(members)}
    rows = (RunEvent.objects.filter(run_id__in=list(index)).order_by("id")
            .values_list("id", "run_id", "type", "ts", "data"))
    events = []
    for event_id, run_id, kind, ts, data in rows:
        data = data if isinstance(data, dict) else {}
        extra: Any = None
        if kind == "state":
            extra = str(data.get("state") or "")
        elif kind == "model_call":
            extra = [int(data.get("input_tokens") or 0) + int(data.get("output_tokens") or 0),
                     float(data.get("cost_usd") or 0.0)]
        elif kind == "text":
            extra = str(data.get("delta") or "")
        events.append([event_id, index[run_id], kind, int(ts.timestamp() * 1000), extra])
    return {"run": run.pk, "runs": [{"id": pk, "parent": parent if parent in index else None}
                                    for pk, parent in members],
            "events": events, "finished": run.is_terminal,
            # each state as the page shows it: its words and its badge's tone
            "states": {state.value: {"label": state_label(state.value), "tone": state_tone(state)}
                       for state in RunState}}
