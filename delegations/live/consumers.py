"""The websockets: live runs (``/ws/runs/<id>/``) and the approval inbox (``/ws/inbox/``)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.db.models import Max, Q

from delegations.accounts.roles import can_approve, decidable_count, visible_runs
from delegations.live import feed
from delegations.models import RunEvent
from delegations.protocol import text_limits

logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404


class UnknownRouteConsumer(AsyncJsonWebsocketConsumer):
    """Any websocket path nobody serves: accept, then close with 4404 so clients learn why."""

    async def connect(self) -> None:
        await self.accept()
        await self.close(code=CLOSE_NOT_FOUND)


BACKLOG_CHUNK = 2000
CURSORS_IN_QUERY = 64   # more per-run cursors than this are applied as rows are read (a
                        # query excluding each would nest too deep for SQLite)


def _query_cursors(query_string: bytes, run_id: str) -> tuple[dict[str, int], list[str]]:
    """``after=N`` for the watched run, ``after.<run id>=M`` for descendants; a bad value
    is reported and read as 0 (the whole backlog)."""
    cursors: dict[str, int] = {}
    problems: list[str] = []
    for key, values in parse_qs(query_string.decode("latin-1")).items():
        if key != "after" and not key.startswith("after."):
            continue
        target = run_id if key == "after" else key[len("after."):]
        try:
            cursors[target] = max(0, int(values[-1]))
        except ValueError:
            problems.append(f"'{key}' must be a whole number (the last seq you have), not {values[-1]!r}")
    return cursors, problems


def _query_since(query_string: bytes) -> tuple[int, list[str]]:
    """``since=<event id>``: the client has every event of the tree stored up to that id."""
    values = parse_qs(query_string.decode("latin-1")).get("since", [])
    if not values:
        return 0, []
    try:
        return max(0, int(values[-1])), []
    except ValueError:
        return 0, [f"'since' must be a whole number (an event id), not {values[-1]!r}"]


@database_sync_to_async
def _cursors_up_to(run_ids: list[str], since: int) -> dict[str, int]:
    """Each run's last seq among the events stored up to event ``since``."""
    rows = (RunEvent.objects.filter(run_id__in=run_ids, pk__lte=since).order_by()
            .values("run_id").annotate(last=Max("seq")).values_list("run_id", "last"))
    return {run_id: int(last) for run_id, last in rows}


def _query_flag(query_string: bytes, name: str) -> bool:
    values = parse_qs(query_string.decode("latin-1")).get(name, [])
    return bool(values) and values[-1].lower() in ("1", "true", "yes")


@database_sync_to_async
def _visible_run(user: Any, run_id: str) -> tuple[bool, list[str]] | None:
    """(is it a root, ids of the run and its descendants), or None when the run is missing
    or the user may not see it: like the API's 404, the close code does not tell another
    user's run from one that does not exist."""
    run = (visible_runs(user).filter(pk=run_id)
           .only("id", "parent_id", "root_id", "owner_id").first())
    if run is None:
        return None
    return run.is_root, list(run.tree().values_list("pk", flat=True))


@database_sync_to_async
def _backlog(run_id: str, whole_tree: bool, run_ids: list[str], cursors: dict[str, int],
             after_id: int) -> list[tuple[int, str, int, str]]:
    """The next chunk of stored events of the run and its descendants (in storage order)
    after event ``after_id``, past each run's cursor (a few in the query; many are left to
    the caller, which skips what it has)."""
    events = (RunEvent.objects.filter(run__root_id=run_id) if whole_tree
              else RunEvent.objects.filter(run_id__in=run_ids))
    if len(cursors) <= CURSORS_IN_QUERY:
        for cursor_run, cursor in cursors.items():
            events = events.exclude(Q(run_id=cursor_run, seq__lte=cursor))
    rows = events.filter(pk__gt=after_id).order_by("pk")[:BACKLOG_CHUNK]
    return [(row.pk, row.run_id, row.seq, feed.event_text(row.as_wire())) for row in rows]


@database_sync_to_async
def _between(run_id: str, after: int, before: int) -> list[tuple[int, str]]:
    rows = RunEvent.objects.filter(run_id=run_id, seq__gt=after, seq__lt=before).order_by("seq")
    return [(row.seq, feed.event_text(row.as_wire())) for row in rows]


# What a client sends is a ping or another small control frame; anything longer is refused
# unread (uvicorn itself drops frames over 16 MiB).
MAX_CLIENT_FRAME_CHARS = 64 * 1024


class _JsonFramesConsumer(AsyncJsonWebsocketConsumer):
    """Malformed frames get an error frame (the connection stays up); ping gets pong."""

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None,
                      **kwargs: Any) -> None:
        if text_data is None:
            await self.send_error("Binary frames are not understood; send JSON text.")
            return
        if len(text_data) > MAX_CLIENT_FRAME_CHARS:
            await self.send_error(f"Frame too large: {len(text_data)} characters; control frames "
                                  f"are at most {MAX_CLIENT_FRAME_CHARS}.")
            return
        try:
            content = text_limits.loads(text_data, "frame")
        except ValueError as exc:
            await self.send_error(f"Malformed frame: not JSON ({exc}).")
            return
        except text_limits.TextLimitError as exc:
            await self.send_error(f"Malformed frame: {exc}.")
            return
        if not isinstance(content, dict) or not isinstance(content.get("type"), str):
            await self.send_error('Malformed frame: expected a JSON object with a "type".')
            return
        await self.receive_json(content)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if content["type"] == "ping":
            await self.send_json({"type": "pong"})
            return
        await self.send_error(f"Unknown frame type {content['type']!r}; this socket understands 'ping'.")

    async def send_error(self, message: str) -> None:
        await self.send_json({"type": "error", "data": {"message": message}})


class RunConsumer(_JsonFramesConsumer):
    """/ws/runs/{id}/?after=N: the backlog (seq > N) of the run and its descendants, then
    their live events, each exactly once and in seq order per run. Frames with a ``seq``
    are events ``{run_id, seq, type, ts, data}``; the others are control frames:
    ``{"type": "synced", "cursors": {run id: last seq}}`` once the backlog is sent,
    ``pong`` and ``error``. ``after.<run id>=M`` sets the cursor of a descendant;
    ``since=<event id>`` says the client has every event of the tree stored up to that id
    (a page of a big tree sends that rather than a cursor per run, which would not fit in
    a URL); ``batch=1`` lets a frame carry a JSON array of events (busy trees, many
    viewers).

    Live events come from the process's :class:`feed.RunFeed`, not from a channel of the
    consumer's own. While the backlog is sent, a gap is refilled from the log or a send
    waits on a slow socket, the live messages that arrive are held and sent after it, in
    order (see :meth:`take`)."""

    group: str | None = None

    async def connect(self) -> None:
        feed.register_consumer_loop()
        user = self.scope.get("user")
        self.cursors: dict[str, int] = {}
        if user is None or not user.is_authenticated:
            await self.accept()
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.run_id = str(self.scope["url_route"]["kwargs"]["run_id"])
        access = await _visible_run(user, self.run_id)
        if access is None:
            await self.accept()
            await self.close(code=CLOSE_NOT_FOUND)
            return
        whole_tree, tree = access
        # join first, then read the backlog: an event stored in between arrives both ways
        # and the cursors drop the second copy
        self.held: list[dict[str, Any]] | None = []
        self.feed = feed.run_feed()
        self.group = feed.run_group(self.run_id)
        await self.feed.join(self.group, self)
        try:
            await self.accept()
            await self._catch_up(whole_tree, tree)
        except BaseException:
            await self.feed.leave(self.group, self)  # the feed must not keep a dead viewer
            raise

    async def _catch_up(self, whole_tree: bool, tree: list[str]) -> None:
        """The backlog past the client's cursors, ``synced``, then the live messages held
        meanwhile."""
        query = self.scope.get("query_string", b"")
        cursors, problems = _query_cursors(query, self.run_id)
        since, since_problems = _query_since(query)
        for problem in problems + since_problems:
            await self.send_error(problem)
        self.whole_tree, self.tree = whole_tree, tree
        had = await _cursors_up_to(tree, since) if since else {}
        self.cursors = {run_id: max(cursors.get(run_id, 0), had.get(run_id, 0)) for run_id in tree}
        self.batched = _query_flag(query, "batch")
        await self._refill(after_id=since)
        await self.send_json({"type": "synced", "run_id": self.run_id, "cursors": self.cursors})
        await self._send_held()

    async def _refill(self, after_id: int = 0) -> None:
        """Every stored event past the cursors (and after event ``after_id``), in storage
        order."""
        given = {run_id: seq for run_id, seq in self.cursors.items() if seq}
        last_id = after_id
        while True:
            chunk = await _backlog(self.run_id, self.whole_tree, self.tree, given, last_id)
            fresh = []
            for row_id, run_id, seq, text in chunk:
                last_id = row_id
                if seq > self.cursors.get(run_id, 0):
                    self.cursors[run_id] = seq
                    fresh.append(text)
            await self._deliver(fresh)
            if len(chunk) < BACKLOG_CHUNK:
                break

    async def disconnect(self, code: int) -> None:
        if self.group is not None:
            await self.feed.leave(self.group, self)

    def take(self, message: dict[str, Any]) -> None:
        """Called by the feed with each message of the watched group; it never waits. The
        message is sent at once when the socket takes it (an eager task that finishes on
        the spot); while a send waits on a slow socket, the backlog is being sent or a
        gap is refilled from the log, later messages are held and sent after it, in
        order. So one slow viewer never holds up the others."""
        if self.held is not None:
            self.held.append(message)
            return
        self.held = [message]
        self.sending = asyncio.Task(self._send_held(), loop=asyncio.get_running_loop(), eager_start=True)

    async def _send_held(self) -> None:
        held = self.held
        assert held is not None
        try:
            while held:
                await self._send_live(held.pop(0))
        except Exception:
            # the socket went away (its disconnect takes the viewer off the feed)
            logger.debug("Live events for a closed socket dropped", exc_info=True)
        finally:
            self.held = None

    async def _send_live(self, message: dict[str, Any]) -> None:
        if message.get("resync"):
            # the feed was off the layer for a while (Redis restarted): what was published
            # meanwhile never came, and maybe nothing more will, so read it from the log
            await self._refill()
            return
        cursors = self.cursors
        spans = message.get("spans")
        if self.batched and spans and all(cursors.get(run_id, 0) == first - 1
                                          for run_id, first, _ in spans):
            # in step with the publisher (the usual case): the frame is ready-made
            for run_id, _, last in spans:
                cursors[run_id] = last
            await self.send(text_data=message["batch"])
            return
        fresh: list[str] = []
        for (run_id, seq), text in zip(message["keys"], message["texts"], strict=True):
            seen = cursors.get(run_id, 0)
            if seq <= seen:
                continue
            if seq > seen + 1:
                # a live message went missing (a full channel): refill from the log
                for missing_seq, missing_text in await _between(run_id, seen, seq):
                    fresh.append(missing_text)
                    cursors[run_id] = missing_seq
            cursors[run_id] = seq
            fresh.append(text)
        await self._deliver(fresh)

    async def _deliver(self, texts: list[str]) -> None:
        """One frame per event; with ``?batch=1`` the events of one publication share a
        frame (a JSON array), which costs the server far less per event."""
        if self.batched and len(texts) > 1:
            await self.send(text_data=f"[{','.join(texts)}]")
            return
        for text in texts:
            await self.send(text_data=text)


# the notices of one burst (a batch decision, a run's items cancelled at once) arrive within
# this and share one count per viewer; a badge a fifth of a second late goes unnoticed
INBOX_RECOUNT_DELAY_S = 0.2


class InboxConsumer(_JsonFramesConsumer):
    """/ws/inbox/: ``approval.created`` and ``approval.decided`` (``.expired``,
    ``.cancelled``) notices for approvers and staff, each followed by ``inbox.count``: the
    number of items this viewer may decide, which differs per person (nobody decides their
    own runs' items), so each socket recounts its own. Anyone else signed in gets the counts
    alone (the questions of their own runs, which they answer): the notices name items of
    other people's runs. Recounts do not pile up: while one runs, the notices that arrive
    within :data:`INBOX_RECOUNT_DELAY_S` share one (a burst of twenty decisions costs each
    viewer one count, not twenty)."""

    user: Any = None
    counts_only = False
    recount_due = False
    recounting: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        feed.register_consumer_loop()
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.accept()
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.counts_only, pending = await _inbox_access(user)
        self.user = user
        await self.channel_layer.group_add(feed.INBOX_GROUP, self.channel_name)
        self.groups.append(feed.INBOX_GROUP)
        await self.accept()
        await self.send_json({"type": "inbox.synced", "pending": pending})

    async def disconnect(self, code: int) -> None:
        if self.recounting is not None:
            self.recounting.cancel()

    async def inbox_event(self, message: dict[str, Any]) -> None:
        if not self.counts_only:
            await self.send_json({"type": message["event"], "approval": message["approval"]})
        self.recount_due = True
        if self.recounting is None or self.recounting.done():
            self.recounting = asyncio.create_task(self._send_count())

    async def _send_count(self) -> None:
        try:
            while self.recount_due:
                await asyncio.sleep(INBOX_RECOUNT_DELAY_S)
                self.recount_due = False
                pending = await _pending_for(self.user)
                await self.send_json({"type": "inbox.count", "pending": pending})
        except Exception:
            # the socket went away meanwhile (its disconnect ends the task)
            logger.debug("Inbox count for a closed socket dropped", exc_info=True)


@database_sync_to_async
def _inbox_access(user: Any) -> tuple[bool, int]:
    """Whether the user gets the counts alone (neither an approver nor staff), and the
    count of the items they may decide."""
    return not (user.is_staff or can_approve(user)), decidable_count(user)


@database_sync_to_async
def _pending_for(user: Any) -> int:
    return decidable_count(user)
