"""HTTP and websockets. Django's ASGI app is built before anything imports models."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "handoff_site.settings")
django_asgi_app = get_asgi_application()

from typing import Any  # noqa: E402

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.urls import re_path  # noqa: E402

from delegations.accounts.auth import websocket_auth  # noqa: E402
from delegations.interop.a2a.app import beside  # noqa: E402
from delegations.live.consumers import UnknownRouteConsumer  # noqa: E402
from delegations.live.routing import websocket_urlpatterns  # noqa: E402
from handoff_site.request_threads import reused_request_threads  # noqa: E402


class HeaderLimits:
    """A request with more than HANDOFF_MAX_HEADERS headers, or more than
    HANDOFF_MAX_HEADER_BYTES of them, answers 431 (a websocket's handshake is refused).
    The server's parser stops reading headers past that size while they arrive (serve.py),
    but a head that came in one read reaches here whole."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = scope.get("headers", ())
        size = sum(len(name) + len(value) + 4 for name, value in headers)   # "name: value\r\n"
        if len(headers) > settings.HANDOFF_MAX_HEADERS:
            problem = f"Too many request headers: {len(headers)}; at most {settings.HANDOFF_MAX_HEADERS}."
        elif size > settings.HANDOFF_MAX_HEADER_BYTES:
            problem = f"Request headers too large: {size} bytes; at most {settings.HANDOFF_MAX_HEADER_BYTES}."
        else:
            await self.inner(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await receive()  # websocket.connect; closing before accepting refuses the handshake
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "http.response.start", "status": 431,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8")]})
        await send({"type": "http.response.body", "body": problem.encode()})


application = HeaderLimits(ProtocolTypeRouter({
    "http": reused_request_threads(beside(django_asgi_app)),   # the A2A routes, behind their gate, then Django
    "websocket": websocket_auth(URLRouter([
        *websocket_urlpatterns,
        re_path(r"^.*$", UnknownRouteConsumer.as_asgi()),
    ])),
}))
