from __future__ import annotations

from channels.generic.websocket import AsyncJsonWebsocketConsumer

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404


class UnknownRouteConsumer(AsyncJsonWebsocketConsumer):
    """Any websocket path nobody serves: accept, then close with 4404 so clients learn why."""

    async def connect(self) -> None:
        await self.accept()
        await self.close(code=CLOSE_NOT_FOUND)
