from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.urls import reverse

from delegations.accounts.roles import decidable_count

# (label, url name, section key)
NAVIGATION = [
    ("Dashboard", "delegations:dashboard", "dashboard"),
    ("Skills", "skills:catalog", "skills"),
    ("Delegations", "delegations:delegation_list", "delegations"),
    ("Runs", "delegations:runs", "runs"),
    ("Inbox", "delegations:inbox", "inbox"),
]


def navigation(request: HttpRequest) -> dict[str, Any]:
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    items = [{"label": label, "url": reverse(url_name), "key": key}
             for label, url_name, key in NAVIGATION]
    current = next((item["key"] for item in sorted(items, key=lambda i: -len(i["url"]))
                    if request.path.startswith(item["url"]) and item["url"] != "/"), "dashboard")
    return {"nav_items": items, "nav_current": current,
            "inbox_pending": decidable_count(request.user)}
