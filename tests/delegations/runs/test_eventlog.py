"""The event log and the runner's database-backed sink (numbering, coalescing, child rows)."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from django.db import close_old_connections

from delegations.live import feed as live
from delegations.models import Run, RunCheckpoint, RunCheckpointPart, RunEvent
from delegations.models.runs import new_run_id
from delegations.protocol.checkpoints import Checkpoint
from delegations.runs.checkpoints import DjangoCheckpointStore
from delegations.runs.database_thread import DatabaseThread
from delegations.runs.eventlog import PendingCheckpoint, PendingEvent, WriterMemory, persist_batch
from delegations.runs.sink import DjangoEventSink

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def make_root(**fields: Any) -> Run:
    run_id = new_run_id()
    return Run.objects.create(id=run_id, root_id=run_id, adapter_name="scripted",
                              input_hash="0" * 64, **fields)


def child_event(parent: Run, label: str = "kid") -> PendingEvent:
    child_id = new_run_id()
    return PendingEvent(parent.pk, "child", {
        "child_run_id": child_id, "label": label, "depth": parent.depth + 1,
        "session_key": f"agent:main:subagent:{child_id}",
        "packet": {"goal": "find part", "subagent_type": "researcher"},
        "budget": {"max_model_calls": 3}, "capabilities": ["fs_read"]}, time.time())


def seqs(run: Run) -> list[int]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))


def test_events_stay_gapless_when_many_writers_append_to_one_tree_at_once() -> None:
    root = make_root()
    batch = persist_batch([child_event(root)])
    child_id = batch.events[0]["data"]["child_run_id"]
    errors: list[BaseException] = []

    def writer(number: int) -> None:
        try:
            for index in range(15):
                persist_batch([PendingEvent(root.pk, "log", {"writer": number, "i": index}, time.time()),
                               PendingEvent(child_id, "log", {"writer": number, "i": index}, time.time())])
        except BaseException as exc:  # reported below: a thread's failure must fail the test
            errors.append(exc)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    root.refresh_from_db()
    assert seqs(root) == list(range(1, 6 * 15 + 2))
    assert root.last_seq == 6 * 15 + 1
    assert seqs(Run.objects.get(pk=child_id)) == list(range(1, 6 * 15 + 1))


def test_a_child_event_creates_the_child_run_with_its_place_in_the_tree() -> None:
    root = make_root(owner=None, label="coordinator")
    event = child_event(root, label="scout")
    stored = persist_batch([event, PendingEvent(event.data["child_run_id"], "state",
                                                {"state": "PENDING", "previous": None}, time.time())])
    child = Run.objects.get(pk=event.data["child_run_id"])
    assert (child.parent_id, child.root_id, child.depth) == (root.pk, root.pk, 1)
    assert child.label == "scout" and child.session_key.startswith("agent:main:subagent:")
    assert child.budget == {"max_model_calls": 3} and child.capabilities == ["fs_read"]
    assert len(child.input_hash) == 64 and child.goal == "find part"
    assert stored.lineage[child.pk] == [root.pk]
    assert [e["seq"] for e in stored.events] == [1, 1]


def test_state_events_move_the_run_row_and_stamp_its_times() -> None:
    root = make_root()
    now = time.time()
    persist_batch([PendingEvent(root.pk, "state", {"state": s, "previous": None}, now)
                   for s in ("PENDING", "ACCEPTED", "WORKING")])
    root.refresh_from_db()
    assert root.state == "WORKING" and root.started_at is not None and root.finished_at is None
    persist_batch([PendingEvent(root.pk, "result", {"state": "COMPLETE", "result": {"status": "SUCCESS"},
                                                     "criteria_report": {"all_met": True},
                                                     "usage": {"model_calls": 1}}, now)])
    root.refresh_from_db()
    assert root.state == "COMPLETE" and root.finished_at is not None
    assert root.result == {"status": "SUCCESS"} and root.criteria_report == {"all_met": True}


def test_an_illegal_state_change_is_logged_but_not_applied_to_the_row() -> None:
    root = make_root(state="CANCELLED")
    persist_batch([PendingEvent(root.pk, "state", {"state": "WORKING"}, time.time())])
    root.refresh_from_db()
    assert root.state == "CANCELLED"
    assert seqs(root) == [1]  # the event log still records what the runner said


def test_model_calls_are_charged_to_the_run_and_every_ancestor() -> None:
    root = make_root()
    event = child_event(root)
    persist_batch([event, PendingEvent(event.data["child_run_id"], "model_call",
                                       {"input_tokens": 10, "output_tokens": 5, "cost_usd": 0.5},
                                       time.time())])
    root.refresh_from_db()
    child = Run.objects.get(pk=event.data["child_run_id"])
    for run in (root, child):
        assert run.usage["model_calls"] == 1
        assert run.usage["total_tokens"] == 15 and run.usage["cost_usd"] == 0.5


async def _emit_text(sink: DjangoEventSink, run_id: str, deltas: list[str]) -> None:
    for delta in deltas:
        await sink.emit(run_id, "text", {"delta": delta})
    await sink.emit(run_id, "state", {"state": "PENDING", "previous": None})
    await sink.aclose()


def test_the_sink_merges_text_deltas_that_arrive_together_without_losing_a_character() -> None:
    root = make_root()
    deltas = [f"w{i} " for i in range(200)]
    db = DatabaseThread()
    try:
        asyncio.run(_emit_text(DjangoEventSink(db), root.pk, deltas))
    finally:
        db.close()
    events = list(RunEvent.objects.filter(run=root).order_by("seq"))
    texts = [e for e in events if e.type == "text"]
    assert len(texts) < 5
    assert "".join(e.data["delta"] for e in texts) == "".join(deltas)
    assert events[-1].type == "state"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def _slow_text(sink: DjangoEventSink, run_id: str) -> None:
    for index in range(6):
        await sink.emit(run_id, "text", {"delta": str(index)})
        await asyncio.sleep(0.03)
    await sink.aclose()


def test_text_is_written_at_least_every_fifty_milliseconds_while_it_streams() -> None:
    root = make_root()
    db = DatabaseThread()
    try:
        asyncio.run(_slow_text(DjangoEventSink(db), root.pk))
    finally:
        db.close()
    texts = list(RunEvent.objects.filter(run=root, type="text").values_list("data", flat=True))
    assert len(texts) >= 2  # 180 ms of streaming is not held back as one event
    assert "".join(t["delta"] for t in texts) == "012345"


async def _stored_in_bursts(sink: DjangoEventSink, run_id: str) -> None:
    await sink.emit(run_id, "log", {"n": 0})
    await sink.flush()
    for n in range(1, 4):  # three batches stored while the first publication's window is open
        await sink.emit(run_id, "log", {"n": n})
        await sink.flush()
    await sink.aclose()


def test_an_idle_sink_publishes_at_once_and_a_busy_one_in_few_large_publications(
        monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_root()
    published: list[tuple[float, list[int]]] = []

    async def record(messages: list[tuple[str, dict[str, Any]]]) -> None:
        for _, message in messages:
            published.append((time.monotonic(), [seq for _, seq in message["keys"]]))

    monkeypatch.setattr(live, "publish", record)
    db = DatabaseThread()
    started = time.monotonic()
    try:
        asyncio.run(_stored_in_bursts(DjangoEventSink(db, publish_s=0.5), root.pk))
    finally:
        db.close()
    assert [seqs for _, seqs in published] == [[1], [2, 3, 4]]
    assert published[0][0] - started < 0.4          # not held back for the window
    assert published[1][0] - published[0][0] >= 0.5


async def _checkpoint_roundtrip(db: DatabaseThread, run_id: str) -> Checkpoint | None:
    sink = DjangoEventSink(db)
    store = DjangoCheckpointStore(sink)
    await sink.emit(run_id, "log", {"message": "before"})
    await store.save(run_id, Checkpoint(run_id=run_id, root_run_id=run_id, iteration=3))
    fresh = DjangoCheckpointStore(sink)
    loaded = await fresh.load(run_id)
    await sink.aclose()
    return loaded


def test_a_saved_checkpoint_is_stored_with_the_events_before_it_and_loads_back() -> None:
    root = make_root()
    db = DatabaseThread()
    try:
        loaded = asyncio.run(_checkpoint_roundtrip(db, root.pk))
    finally:
        db.close()
    assert loaded is not None and loaded.iteration == 3
    assert RunCheckpoint.objects.get(run=root).data["iteration"] == 3 and seqs(root) == [1]


async def _keep_then_finish(db: DatabaseThread, run_id: str) -> tuple[bool, bool, Checkpoint | None]:
    sink = DjangoEventSink(db)
    store = DjangoCheckpointStore(sink)
    await store.save(run_id, Checkpoint(run_id=run_id, root_run_id=run_id, state="WORKING"))
    kept = run_id in store._latest
    await store.save(run_id, Checkpoint(run_id=run_id, root_run_id=run_id, state="COMPLETE", iteration=2))
    dropped = run_id not in store._latest
    loaded = await store.load(run_id)
    await sink.aclose()
    return kept, dropped, loaded


def test_the_checkpoint_store_forgets_finished_runs_and_loads_them_from_the_database() -> None:
    root = make_root()
    db = DatabaseThread()
    try:
        kept, dropped, loaded = asyncio.run(_keep_then_finish(db, root.pk))
    finally:
        db.close()
    assert kept and dropped
    assert loaded is not None and loaded.state == "COMPLETE" and loaded.iteration == 2


def save_checkpoint(memory: WriterMemory, run: Run, messages: list[dict[str, Any]], config: dict[str, Any],
                    state: str = "WORKING") -> None:
    checkpoint = Checkpoint(run_id=run.pk, root_run_id=run.pk, state=state)
    checkpoint.__dict__.update(messages=messages, adapter_config=config)  # kept as they are, as the runner does
    persist_batch([PendingCheckpoint(run.pk, checkpoint)], memory)


def part_ids(run: Run) -> dict[tuple[str, int], int]:
    rows = RunCheckpointPart.objects.filter(run=run).values_list("field", "position", "pk")
    return {(field, position): pk for field, position, pk in rows}


def test_a_checkpoint_save_writes_only_the_messages_added_and_a_changed_config() -> None:
    root = make_root()
    memory = WriterMemory()
    config = {"script": [{"text": "x" * 1000}]}
    first, second, third = ({"role": "user", "content": f"message {n}"} for n in range(3))
    save_checkpoint(memory, root, [first, second], config)
    before = part_ids(root)
    assert set(before) == {("messages", 0), ("messages", 1), ("adapter_config", 0)}
    save_checkpoint(memory, root, [first, second, third], config)
    after = part_ids(root)
    assert {key: after[key] for key in before} == before, "stored parts were written again"
    assert set(after) - set(before) == {("messages", 2)}
    assert "messages" not in RunCheckpoint.objects.get(run=root).data
    assert RunCheckpoint.data_of(root.pk)["messages"] == [first, second, third]
    # a conversation started again (new objects from position 1) and a new config replace what changed
    again = {"role": "user", "content": "again"}
    save_checkpoint(memory, root, [first, again], {"model": "other"})
    replaced = part_ids(root)
    assert replaced[("messages", 0)] == before[("messages", 0)] and ("messages", 2) not in replaced
    assert replaced[("adapter_config", 0)] != before[("adapter_config", 0)]
    data = RunCheckpoint.data_of(root.pk)
    assert data is not None and data["messages"] == [first, again] and data["adapter_config"] == {"model": "other"}
    loaded = Checkpoint.model_validate(data)
    assert loaded.state == "WORKING" and loaded.messages == [first, again]


def test_a_writer_that_does_not_know_what_is_stored_writes_every_part_anew() -> None:
    root = make_root()
    save_checkpoint(WriterMemory(), root, [{"role": "user", "content": n} for n in "abc"], {"a": 1})
    save_checkpoint(WriterMemory(), root, [{"role": "user", "content": "z"}], {"b": 2})
    assert RunCheckpoint.data_of(root.pk) == {**RunCheckpoint.objects.get(run=root).data,
                                              "messages": [{"role": "user", "content": "z"}],
                                              "adapter_config": {"b": 2}}
    assert len(part_ids(root)) == 2


def test_a_finished_runs_parts_are_forgotten_by_the_writer() -> None:
    root = make_root()
    memory = WriterMemory()
    message = {"role": "user", "content": "hi"}
    save_checkpoint(memory, root, [message], {})
    assert root.pk in memory.checkpoints
    save_checkpoint(memory, root, [message], {}, state="COMPLETE")
    assert root.pk not in memory.checkpoints
    assert RunCheckpoint.data_of(root.pk)["messages"] == [message]


def test_a_checkpoint_for_an_unknown_run_is_dropped_not_raised() -> None:
    stored = persist_batch([PendingCheckpoint("f" * 32, Checkpoint(run_id="x", root_run_id="x"))])
    assert stored.events == []


async def _emit_odd_value(sink: DjangoEventSink, run_id: str) -> None:
    await sink.emit(run_id, "log", {"path": Path("/tmp/x"), "when": date(2026, 1, 2),
                                    "ratio": float("nan")})
    await sink.aclose()


def test_an_event_value_json_cannot_hold_is_stored_as_text_not_lost() -> None:
    root = make_root()
    db = DatabaseThread()
    try:
        asyncio.run(_emit_odd_value(DjangoEventSink(db), root.pk))
    finally:
        db.close()
    assert RunEvent.objects.get(run=root).data == {"path": "/tmp/x", "when": "2026-01-02", "ratio": None}


@pytest.mark.django_db(transaction=True)
def test_migrating_moves_saved_checkpoints_into_their_own_table_and_back(composer: Any) -> None:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("delegations", "0003_runs")], [("delegations", "0004_run_checkpoints")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old_run = executor.loader.project_state(before[0]).apps.get_model("delegations", "Run")
    for run_id, checkpoint in (("a" * 32, {"run_id": "a" * 32, "iteration": 2}), ("b" * 32, None)):
        old_run.objects.create(id=run_id, root_id=run_id, owner_id=composer.pk, adapter_name="scripted",
                               input_hash="0" * 64, checkpoint=checkpoint)
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    assert dict(RunCheckpoint.objects.values_list("run_id", "data")) == {"a" * 32: {"run_id": "a" * 32,
                                                                                    "iteration": 2}}
    # (not through Run: the table is as migration 0004 left it, without later columns)
    assert RunCheckpoint.objects.filter(run_id="a" * 32).exists()
    assert not RunCheckpoint.objects.filter(run_id="b" * 32).exists()
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old_run = executor.loader.project_state(before[0]).apps.get_model("delegations", "Run")
    assert old_run.objects.get(pk="a" * 32).checkpoint == {"run_id": "a" * 32, "iteration": 2}
    MigrationExecutor(connection).migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_migrating_splits_a_checkpoints_conversation_into_parts_and_back(composer: Any) -> None:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("delegations", "0004_run_checkpoints")], [("delegations", "0005_checkpoint_parts")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    apps = executor.loader.project_state(before[0]).apps
    run_id = "c" * 32
    apps.get_model("delegations", "Run").objects.create(id=run_id, root_id=run_id, owner_id=composer.pk,
                                                         adapter_name="scripted", input_hash="0" * 64)
    whole = {"run_id": run_id, "iteration": 2, "adapter_config": {"script": []},
             "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
    apps.get_model("delegations", "RunCheckpoint").objects.create(run_id=run_id, data=whole)
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    assert RunCheckpoint.objects.get(run_id=run_id).data == {"run_id": run_id, "iteration": 2}
    assert RunCheckpointPart.objects.filter(run_id=run_id).count() == 3
    assert RunCheckpoint.data_of(run_id) == whole
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    apps = executor.loader.project_state(before[0]).apps
    assert apps.get_model("delegations", "RunCheckpoint").objects.get(run_id=run_id).data == whole
    MigrationExecutor(connection).migrate(executor.loader.graph.leaf_nodes())
