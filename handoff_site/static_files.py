"""Static files (WhiteNoise) in an async middleware chain.

WhiteNoise's middleware is synchronous only: placed in the chain, it made Django run every
request's middleware in a thread and hop back to the event loop for the rest, two thread
hand-offs per API call before its view (a third of a plain GET's server time, measured
with load_probe.py and py-spy). Here only a request for a static file goes to WhiteNoise,
in a thread; everything else passes straight on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.http import HttpRequest
from whitenoise.middleware import WhiteNoiseMiddleware


class StaticFiles:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        # WhiteNoise's answer for a static file, or None when there is no such file
        self.whitenoise = WhiteNoiseMiddleware(lambda request: None)
        self.prefix = "/" + settings.STATIC_URL.lstrip("/")
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if iscoroutinefunction(self):
            return self.__acall__(request)
        served = self.whitenoise(request)
        return served if served is not None else self.get_response(request)

    async def __acall__(self, request: HttpRequest) -> Any:
        if request.path_info.startswith(self.prefix):
            served = await sync_to_async(self.whitenoise)(request)
            if served is not None:
                return served
        return await self.get_response(request)
