"""HTTP and websockets. Django's ASGI app is built before anything imports models."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "handoff_site.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import re_path  # noqa: E402

from delegations.accounts.auth import websocket_auth  # noqa: E402
from delegations.live.consumers import UnknownRouteConsumer  # noqa: E402
from delegations.live.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter({
    "http": django_asgi_app,
    "websocket": AllowedHostsOriginValidator(websocket_auth(URLRouter([
        *websocket_urlpatterns,
        re_path(r"^.*$", UnknownRouteConsumer.as_asgi()),
    ]))),
})
