"""Retries and error reporting for hosted model providers (OpenAI, Anthropic).

Policy (DESIGN §2.11): rate limits (429), server errors (5xx, Anthropic's 529
"overloaded"), timeouts and connection failures are retried with exponential backoff,
a bounded number of times; every other failure, and one that outlives its retries,
becomes ``ProtocolError(ERR_TOOL_FAILURE)`` carrying the provider's own message.

A retry is only made while nothing has been streamed to ``on_text`` yet: replaying a
half-streamed answer would show the watcher the same text twice.

API keys never leave this module in a message: every text taken from an exception is
passed through :func:`scrub_secrets` first, which removes the configured key itself
and anything shaped like a provider key or bearer token.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import ErrorCode, ProtocolError
from .base import config_error

_KEY_PATTERNS = re.compile(
    r"(sk-[A-Za-z0-9_\-]{6,}"                       # OpenAI and Anthropic (sk-ant-...) keys
    r"|(?i:bearer)\s+[A-Za-z0-9._\-~+/=]{6,}"        # Authorization header values
    r"|(?i:x-api-key['\"]?\s*[:=]\s*['\"]?)[A-Za-z0-9._\-]{6,})"
)
REDACTED = "[redacted]"
_MAX_MESSAGE = 500

RETRYABLE_STATUS = frozenset({408, 409, 425, 429})


def scrub_secrets(text: str, secrets: Iterable[str | None] = ()) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    text = _KEY_PATTERNS.sub(REDACTED, text)
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int = 2            # retries after the first try: 3 tries in all
    base_delay_s: float = 0.5       # 0.5, 1, 2, ... (with jitter), capped at max_delay_s
    max_delay_s: float = 20.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        backoff = self.base_delay_s * (2 ** attempt) * random.uniform(0.8, 1.2)
        if retry_after is not None:
            backoff = max(backoff, retry_after)
        return min(self.max_delay_s, backoff)


@dataclass(frozen=True, slots=True)
class ProviderFailure:
    """What an adapter learned from one failed try, in provider-neutral terms."""

    message: str
    retryable: bool
    status: int | None = None
    retry_after: float | None = None


def retry_policy_from_config(adapter: str, config: dict[str, Any]) -> RetryPolicy:
    max_retries = config.get("max_retries", 2)
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or not 0 <= max_retries <= 10:
        raise config_error(adapter, "max_retries", "must be an integer from 0 to 10")
    base_delay = config.get("retry_base_delay_s", 0.5)
    if isinstance(base_delay, bool) or not isinstance(base_delay, int | float) or base_delay < 0:
        raise config_error(adapter, "retry_base_delay_s", "must be a number of seconds >= 0")
    return RetryPolicy(max_retries=max_retries, base_delay_s=float(base_delay),
                       max_delay_s=max(20.0, float(base_delay)))


async def call_with_retries(adapter: str, policy: RetryPolicy,
                            attempt_call: Callable[[], Awaitable[Any]],
                            classify: Callable[[BaseException], ProviderFailure | None],
                            streamed: Callable[[], bool]) -> Any:
    """Run ``attempt_call`` until it succeeds, retrying what ``classify`` calls retryable.

    ``classify`` maps an SDK exception to a ProviderFailure (None: not a provider error,
    let it propagate); ``streamed`` says whether text already reached the watcher.
    """
    attempt = 0
    while True:
        try:
            return await attempt_call()
        except ProtocolError:
            raise
        except Exception as exc:
            failure = classify(exc)
            if failure is None:
                raise
            if failure.retryable and attempt < policy.max_retries and not streamed():
                await asyncio.sleep(policy.delay(attempt, failure.retry_after))
                attempt += 1
                continue
            tries = attempt + 1
            status = f" (HTTP {failure.status})" if failure.status else ""
            suffix = (f" after {tries} tries" if failure.retryable and tries > 1 else "")
            raise ProtocolError(
                ErrorCode.TOOL_FAILURE,
                f"{adapter} call failed{status}{suffix}: {failure.message}",
                details={"adapter": adapter, "status": failure.status, "tries": tries,
                         "retryable": failure.retryable},
            ) from None


def retry_after_seconds(headers: Any) -> float | None:
    """Seconds from a Retry-After header (delta-seconds form only; dates are ignored)."""
    try:
        value = headers.get("retry-after") if headers is not None else None
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
