"""Keep bearer tokens out of access logs.

``EventSource`` and ``<img src>`` cannot send an ``Authorization`` header, so the event
streams and the asset route also take ``?access_token=``; an access log would then record
the token with the URL. :func:`redact_access_logs` puts a filter on uvicorn's access
logger that replaces the value with ``***`` before any handler formats the line.
"""

from __future__ import annotations

import logging
import re

__all__ = ["RedactTokens", "redact", "redact_access_logs"]

_TOKEN = re.compile(r"(?i)([?&](?:access_token|token)=)[^&#\s]*")


def redact(text: str) -> str:
    """``text`` with the value of every ``access_token=`` / ``token=`` query parameter hidden."""
    return _TOKEN.sub(r"\1***", text)


class RedactTokens(logging.Filter):
    """Rewrites the message arguments (and message) of a record so no token is logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str) and "token=" in record.msg.lower():
            record.msg = redact(record.msg)
        return True


def redact_access_logs(logger_name: str = "uvicorn.access") -> None:
    """Install :class:`RedactTokens` on ``logger_name`` (once; idempotent)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, RedactTokens) for f in logger.filters):
        logger.addFilter(RedactTokens())
