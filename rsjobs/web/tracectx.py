"""The caller's trace context for everything a request does (rsjobs.tracing): a submit,
a workflow's start or a retry made while serving a request with a W3C ``traceparent``
header is a child of the caller's span, with or without an OpenTelemetry server
instrumentation in front (one that made a span already wins)."""

from __future__ import annotations

from typing import Any

from ..tracing import request_context

__all__ = ["TraceContextMiddleware"]

_HEADERS = (b"traceparent", b"tracestate")


class TraceContextMiddleware:
    """Pure ASGI middleware: the request's trace context current while it is served."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {
            k.decode("latin-1"): v.decode("latin-1")
            for k, v in scope.get("headers", ())
            if k in _HEADERS
        }
        with request_context(headers):
            await self.app(scope, receive, send)
