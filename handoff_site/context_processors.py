from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse

# (label, url name, section key). Sections whose pages are not installed are left out.
NAVIGATION = [
    ("Dashboard", "delegations:dashboard", "dashboard"),
    ("Skills", "skills:catalog", "skills"),
    ("Delegations", "delegations:list", "delegations"),
    ("Runs", "delegations:runs", "runs"),
    ("Inbox", "delegations:inbox", "inbox"),
]


def _pending_approvals(request: HttpRequest) -> int:
    from delegations.models import Approval

    return int(Approval.objects.pending().visible_to(request.user).count())


def navigation(request: HttpRequest) -> dict[str, Any]:
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    items = []
    for label, url_name, key in NAVIGATION:
        try:
            items.append({"label": label, "url": reverse(url_name), "key": key})
        except NoReverseMatch:
            continue
    current = next((item["key"] for item in sorted(items, key=lambda i: -len(i["url"]))
                    if request.path.startswith(item["url"]) and item["url"] != "/"), "dashboard")
    return {"nav_items": items, "nav_current": current,
            "inbox_pending": _pending_approvals(request)}
