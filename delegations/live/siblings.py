"""The channel layer of ``manage.py serve --processes N``: channels' in-memory layer, with
group messages carried to the sibling processes that have a member in the group.

One process is bound by one core (the GIL). Several server processes on one machine share
the SQLite database and the listening socket, but a run executes in the process that took
its request, and its events reach viewers and waiters through the channel layer: with the
in-memory layer alone, a run page or a ``GET ?wait=`` served by another process would hear
nothing. Redis carries them in the scale-out stack; on one machine the supervising
process (:func:`serve_hub`) does, over a Unix socket, knowing which process watches which
group, so a message goes only where a member waits for it. Everything else the processes
share already goes through the database: cancels, messages and decisions (picked up by
each process's watchman and task worker), leases and the lanes.

Frames are msgpack ``[op, group, message]`` with a 4-byte length, ``op`` one of
``add`` / ``discard`` (a process's first member joined a group / its last one left) and
``send``. The hub forwards a ``send`` frame as it came, undecoded past its group.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import threading
from typing import Any

import msgpack
from channels.layers import InMemoryChannelLayer

logger = logging.getLogger(__name__)

_LENGTH = struct.Struct(">I")


def frame(op: str, group: str, message: dict[str, Any] | None = None) -> bytes:
    body = msgpack.packb([op, group, message], use_bin_type=True)
    return _LENGTH.pack(len(body)) + body


class SiblingChannelLayer(InMemoryChannelLayer):
    """The in-memory layer of one server process, linked to the hub of its siblings.

    Local members are served as by the in-memory layer, on the server's event loop; the
    hub hears which groups have members here, and takes every group message sent here to
    the siblings whose members wait for it. The link is a blocking socket (writes of a
    few hundred bytes to a local socket, thread-safe, so a run host thread with no local
    viewers can tell the siblings too) with a reader thread handing what comes in to the
    server's loop."""

    def __init__(self, hub: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._link = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._link.connect(hub)
        self._write_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        threading.Thread(target=self._read, name="handoff-siblings", daemon=True).start()

    async def group_add(self, group: str, channel: str) -> None:
        self._loop = asyncio.get_running_loop()
        first = not self.groups.get(group)
        await super().group_add(group, channel)
        if first:
            self._write(frame("add", group))

    async def group_discard(self, group: str, channel: str) -> None:
        await super().group_discard(group, channel)
        if group not in self.groups:
            self._write(frame("discard", group))

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        await super().group_send(group, message)
        self.tell_siblings(group, message)

    def tell_siblings(self, group: str, message: dict[str, Any]) -> None:
        """Send a group message to the siblings only (from any thread): what a process
        with no member of its own publishes."""
        self._write(frame("send", group, message))

    def _write(self, data: bytes) -> None:
        try:
            with self._write_lock:
                self._link.sendall(data)
        except OSError:
            # live delivery is best effort: the siblings' viewers refill from the event log
            logger.warning("Could not reach the sibling server processes", exc_info=True)

    def _read(self) -> None:
        reader = self._link.makefile("rb")
        while head := reader.read(_LENGTH.size):
            op, group, message = msgpack.unpackb(reader.read(_LENGTH.unpack(head)[0]), raw=False)
            loop = self._loop
            if op == "send" and loop is not None and not loop.is_closed():
                asyncio.run_coroutine_threadsafe(InMemoryChannelLayer.group_send(self, group, message), loop)
        logger.error("The link to the sibling server processes closed; this process stops hearing "
                     "their runs' events")


# -- the hub, in the supervising process ---------------------------------------------------------

_BACKLOG_BYTES = 16 * 1024 * 1024


def _leave(members: dict[str, set[asyncio.StreamWriter]], group: str, writer: asyncio.StreamWriter) -> None:
    watchers = members.get(group)
    if watchers is not None:
        watchers.discard(writer)
        if not watchers:
            del members[group]

async def serve_hub(path: str) -> asyncio.AbstractServer:
    """Listen on Unix socket ``path`` for the server processes; each ``send`` goes to the
    other processes that said ``add`` for its group (and not ``discard`` since)."""
    members: dict[str, set[asyncio.StreamWriter]] = {}

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        joined: set[str] = set()
        try:
            while True:
                head = await reader.readexactly(_LENGTH.size)
                body = await reader.readexactly(_LENGTH.unpack(head)[0])
                op, group = msgpack.unpackb(body, raw=False)[:2]
                if op == "add":
                    members.setdefault(group, set()).add(writer)
                    joined.add(group)
                elif op == "discard":
                    _leave(members, group, writer)
                    joined.discard(group)
                else:
                    for sibling in members.get(group, ()):
                        # best effort, as live delivery is: a process that stopped reading
                        # misses messages rather than growing this one; its viewers refill
                        # from the event log
                        if sibling is not writer and sibling.transport.get_write_buffer_size() < _BACKLOG_BYTES:
                            sibling.write(head + body)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for group in joined:
                _leave(members, group, writer)
            writer.close()

    return await asyncio.start_unix_server(serve, path)
