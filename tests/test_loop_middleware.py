"""The session, common, authentication and messages middleware run their hooks on the
event loop, and hand a hook to the request's thread only when it may touch the database
(handoff_site/loop_middleware.py). Django's async-safety check is on: a session saved on
the loop would be a SynchronousOnlyOperation, a 500 here."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path

from handoff_site import loop_middleware

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls(__name__)]


@login_not_required
async def plain(request: HttpRequest) -> HttpResponse:
    return HttpResponse("plain")


@login_not_required
async def remember(request: HttpRequest) -> HttpResponse:
    await request.session.aset("colour", request.GET["colour"])
    messages.success(request, "Remembered.")
    return HttpResponse("remembered")


@login_not_required
async def recall(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"colour": await request.session.aget("colour"),
                         "messages": [str(message) for message in messages.get_messages(request)]})


urlpatterns = [path("plain", plain), path("remember", remember), path("recall", recall)]


@pytest.fixture
def handed_to_thread(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The response hooks these middleware handed to the request's thread."""
    handed: list[str] = []
    real = loop_middleware.sync_to_async

    def counting(function: Any, **kwargs: Any) -> Any:
        handed.append(type(function.__self__).__name__)
        return real(function, **kwargs)

    monkeypatch.setattr(loop_middleware, "sync_to_async", counting)
    return handed


async def test_a_request_that_writes_nothing_crosses_no_thread_in_them(async_client: Any,
                                                                       handed_to_thread: list[str]) -> None:
    response = await async_client.get("/plain")
    assert response.status_code == 200
    assert handed_to_thread == []


async def test_a_session_and_a_message_written_by_an_async_view_are_kept(async_client: Any,
                                                                         handed_to_thread: list[str]) -> None:
    response = await async_client.get("/remember", {"colour": "teal"})
    assert response.status_code == 200
    assert sorted(handed_to_thread) == ["MessageMiddleware", "SessionMiddleware"]
    recalled = await async_client.get("/recall")
    assert recalled.json() == {"colour": "teal", "messages": ["Remembered."]}
