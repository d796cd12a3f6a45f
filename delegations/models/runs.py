"""A run: one execution of a hand-off packet, the delegation record of a delegation contract.

The run row is a summary kept up to date by the event sink; the event log
(:class:`~delegations.models.RunEvent`) is the source of truth. Run ids are the runner's
ids (uuid4 hex), so ``Run.pk`` is what events, checkpoints and URLs use.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, models
from django.db.models import Q
from django.utils import timezone

from delegations.models.raw_rows import read, reader, select
from delegations.protocol.a2a_subagents import parse_remote_ref
from delegations.protocol.lifecycle import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    RunState,
    check_transition,
)
from delegations.protocol.sessions import new_run_id
from delegations.protocol.trace_context import TraceContext, run_context

TERMINAL = [str(state) for state in TERMINAL_STATES]
ACTIVE = sorted(str(state) for state in ACTIVE_STATES)
# States in which a root run occupies one of its owner's lane slots (OpenClaw's queue lane):
# a run parked for a person holds no worker and no slot.
LANE_STATES = [str(RunState.ACCEPTED), str(RunState.WORKING)]


class RunQuerySet(models.QuerySet["Run"]):
    def visible_to(self, user: Any) -> RunQuerySet:
        """Owners see their runs (and every run in their trees); staff see all."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        if user.is_staff or user.is_superuser:
            return self
        return self.filter(Q(owner=user) | Q(root__owner=user))

    def roots(self) -> RunQuerySet:
        return self.filter(parent__isnull=True)

    def active(self) -> RunQuerySet:
        # named, not "not terminal": the (state, parent) index then finds the few runs at
        # work (the dashboard and the sweeper read every run ever made through NOT IN)
        return self.filter(state__in=ACTIVE)

    def finished(self) -> RunQuerySet:
        return self.filter(state__in=TERMINAL)

    def in_lane(self) -> RunQuerySet:
        """Root runs that hold a slot in their owner's lane: running, or handed to a worker."""
        return self.roots().filter(
            Q(state__in=LANE_STATES) | Q(state=RunState.PENDING, allocated_at__isnull=False))

    def waiting_in_lane(self) -> RunQuerySet:
        """Root runs waiting for a lane slot, oldest first."""
        return self.roots().filter(state=RunState.PENDING, allocated_at__isnull=True).order_by(
            "created_at")

    def waiting_to_start(self) -> RunQuerySet:
        """Root runs not started yet: waiting for a lane slot, or handed to a worker that has
        not taken them (the backlog backpressure bounds)."""
        return self.roots().filter(state=RunState.PENDING)

    def lease_expired(self, now: datetime | None = None) -> RunQuerySet:
        return self.roots().active().filter(lease_expires_at__lt=now or timezone.now())

    def rows(self, ids: list[str], *, lock: bool = False, without: tuple[str, ...] = ()) -> list[Run]:
        """These runs, in id order, read by one raw SELECT: the fields ``without`` are left
        to load when read, and the rows are locked until the transaction ends when ``lock``
        (where the database can). The ORM compiles its query again on every call, and for
        a run's forty columns that cost more than running it: a run read whole took 915 µs
        through ``select_related("owner")...first()``, 320 through ``raw()`` and 147 so;
        without the bulky fields, as the event log reads it, 298 through ``raw()`` and 105
        so (SQLite; 1,025 and 587 on PostgreSQL; this machine, 2026-12-05)."""
        if not ids:
            return []
        quote = connection.ops.quote_name
        tail = f"WHERE {quote('id')} IN ({', '.join(['%s'] * len(ids))}) ORDER BY {quote('id')}"
        if lock and connection.features.has_select_for_update:
            tail += " FOR UPDATE"
        return select(Run, tail, ids, without)

    def take_lease(self, run_id: str, owner: str, *, until: datetime, free_before: datetime) -> Run | None:
        """Root run ``run_id`` leased to ``owner`` until ``until`` and read whole, by one
        raw UPDATE ... RETURNING, if it is not over and its lease is free (none, or run out
        before ``free_before``); None otherwise. Every queued run's task asks it: taken and
        released, through the ORM's update and get it took 3,376 µs on PostgreSQL (1,866 on
        SQLite), so 2,064 (1,040) (this machine, 2026-12-05)."""
        quote = connection.ops.quote_name
        adapt = connection.ops.adapt_datetimefield_value
        lease_owner, lease_expires_at = quote("lease_owner"), quote("lease_expires_at")
        terminal = ", ".join(["%s"] * len(TERMINAL))
        sql = (f"UPDATE {quote(Run._meta.db_table)} SET {lease_owner} = %s, {lease_expires_at} = %s "
               f"WHERE {quote('id')} = %s AND {quote('parent_id')} IS NULL "
               f"AND {quote('state')} NOT IN ({terminal}) "
               f"AND ({lease_owner} = '' OR {lease_expires_at} IS NULL OR {lease_expires_at} < %s) "
               f"RETURNING {reader(Run).columns}")
        taken = read(Run, sql, [owner, adapt(until), run_id, *TERMINAL, adapt(free_before)])
        return taken[0] if taken else None

    def change_lease(self, run_id: str, held_by: str, *, owner: str, until: datetime | None) -> bool:
        """Give run ``run_id``'s lease, if ``held_by`` holds it, to ``owner`` ("": nobody)
        until ``until``; whether it was held. A raw UPDATE: every tree releases its lease
        as it ends, and the ORM's update took 174 µs against 25 (SQLite, this machine,
        2026-12-05)."""
        quote = connection.ops.quote_name
        with connection.cursor() as cursor:
            cursor.execute(f"UPDATE {quote(Run._meta.db_table)} SET {quote('lease_owner')} = %s, "
                           f"{quote('lease_expires_at')} = %s WHERE {quote('id')} = %s "
                           f"AND {quote('lease_owner')} = %s",
                           [owner, connection.ops.adapt_datetimefield_value(until), run_id, held_by])
            return bool(cursor.rowcount)

    def state_of(self, run_id: str) -> str | None:
        """The run's state alone (None: no such run), by a raw SELECT: a waiting client
        asks between notices, and the ORM's query took 255 µs against 16 (this machine,
        2026-12-05)."""
        quote = connection.ops.quote_name
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {quote('state')} FROM {quote(Run._meta.db_table)} WHERE {quote('id')} = %s",
                           [run_id])
            row = cursor.fetchone()
        return None if row is None else str(row[0])

    def children_of(self, run_id: str) -> list[tuple[str, str, str, int]]:
        """The run's children as (id, label, state, depth), oldest first, by a raw SELECT:
        every run's answer lists them, and the ORM's query took 388 µs against 18 (this
        machine, 2026-12-05)."""
        quote = connection.ops.quote_name
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {quote('id')}, {quote('label')}, {quote('state')}, {quote('depth')} "
                           f"FROM {quote(Run._meta.db_table)} WHERE {quote('parent_id')} = %s "
                           f"ORDER BY {quote('created_at')}, {quote('id')}", [run_id])
            return [(str(pk), str(label), str(state), int(depth)) for pk, label, state, depth in cursor.fetchall()]

    def archivable(self, now: datetime | None = None) -> RunQuerySet:
        cutoff = (now or timezone.now()) - timedelta(minutes=settings.HANDOFF_ARCHIVE_AFTER_MINUTES)
        return self.roots().finished().filter(archived_at__isnull=True, finished_at__lt=cutoff)



class Run(models.Model):
    class Cleanup(models.TextChoices):
        KEEP = "keep", "keep (archive)"
        DELETE = "delete", "delete"

    id = models.CharField(primary_key=True, max_length=64, default=new_run_id, editable=False)
    # the tree (delegation contracts: parent/child run ids); root is the run itself for a root run
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE,
                               related_name="children")
    root = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE,
                             related_name="descendants")
    depth = models.PositiveSmallIntegerField(default=0)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                              on_delete=models.SET_NULL, related_name="runs")
    delegation = models.ForeignKey("delegations.Delegation", null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="runs")
    # what was asked
    packet = models.JSONField(default=dict, help_text="Snapshot of the canonical packet.")
    input_hash = models.CharField(max_length=64, db_index=True,
                                  help_text="sha256 of the canonical packet.")
    label = models.CharField(max_length=200, blank=True)
    goal = models.TextField(blank=True)
    subagent_type = models.CharField(max_length=40, blank=True)
    skill = models.CharField(max_length=200, blank=True, db_index=True,
                             help_text="Skill reference name@version, if any.")
    agent_id = models.CharField(max_length=100, blank=True)
    session_key = models.CharField(max_length=200, blank=True, db_index=True,
                                   help_text="OpenClaw session key: agent:<agentId>:subagent:<uuid>")
    adapter_name = models.CharField(max_length=40)
    adapter_config = models.JSONField(default=dict, blank=True,
                                      help_text="Public adapter config; secrets are never stored.")
    capabilities = models.JSONField(default=list, blank=True, help_text="Capability scope.")
    budget = models.JSONField(default=dict, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    timeout_s = models.FloatField(null=True, blank=True)
    cleanup = models.CharField(max_length=10, choices=Cleanup.choices, default=Cleanup.KEEP)
    # lifecycle
    state = models.CharField(max_length=20, choices=[(s.value, s.value) for s in RunState],
                             default=RunState.PENDING.value, db_index=True)
    attempt = models.PositiveIntegerField(default=1)
    previous_failure = models.JSONField(null=True, blank=True)
    retry_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="retries")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    allocated_at = models.DateTimeField(null=True, blank=True,
                                        help_text="When a lane slot and a worker were allocated.")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True, db_index=True)
    archived_at = models.DateTimeField(null=True, blank=True)
    # outcome
    result = models.JSONField(null=True, blank=True, help_text="The normalized ResponsePackage.")
    criteria_report = models.JSONField(null=True, blank=True)
    findings = models.JSONField(default=list, blank=True, help_text="Lint findings.")
    error = models.JSONField(null=True, blank=True, help_text="{code, message, ...}")
    # execution (root runs hold the lease; children run inside their root's worker)
    lease_owner = models.CharField(max_length=120, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True, db_index=True)
    recoveries = models.PositiveSmallIntegerField(
        default=0, help_text="Times the run was resumed after its worker was lost.")
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    last_seq = models.PositiveIntegerField(default=0, help_text="Seq of the last event.")
    # W3C trace context: the span this run's span hangs under (a caller's for a root whose
    # request carried one, the parent run's for a child); empty for a root that starts a
    # trace of its own, whose trace id is then its run id (protocol/trace_context.py)
    traceparent = models.CharField(max_length=55, blank=True,
                                   help_text="W3C traceparent of the span this run continues.")

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["owner", "state"]), models.Index(fields=["root", "state"]),
                   # the lane's count (queue.lane_counts) of the few root runs pending or at
                   # work: without it SQLite went through every root run ever made, 9 ms a
                   # new run with 20,000 finished ones, 2 ms with it
                   models.Index(fields=["state", "parent"], name="run_state_parent"),
                   # the archiver's look for finished trees not archived yet, every heartbeat
                   # (10 ms with 20,000 finished runs without it)
                   models.Index(fields=["archived_at", "finished_at"], name="run_to_archive"),
                   # the runs list's default, top-level runs newest first, read a page at a
                   # time (sorting every top-level run: 100 -> 34 ms with 20,000)
                   models.Index(fields=["parent", "created_at"], name="run_roots_newest")]

    def __str__(self) -> str:
        return f"{self.label or self.goal[:60] or self.pk} ({self.state})"

    # -- reading -----------------------------------------------------------------------
    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def has_checkpoint(self) -> bool:
        """Whether the run saved where it can be continued from (a resume needs it). A raw
        SELECT: every queued run's execution asks, and the ORM's ``exists()`` took 224 µs
        against 17 on SQLite, 381 against 101 on PostgreSQL (this machine, 2026-12-05)."""
        quote = connection.ops.quote_name
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT 1 FROM {quote(RunCheckpoint._meta.db_table)} WHERE {quote('run_id')} = %s",
                           [self.pk])
            return cursor.fetchone() is not None

    @property
    def remote_agent(self) -> str:
        """The remote A2A agent this run is a skill of, or "": its skill is named
        ``<agent>/<skill>``, which no registry skill's name can be (they hold no '/'), and
        the runner hands such a run to that agent."""
        remote = parse_remote_ref(self.skill)
        return remote[0] if remote is not None else ""

    @property
    def is_root(self) -> bool:
        return self.parent_id is None

    @property
    def root_run_id(self) -> str:
        return self.root_id or self.pk

    @property
    def succeeded(self) -> bool:
        status = (self.result or {}).get("status")
        return self.state == RunState.COMPLETE and status in ("SUCCESS", "PARTIAL_COMPLETION")

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None:
            return None
        return ((self.finished_at or timezone.now()) - self.started_at).total_seconds()

    @property
    def trace(self) -> TraceContext:
        """This run's own span context in its tree's trace."""
        return run_context(run_id=self.pk, root_run_id=self.root_run_id, traceparent=self.traceparent)

    def holds_live_lease(self, now: datetime | None = None) -> bool:
        return bool(self.lease_owner and self.lease_expires_at
                    and self.lease_expires_at > (now or timezone.now()))

    def is_stopping(self) -> bool:
        """Whether a cancel was asked for this run or a run above it: it reads no more messages."""
        return self.cancel_requested_at is not None or Run.objects.filter(
            pk__in=self.ancestor_ids(), cancel_requested_at__isnull=False).exists()

    def ancestor_ids(self) -> list[str]:
        """Ids of the parent, grandparent, ... up to the root (nearest first)."""
        ids: list[str] = []
        parent_id = self.parent_id
        while parent_id is not None:
            ids.append(parent_id)
            parent_id = Run.objects.filter(pk=parent_id).values_list("parent_id", flat=True).first()
        return ids

    def tree(self) -> models.QuerySet[Run]:
        """This run and every descendant (the whole tree for a root)."""
        if self.is_root:
            return Run.objects.filter(Q(pk=self.pk) | Q(root_id=self.pk))
        ids = {self.pk}
        frontier = [self.pk]
        while frontier:
            frontier = list(Run.objects.filter(parent_id__in=frontier).values_list("pk", flat=True))
            ids.update(frontier)
        return Run.objects.filter(pk__in=ids)

    # -- changing ----------------------------------------------------------------------
    def transition(self, new_state: RunState | str, *, at: datetime | None = None) -> list[str]:
        """Move to ``new_state`` (ERR_ILLEGAL_TRANSITION if the lifecycle forbids it) and
        stamp the times; returns the changed field names for ``save(update_fields=...)``.
        The lease is the executing worker's business, not the lifecycle's."""
        target = check_transition(RunState(self.state), RunState(new_state))
        now = at or timezone.now()
        self.state = target
        changed = ["state"]
        if target == RunState.WORKING and self.started_at is None:
            self.started_at = now
            changed.append("started_at")
        if target in TERMINAL_STATES and self.finished_at is None:
            self.finished_at = now
            changed.append("finished_at")
        return changed


class RunCheckpoint(models.Model):
    """Where a run can be continued from (the runner's checkpoint, replaced on every save).

    A table of its own, not a column of the run: SQLite rewrites a whole row on every
    update, and a run's row is updated with nearly every stored batch of its tree (seq,
    usage). ``data`` is the checkpoint without the parts that only grow or never change
    (its conversation and its adapter config): those are rows of
    :class:`RunCheckpointPart`, so a save writes what changed since the last one, not a
    coordinator's megabytes of messages again. :meth:`data_of` puts them back together."""

    # checkpoint fields stored as RunCheckpointPart rows: a list kept one row per item
    # (it only grows), and a value kept whole (it rarely changes)
    LIST_PARTS = ("messages",)
    WHOLE_PARTS = ("adapter_config",)

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True,
                               related_name="saved_checkpoint")
    data = models.JSONField()

    def __str__(self) -> str:
        return f"checkpoint of {self.run_id}"

    @classmethod
    def data_of(cls, run_id: str) -> dict[str, Any] | None:
        """The run's saved checkpoint (JSON), or None when it has none."""
        value = cls.objects.filter(run_id=run_id).values_list("data", flat=True).first()
        if not isinstance(value, dict):
            return None
        lists: dict[str, list[Any]] = {}
        parts = RunCheckpointPart.objects.filter(run_id=run_id).order_by("field", "position")
        for name, data in parts.values_list("field", "data"):
            if name in cls.LIST_PARTS:
                lists.setdefault(name, []).append(data)
            else:
                value[name] = data
        value.update(lists)
        return value


class RunCheckpointPart(models.Model):
    """A part of a run's saved checkpoint on a row of its own (see RunCheckpoint): item
    ``position`` of a list field, or a whole field at position 0. Rows are written once
    and deleted when the checkpoint no longer has them, never rewritten."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    field = models.CharField(max_length=40)
    position = models.PositiveIntegerField(default=0)
    data = models.JSONField(null=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "field", "position"],
                                               name="run_checkpoint_part_unique")]

    def __str__(self) -> str:
        return f"{self.field}[{self.position}] of the checkpoint of {self.run_id}"


class RunMessage(models.Model):
    """A message a person sent to a run (OpenClaw's ``send``), delivered at its next turn by
    whichever worker executes the run."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="messages")
    text = models.TextField()
    sender = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                               on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "pk"]

    def __str__(self) -> str:
        return self.text[:60]
