from __future__ import annotations

from django.contrib.auth.models import User
from django.http import HttpRequest


class AuthedRequest(HttpRequest):
    """A request behind LoginRequiredMiddleware: its user is a real user."""

    user: User
