"""The runner's checkpoint store, backed by ``RunCheckpoint`` and written through the sink."""

from __future__ import annotations

from delegations.models import RunCheckpoint
from delegations.protocol.checkpoints import Checkpoint
from delegations.protocol.lifecycle import is_terminal
from delegations.runs.rollups import subtree_usages
from delegations.runs.sink import DjangoEventSink


class DjangoCheckpointStore:
    """Checkpoints in ``RunCheckpoint``, written in order with the run's events.

    A checkpoint loaded to resume has its usage counted from the event log. A parent saves
    its checkpoint before its children start and next once they are done, so after its
    worker died (or lost the tree to another) the usage it saved lacks what its children
    spent meanwhile, and the tree's budget would stop counting it; the subtree's
    ``model_call`` events hold every call, each stored with the checkpoint that follows
    it, so a resumed tree counts exactly what a run without a crash would. The figures are
    read once per execution: a run's subtree works only once the run is restored, so
    they still hold when a parent reattaches its children."""

    def __init__(self, sink: DjangoEventSink) -> None:
        self.sink = sink
        self._latest: dict[str, Checkpoint] = {}
        self._tree_usage: dict[str, dict[str, int | float]] | None = None

    async def save(self, run_id: str, checkpoint: Checkpoint) -> None:
        # a finished run's checkpoint is read again only on a resume, which loads it from
        # the database: keeping all of a big tree's would grow the heap the collector walks
        if is_terminal(checkpoint.state):
            self._latest.pop(run_id, None)
        else:
            self._latest[run_id] = checkpoint
        await self.sink.store_checkpoint(run_id, checkpoint)

    async def load(self, run_id: str) -> Checkpoint | None:
        if run_id in self._latest:
            return self._latest[run_id]
        await self.sink.flush()
        data = await self.sink.db.call(RunCheckpoint.data_of, run_id)
        if not data:
            return None
        if self._tree_usage is None:
            root_id = str(data.get("root_run_id") or run_id)
            self._tree_usage = await self.sink.db.call(subtree_usages, root_id)
        data["usage"] = {**(data.get("usage") or {}), **self._tree_usage.get(run_id, {})}
        return Checkpoint.model_validate(data)
