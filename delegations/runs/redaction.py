"""The installation's secrets, kept out of everything a run stores or sends.

The event log (``eventlog.persist_batch``) passes every event and checkpoint through
:func:`redactor` before it is written, and the sink holds back streamed text that may be
the start of a secret, so the run rows, pages, exports, the admin and websocket frames,
which all read what was stored, never hold one. :class:`SecretsLogFilter` does the same
for log lines. The secrets are the values of: the environment variables the model
endpoints name for their keys, ``HANDOFF_SECRET_ENV_VARS``, the MCP servers' secrets
(every ``HANDOFF_MCP_SECRET_*`` variable), the remote A2A agents' (every
``HANDOFF_A2A_SECRET_*``), ``SECRET_KEY``, the header values sent to the trace collector
(``OTEL_EXPORTER_OTLP_HEADERS``: a vendor's API key), and the passwords in ``DATABASE_URL``, ``REDIS_URL``, ``HANDOFF_CACHE_URL`` and the inbox webhook's URL.
"""

from __future__ import annotations

import functools
import logging
import os
from urllib.parse import urlsplit

from django.conf import settings

from delegations.protocol.a2a_client import SECRET_ENV_PREFIX as A2A_SECRET_ENV_PREFIX
from delegations.protocol.mcp_client import SECRET_ENV_PREFIX
from delegations.protocol.redaction import Redactor


def _url_password(url: str) -> str | None:
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def secret_values() -> tuple[str, ...]:
    names = {endpoint.api_key_env for endpoint in settings.HANDOFF_MODEL_ENDPOINTS.values()
             if endpoint.api_key_env}
    names.update(settings.HANDOFF_SECRET_ENV_VARS)
    names.update(name for name in os.environ
                 if name.startswith((SECRET_ENV_PREFIX, A2A_SECRET_ENV_PREFIX)))
    values = [os.environ.get(name) for name in sorted(names)]
    values.append(settings.SECRET_KEY)
    values += settings.HANDOFF_OTLP_HEADER_SECRETS
    values += [database.get("PASSWORD") for database in settings.DATABASES.values()]
    values += [_url_password(url) for url in (settings.REDIS_URL, settings.CACHE_URL,
                                              settings.HANDOFF_INBOX_WEBHOOK_URL) if url]
    return tuple(value for value in values if value)


@functools.lru_cache(maxsize=4)
def _redactor_of(values: tuple[str, ...]) -> Redactor:
    return Redactor(values)


def redactor() -> Redactor:
    """A Redactor for the secrets as they are now (read each time: a key set in the
    environment after start is still caught)."""
    return _redactor_of(secret_values())


class SecretsLogFilter(logging.Filter):
    """A handler's filter that writes each record's message, and its traceback, redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = redactor()
        if secrets:
            record.msg, record.args = secrets.text(record.getMessage()), None
            if record.exc_info and not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            if record.exc_text:
                record.exc_text = secrets.text(record.exc_text)
        return True
