from __future__ import annotations

from django.urls import URLPattern, path

from delegations.live.consumers import InboxConsumer, RunConsumer

websocket_urlpatterns: list[URLPattern] = [
    path("ws/runs/<str:run_id>/", RunConsumer.as_asgi()),
    path("ws/inbox/", InboxConsumer.as_asgi()),
]
