"""`manage.py serve`'s server: whose X-Forwarded-For it believes, and how large and how
many request headers it reads. A real uvicorn on a loopback port, driven over sockets."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import pytest
import uvicorn

from delegations.management.commands.serve import server_config
from tests.conftest import _free_port


async def echo_client_address(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An app that answers with the client address the server gave it."""
    address = scope["client"][0].encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(address)).encode())]})
    await send({"type": "http.response.body", "body": address})


@contextmanager
def running(app: Any) -> Iterator[int]:
    port = _free_port()
    server = uvicorn.Server(server_config(app, host="127.0.0.1", port=port))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def exchange(port: int, head: bytes) -> bytes:
    """Send a request head (as much of it as the server reads) while reading the answer.
    A server that answers before it read it all closes with bytes unread, and the kernel
    then resets the connection: an answer still unread by then is lost, so it is read as
    it comes, not after the whole head was sent (a CI flake)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        def send() -> None:
            with suppress(OSError):   # it answered and closed before reading it all
                sock.sendall(head)
        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        answer = b""
        with suppress(ConnectionResetError):   # the reset that follows the answer
            while chunk := sock.recv(65536):
                answer += chunk
        sender.join(timeout=10)
        return answer


def get(port: int, *headers: str) -> bytes:
    lines = ["GET / HTTP/1.1", "Host: 127.0.0.1", "Connection: close", *headers, "", ""]
    return exchange(port, "\r\n".join(lines).encode())


def body(answer: bytes) -> bytes:
    return answer.partition(b"\r\n\r\n")[2]


def test_a_forwarded_header_is_believed_from_nobody_when_forwarded_allow_ips_is_unset(settings: Any) -> None:
    settings.FORWARDED_ALLOW_IPS = []
    with running(echo_client_address) as port:
        assert body(get(port, "X-Forwarded-For: 203.0.113.9")) == b"127.0.0.1"


def test_a_forwarded_header_is_believed_from_the_proxies_the_operator_names(settings: Any) -> None:
    settings.FORWARDED_ALLOW_IPS = ["127.0.0.1"]
    with running(echo_client_address) as port:
        # the last address the trusted proxy appended, not what the client wrote before it
        assert body(get(port, "X-Forwarded-For: 10.9.9.9, 203.0.113.9")) == b"203.0.113.9"
    settings.FORWARDED_ALLOW_IPS = ["10.0.0.0/8"]
    with running(echo_client_address) as port:
        assert body(get(port, "X-Forwarded-For: 203.0.113.9")) == b"127.0.0.1"


@pytest.mark.django_db
def test_headers_past_the_size_limit_are_refused_before_they_are_all_read(settings: Any) -> None:
    with running("handoff_site.asgi:application") as port:
        # refused while it arrives (by the server's parser) or once it arrived whole (by the
        # app), as the bytes happen to come: either way a 431 saying why
        for size in (8 * 1024 * 1024, settings.HANDOFF_MAX_HEADER_BYTES):
            refused = get(port, "X-Filler: " + "a" * size)
            assert refused.startswith(b"HTTP/1.1 431") and b"Request headers too large" in body(refused), size
        assert get(port, "X-Filler: " + "a" * 16_000).startswith(b"HTTP/1.1 302")   # to the login page


@pytest.mark.django_db
def test_more_headers_than_the_limit_answer_431(settings: Any) -> None:
    with running("handoff_site.asgi:application") as port:
        # 10,000 are over the size limit too: refused for that while they arrive
        answer = get(port, *(f"X-{number}: 1" for number in range(10_000)))
        assert answer.startswith(b"HTTP/1.1 431")
        assert b"Too many request headers" in body(answer) or b"Request headers too large" in body(answer)
        answer = get(port, *(f"X-{number}: 1" for number in range(settings.HANDOFF_MAX_HEADERS + 1)))
        assert answer.startswith(b"HTTP/1.1 431") and b"Too many request headers" in body(answer)
        assert get(port, *(f"X-{number}: 1" for number in range(90))).startswith(b"HTTP/1.1 302")


async def test_a_websocket_handshake_with_too_many_headers_is_refused(settings: Any) -> None:
    from channels.testing import WebsocketCommunicator

    from handoff_site.asgi import application

    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")]
    communicator = WebsocketCommunicator(application, "/ws/inbox/",
                                         headers=headers + [(f"x-{n}".encode(), b"1") for n in range(200)])
    connected, _ = await communicator.connect()
    assert not connected
