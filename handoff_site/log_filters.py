"""Filters of the log Django and Handoff write (settings.LOGGING)."""

from __future__ import annotations

import logging


class ClientErrorsInOneLine(logging.Filter):
    """Django logs a 403 (PermissionDenied) with the exception's traceback, forty lines that
    read like a crash to an operator; a client's error is its one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", 500) < 500:
            record.exc_info, record.exc_text = None, None
        return True
