from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, models
from django.utils import timezone

from delegations.models.raw_rows import select

TOKEN_PREFIX = "hnd_"
LAST_USED_STEP = timedelta(minutes=1)   # how stale a token's "last used" may be


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def _active_token(digest: str) -> APIToken | None:
    """The unrevoked token with this digest, with its user, if that user is active: two raw
    SELECTs read through readers worked out once (raw_rows.py), as the request's one ORM
    query (a join, three filters) was compiled again on every API call: 720 µs, through
    ``raw()`` 239 (SQLite, this machine, 2026-12-05); in a busier sitting through ``raw()``
    299-375 µs, so 144-179."""
    quote = connection.ops.quote_name
    users = get_user_model()
    tokens = select(APIToken, f"WHERE {quote('digest')} = %s AND {quote('revoked_at')} IS NULL", [digest])
    if not tokens:
        return None
    owners = select(users, f"WHERE {quote(str(users._meta.pk.column))} = %s", [tokens[0].user_id])
    if not owners or not owners[0].is_active:
        return None
    tokens[0].user = owners[0]
    return tokens[0]


class APIToken(models.Model):
    """A personal API token. Only its sha256 is stored; the token itself is shown once."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="What this token is for, e.g. 'CI script'.")
    prefix = models.CharField(max_length=12, editable=False,
                              help_text="The first characters, to tell tokens apart.")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def issue(cls, *, user: object, name: str) -> tuple[APIToken, str]:
        """Create a token; returns the row and the raw token, which is never stored."""
        raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(user=user, name=name or "token", prefix=raw[:12], digest=_digest(raw))
        return token, raw

    @classmethod
    def authenticate(cls, raw: str) -> APIToken | None:
        """The active token ``raw`` is, with its user. "Last used" is stored at most once a
        LAST_USED_STEP: a write on every request was one more writer for SQLite to
        serialize behind the runs' own (a client polling a run wrote twenty times a second)."""
        token = _active_token(_digest(raw))
        now = timezone.now()
        if token is not None and (token.last_used_at is None or now - token.last_used_at >= LAST_USED_STEP):
            cls.objects.filter(pk=token.pk).update(last_used_at=now)
        return token

    @classmethod
    def known_prefix(cls, raw: str) -> str:
        """The first characters of ``raw`` when a token (a revoked one too) starts with
        them, else "". Wrong tokens are counted per prefix: guesses at one token, or a
        script still sending a revoked one, lock out that token alone, not every other
        token used from the same address; made-up tokens share one count."""
        prefix = raw[:12]
        return prefix if cls.objects.filter(prefix=prefix).exists() else ""

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def revoke(self) -> None:
        self.revoked_at = timezone.now()
        self.save(update_fields=["revoked_at"])
