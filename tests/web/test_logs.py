"""Tokens passed as ?access_token= do not reach uvicorn's access log."""

from __future__ import annotations

import io
import logging

import uvicorn
from uvicorn.logging import AccessFormatter

from rsjobs.web import create_app
from rsjobs.web.logs import RedactTokens, redact


def test_redact_hides_token_values_only() -> None:
    assert redact("/tasks/ab/events?access_token=s3cr3t") == "/tasks/ab/events?access_token=***"
    assert (
        redact("/x?last_event_id=1-0&access_token=s3cr3t&y=2")
        == "/x?last_event_id=1-0&access_token=***&y=2"
    )
    assert redact("/tasks/ab") == "/tasks/ab"


def test_uvicorn_access_lines_are_redacted_after_create_app() -> None:
    create_app("redis://127.0.0.1:1/0", tokens={"s3cr3t": "alice"})
    # uvicorn configures its loggers when its Config is built (after the app): the filter stays
    uvicorn.Config(lambda *a: None, log_level="info")
    logger = logging.getLogger("uvicorn.access")
    assert any(isinstance(f, RedactTokens) for f in logger.filters)
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(AccessFormatter('%(client_addr)s "%(request_line)s" %(status_code)s'))
    logger.addHandler(handler)
    try:
        logger.info(
            '%s - "%s %s HTTP/%s" %d',
            "127.0.0.1:5000",
            "GET",
            "/tasks/ab/events?access_token=s3cr3t",
            "1.1",
            200,
        )
    finally:
        logger.removeHandler(handler)
    line = out.getvalue()
    assert "s3cr3t" not in line and "access_token=***" in line, line
