"""Handlers for the tracing tests (importable by worker child processes as
tests.support.traced_apps:tasks). Each opens a span of its own inside the attempt's.

With ``RSJOBS_TEST_SPANS`` set (a file path), importing this module configures an
OpenTelemetry SDK tracer provider that appends every ended span to that file, one JSON
object per line: the cross-process test reads what a worker child recorded.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from rsjobs import Context, Registry

tasks = Registry()


def tracer() -> trace.Tracer:
    # looked up at each use: a tracer kept from an earlier provider would outlive it
    return trace.get_tracer("tests.traced_apps")


@tasks.handler("traced")
async def traced(ctx: Context, payload: Any) -> Any:
    with tracer().start_as_current_span("inside"):
        return {"attempt": ctx.attempt}


@tasks.handler("traced_sync")
def traced_sync(ctx: Context, payload: Any) -> Any:
    """A sync handler: its thread runs in the attempt's span too."""
    with tracer().start_as_current_span("inside"):
        return {"attempt": ctx.attempt}


@tasks.handler("traced_fail")
async def traced_fail(ctx: Context, payload: Any) -> None:
    raise RuntimeError(f"boom on attempt {ctx.attempt}")


class FileExporter(SpanExporter):
    """Appends each span as one JSON line (ids in hex, as traceparent writes them)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = []
        for s in spans:
            ctx, parent = s.get_span_context(), s.parent
            assert ctx is not None
            lines.append(
                json.dumps(
                    {
                        "name": s.name,
                        "kind": s.kind.name,
                        "trace_id": f"{ctx.trace_id:032x}",
                        "span_id": f"{ctx.span_id:016x}",
                        "parent_id": f"{parent.span_id:016x}" if parent else None,
                        "attributes": dict(s.attributes or {}),
                        "status": s.status.status_code.name,
                    }
                )
            )
        with self.lock, open(self.path, "a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
        return SpanExportResult.SUCCESS


_path = os.environ.get("RSJOBS_TEST_SPANS")
if _path:
    _provider = TracerProvider()
    _provider.add_span_processor(SimpleSpanProcessor(FileExporter(_path)))
    trace.set_tracer_provider(_provider)
