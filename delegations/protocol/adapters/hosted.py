"""What the hosted model providers (OpenAI, Anthropic) share: config, client, errors, retries,
and reading the tool-call arguments they stream.

Each provider's adapter subclasses :class:`HostedAdapter` and keeps only what is its own:
its settings, the request it sends, how it reads the answer and how its error bodies are
worded. Both official SDKs are generated from one template, so the client takes the same
arguments and raises the same kinds of error (:class:`ProviderSDK`).

Retries: rate limits (429), server errors (5xx, Anthropic's 529 "overloaded"), timeouts
and connection failures are retried with exponential backoff, a bounded number of times;
every other failure, and one that outlives its retries, becomes
``ProtocolError(ERR_TOOL_FAILURE)`` carrying the provider's own message. A retry is only
made while nothing has been streamed to ``on_text`` yet: replaying a half-streamed answer
would show the watcher the same text twice.

Where requests go and which key they carry is the endpoint's (``endpoints.py``): the
operator's, picked by name in the config, never a URL or a variable named there. The key is
read from the environment variable the endpoint names and never leaves this module in a
message: every text taken from an exception is passed through :func:`scrub_secrets` first,
which removes the key itself and anything shaped like a provider key or bearer token.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import weakref
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Self

from ..errors import ErrorCode, ProtocolError
from ..trace_context import outgoing_headers
from . import config_checks as check
from .base import Message, ModelAdapter, ModelTurn, TextCallback, ToolSchema, config_error
from .endpoints import ModelEndpoint

_KEY_PATTERNS = re.compile(
    r"(sk-[A-Za-z0-9_\-]{6,}"                       # OpenAI and Anthropic (sk-ant-...) keys
    r"|(?i:bearer)\s+[A-Za-z0-9._\-~+/=]{6,}"        # Authorization header values
    r"|(?i:x-api-key['\"]?\s*[:=]\s*['\"]?)[A-Za-z0-9._\-]{6,})"
)
REDACTED = "[redacted]"
_MAX_MESSAGE = 500

RETRYABLE_STATUS = frozenset({408, 409, 425, 429})
# The SDKs insist on a key; a local server (base_url set) needs none.
NO_KEY_NEEDED = "not-needed"


def scrub_secrets(text: str, secrets: Iterable[str | None] = ()) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    text = _KEY_PATTERNS.sub(REDACTED, text)
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUS or status >= 500


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


def tool_arguments(tool: str, raw: str, *, when_empty: dict[str, Any] | None = None
                   ) -> dict[str, Any]:
    """A tool call's arguments from the JSON text the provider streamed for it (OpenAI's
    ``arguments``, Anthropic's ``input_json_delta`` pieces joined). No text at all gives
    ``when_empty`` (Anthropic puts a short input whole in the block's start); text that is
    not a JSON object is ``ERR_TOOL_FAILURE`` naming the tool and quoting the text."""
    if not raw.strip():
        return dict(when_empty or {})
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ProtocolError(
            ErrorCode.TOOL_FAILURE,
            f"The model called tool '{tool}' with arguments that are not valid JSON "
            f"({exc.msg} at character {exc.pos}): {raw[:200]!r}",
            details={"tool": tool}) from None
    if not isinstance(value, dict):
        raise ProtocolError(
            ErrorCode.TOOL_FAILURE,
            f"The model called tool '{tool}' with arguments that are not a JSON object: "
            f"{raw[:200]!r}",
            details={"tool": tool})
    return value


@dataclass(frozen=True, slots=True)
class ProviderSDK:
    """The parts of a provider's official SDK the base uses: its async client class and
    its error classes, from the most specific (a timeout) to the SDK's base error."""

    client: Callable[..., Any]
    timeout_error: type[Any]       # APITimeoutError
    connection_error: type[Any]    # APIConnectionError: has .message
    status_error: type[Any]        # APIStatusError: .status_code, .body, .response
    api_error: type[Any]           # APIError: an error event inside an open stream
    base_error: type[Any]          # OpenAIError, AnthropicError


# the SDK clients made on each event loop (a client's connections belong to its loop)
_shared_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[Any, ...], Any]] = (
    weakref.WeakKeyDictionary())


class HostedAdapter[ClientT](ModelAdapter):
    """A model behind a provider's HTTP API, called through the provider's official SDK.

    The config is checked when the adapter is built: unknown keys, ``endpoint``, ``model``
    (one the endpoint allows), then the provider's own settings (:meth:`_read_settings`),
    then ``max_retries`` and ``retry_base_delay_s``. The client is made on the first call,
    for the endpoint's base URL with the key from the environment variable it names; every
    call runs under one retry policy, and each try is the provider's :meth:`_attempt`.
    """

    sdk: ClassVar[ProviderSDK]
    config_keys: ClassVar[tuple[str, ...]]
    missing_key_message: ClassVar[str]   # "{env}" is the environment variable's name

    # set by _read_settings
    timeout_s: float
    tool_choice: str

    def __init__(self, config: dict[str, Any] | None = None, *,
                 endpoint: ModelEndpoint | None = None, http_client: Any | None = None) -> None:
        """``endpoint`` is for a program that holds its own (the config's ``endpoint`` names
        one of the installed ones otherwise); ``http_client`` (an ``httpx2.AsyncClient``)
        is for tests and proxies only."""
        super().__init__(config)
        check.reject_unknown_keys(self.name, self.config, (*self.config_keys, "endpoint"))
        self.endpoint = endpoint or check.endpoint(self.name, self.config)
        self.model = check.endpoint_model(self.name, self.config, self.endpoint)
        # stored with the run as it ran: a resume or retry asks the same endpoint and model
        self.config.update(endpoint=self.endpoint.name, model=self.model)
        self.base_url = self.endpoint.base_url
        self._read_settings()
        self.retry_policy = retry_policy_from_config(self.name, self.config)
        self._http_client = http_client
        self._client: ClientT | None = None
        self._api_key: str | None = None

    @abstractmethod
    def _read_settings(self) -> None:
        """Check and keep the provider's own settings (read after ``model``, before the
        retry settings; the first bad key read is the one reported)."""

    def for_child(self, label: str) -> Self:
        return type(self)(self.config, endpoint=self.endpoint, http_client=self._http_client)

    @property
    def model_name(self) -> str:
        return self.model

    def _client_or_error(self) -> ClientT:
        if self._client is None:
            key_env = self.endpoint.api_key_env
            key = (os.environ.get(key_env) if key_env else None) or None
            if key is None and self.base_url is None:
                raise ProtocolError(
                    ErrorCode.TOOL_FAILURE, self.missing_key_message.format(
                        env=key_env or "(none)", endpoint=self.endpoint.name),
                    details={"adapter": self.name, "endpoint": self.endpoint.name, "env": key_env})
            self._api_key = key
            if self._http_client is not None:
                self._client = self._new_client(key)
            else:
                # One SDK client per endpoint, key and timeout on this event loop, shared by
                # every run: a new one for each run built an HTTP client and an SSL context
                # (its CA bundle read anew), 60 ms of CPU a run, and kept no connection
                # alive between them (load_probe.py --mode slow).
                shared = _shared_clients.setdefault(asyncio.get_running_loop(), {})
                slot = (self.sdk.client, self.base_url, key, self.timeout_s)
                if slot not in shared:
                    shared[slot] = self._new_client(key)
                self._client = shared[slot]
        return self._client

    def _new_client(self, key: str | None) -> ClientT:
        # The SDK's own retries are off: call_with_retries applies one policy for every
        # provider and knows whether text was already streamed.
        return self.sdk.client(api_key=key or NO_KEY_NEEDED, base_url=self.base_url, timeout=self.timeout_s,
                               max_retries=0, http_client=self._http_client)

    async def complete(self, messages: list[Message], tools: list[ToolSchema], *,
                       on_text: TextCallback | None = None,
                       tool_choice: str | None = None) -> ModelTurn:
        client = self._client_or_error()
        request = self._request(messages, tools, tool_choice)
        traced = outgoing_headers()
        if traced:   # the provider's own tracing continues the run's trace (both SDKs take it)
            request["extra_headers"] = traced
        streamed = False

        async def watched(text: str) -> None:
            nonlocal streamed
            streamed = True
            if on_text is not None:
                await on_text(text)

        result: ModelTurn = await call_with_retries(
            self.name, self.retry_policy,
            lambda: self._attempt(client, request, watched if on_text is not None else None),
            self._classify, lambda: streamed)
        return result

    @abstractmethod
    def _request(self, messages: list[Message], tools: list[ToolSchema],
                 tool_choice: str | None = None) -> dict[str, Any]:
        """The keyword arguments of the SDK call for this history and these tools
        (``tool_choice``: the tool the model must call, else the config's choice)."""

    @abstractmethod
    async def _attempt(self, client: ClientT, request: dict[str, Any],
                       on_text: TextCallback | None) -> ModelTurn:
        """One try: send ``request``, pass text to ``on_text`` as it comes, read the turn."""

    def _classify(self, exc: BaseException) -> ProviderFailure | None:
        """A provider-neutral account of an SDK error, its message scrubbed of secrets
        (None: not the SDK's error, so not the provider's failure)."""
        sdk = self.sdk
        if isinstance(exc, sdk.timeout_error):
            failure = ProviderFailure(f"timed out after {self.timeout_s:g} s", True)
        elif isinstance(exc, sdk.connection_error):
            cause = exc.__cause__
            detail = f"{exc.message} ({cause})" if cause else exc.message
            failure = ProviderFailure(f"could not reach {self.base_url or 'the API'}: {detail}",
                                      True)
        elif isinstance(exc, sdk.status_error):
            failure = self._status_failure(exc)
        elif isinstance(exc, sdk.api_error):
            failure = self._stream_failure(exc)
        elif isinstance(exc, sdk.base_error):
            failure = ProviderFailure(str(exc), False)
        else:
            return None
        return replace(failure, message=scrub_secrets(failure.message, [self._api_key]))

    @abstractmethod
    def _status_failure(self, exc: Any) -> ProviderFailure:
        """An HTTP error status (the SDK's APIStatusError), as the provider words it."""

    @abstractmethod
    def _stream_failure(self, exc: Any) -> ProviderFailure:
        """An error without a status (the SDK's APIError), such as an error event in a stream."""
