"""Small formatting filters for the run pages (badge tones, money, durations, ids)."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import conditional_escape, escape
from django.utils.safestring import mark_safe

from delegations.run_pages import display

register = template.Library()


@register.filter
def state_tone(state: str | None) -> str:
    """The badge class of a lifecycle state: ok, warn, bad, info or neutral."""
    return display.state_tone(state)


@register.filter
def status_tone(status: str | None) -> str:
    """The badge class of a result status (SUCCESS, FAILURE, ...)."""
    return display.status_tone(status)


@register.filter
def usd(amount: Any) -> str:
    try:
        return display.format_usd(float(amount))
    except (TypeError, ValueError):
        return "—"


@register.filter
def seconds(value: Any) -> str:
    try:
        return display.format_seconds(float(value))
    except (TypeError, ValueError):
        return "—"


@register.filter
def short_id(run_id: Any) -> str:
    return str(run_id or "")[:8]


@register.filter
def state_label(state: Any) -> str:
    return display.state_label(state)


@register.filter
def pretty_json(value: Any) -> str:
    return display.pretty_json(value)


APPROVAL_TONES = {"pending": "warn", "approved": "ok", "rejected": "bad", "answered": "info",
                  "edited": "info", "retried": "info", "expired": "neutral", "cancelled": "neutral"}
RISK_TONES = {"high": "bad", "medium": "warn"}


@register.filter
def approval_tone(status: Any) -> str:
    return APPROVAL_TONES.get(str(status), "neutral")


@register.filter
def risk_tone(risk: Any) -> str:
    return RISK_TONES.get(str(risk), "neutral")


@register.filter
def run_name(run: Any) -> str:
    return display.run_name(run)


@register.filter
def code_spans(text: Any) -> str:
    """``text`` with each `backticked` name drawn as code, as criteria name fields and
    inputs ("`evidence` is quoted from `review`"); everything else escaped."""
    parts = str(text).split("`")
    if len(parts) < 3:
        return conditional_escape(text)
    closed = len(parts) - (len(parts) % 2 == 0)   # an odd backtick out stays a backtick
    drawn = [f"<code>{escape(part)}</code>" if index % 2 else escape(part) for index, part in enumerate(parts[:closed])]
    return mark_safe("".join(drawn) + "".join("`" + escape(part) for part in parts[closed:]))  # escaped above
