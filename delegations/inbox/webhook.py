"""The inbox webhook: when ``HANDOFF_INBOX_WEBHOOK_URL`` is set, every new inbox item is
POSTed there as JSON ``{id, kind, title, risk, run_id, url}`` (``url``: the item's page,
under ``HANDOFF_BASE_URL``), so a chat channel or a pager can call a person.

Delivery never holds up the run that asked: each item is sent from a daemon thread of its
own, tried ``HANDOFF_INBOX_WEBHOOK_TRIES`` times with a doubling pause
(``HANDOFF_INBOX_WEBHOOK_BACKOFF_S``, then twice that, ...) while the receiver fails or
cannot be reached; a delivery that still fails is logged and dropped (the inbox page and
its live feed have the item anyway). A thread, not a task: with the immediate task
backend a task would run, pauses and all, inside the worker that opened the item.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import httpx
from django.conf import settings
from django.urls import NoReverseMatch, reverse

from delegations.models import Approval
from delegations.runs.approval_gate import on_approval_opened

logger = logging.getLogger(__name__)

TIMEOUT_S = 10.0


def item_summary(approval: Approval) -> dict[str, Any]:
    """What the webhook tells of an item: enough to say what waits and where to decide it."""
    try:
        path = reverse("delegations:inbox_item", args=[approval.pk])
    except NoReverseMatch:   # a site without the item page: the inbox, at the item
        path = f"{reverse('delegations:inbox')}#approval-{approval.pk}"
    return {"id": approval.pk, "kind": approval.kind, "title": approval.title, "risk": approval.risk,
            "run_id": approval.run_id, "url": f"{settings.HANDOFF_BASE_URL}{path}"}


def deliver(url: str, body: dict[str, Any], *, tries: int, backoff_s: float) -> bool:
    """POST ``body`` to ``url`` until it answers 2xx, at most ``tries`` times."""
    for attempt in range(1, tries + 1):
        try:
            response = httpx.post(url, json=body, timeout=TIMEOUT_S)
            if response.is_success:
                return True
            problem = f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            problem = f"{type(exc).__name__}: {exc}"
        if attempt < tries:
            logger.info("Inbox webhook attempt %d of %d for item %s failed (%s); trying again",
                        attempt, tries, body.get("id"), problem)
            time.sleep(backoff_s * 2 ** (attempt - 1))
        else:
            logger.warning("Inbox webhook for item %s failed %d times (last: %s); giving up",
                           body.get("id"), tries, problem)
    return False


def notify_opened(approval: Approval) -> None:
    """Send the new item to the webhook in the background (nothing when none is set)."""
    url = settings.HANDOFF_INBOX_WEBHOOK_URL
    if not url or approval.is_closed:   # decided by an approval rule as it opened
        return
    thread = threading.Thread(
        target=deliver, args=(url, item_summary(approval)),
        kwargs={"tries": settings.HANDOFF_INBOX_WEBHOOK_TRIES,
                "backoff_s": settings.HANDOFF_INBOX_WEBHOOK_BACKOFF_S},
        name=f"handoff-inbox-webhook-{approval.pk}", daemon=True)
    thread.start()


def listen() -> None:
    """Send every inbox item a run opens from now on (called once at start-up)."""
    on_approval_opened(notify_opened)
