"""OpenTelemetry tracing, when the ``otel`` extra is installed (``pip install
rsjobs[otel]``); without it every function here does nothing and rsjobs runs as before.

This is the one module that imports OpenTelemetry. rsjobs only uses its API: spans are
recorded and exported when the application configures an SDK tracer provider (and
exporter); with the API alone they are no-ops.

- A submit (:class:`rsjobs.Client`, :class:`rsjobs.SyncClient`, the bulk submit, the HTTP
  API, a workflow's spawned stage) opens a PRODUCER span ``rsjobs.enqueue <type>`` (one
  ``rsjobs.enqueue_many`` span for a bulk call, ``rsjobs.spawn <stage>`` for a stage) and
  stores its W3C trace context with each task: the ``traceparent`` (hash field ``tp``)
  and, when there is one, the ``tracestate`` (``ts``). Nothing is stored when no span is
  recording or active (no SDK, no caller's trace), so an untraced task costs no byte.
- The worker opens one CONSUMER span ``rsjobs.run <type>`` per attempt, a child of the
  stored context, current while the handler runs (its own spans are children of it),
  ended when the attempt's end is written, with the state it left the task in.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NamedTuple

try:  # the optional extra
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - exercised by the test that hides the package
    trace = None  # type: ignore[assignment]

__all__ = [
    "ENABLED",
    "NO_TRACE",
    "Attempt",
    "TraceContext",
    "enqueue_span",
    "request_context",
    "start_attempt",
]

#: whether OpenTelemetry's API could be imported
ENABLED = trace is not None
#: the longest tracestate stored (W3C Trace Context asks carriers to keep at least 512
#: characters); a longer one is left out, the traceparent kept
TRACESTATE_MAX = 512
_NAME = "rsjobs"


class TraceContext(NamedTuple):
    """A W3C trace context as a task stores it; empty texts when there is none."""

    traceparent: str = ""
    tracestate: str = ""


NO_TRACE = TraceContext()


def _tracer() -> Any:
    from . import __version__

    return trace.get_tracer(_NAME, __version__)


def _current_trace() -> TraceContext:
    """The current span's context, as the W3C propagator writes it."""
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    parent = carrier.get("traceparent", "")
    if not parent:
        return NO_TRACE
    state = carrier.get("tracestate", "")
    return TraceContext(parent, state if len(state) <= TRACESTATE_MAX else "")


def _drop_none(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attributes.items() if v is not None and v != ""}


@contextmanager
def enqueue_span(name: str, attributes: Mapping[str, Any]) -> Iterator[TraceContext]:
    """A PRODUCER span ``name`` around a submit; yields the trace context to store with
    its tasks (:data:`NO_TRACE` when the span is not valid: no SDK and no active trace).
    An exception raised in the block is recorded on the span (status ERROR)."""
    if not ENABLED:
        yield NO_TRACE
        return
    with _tracer().start_as_current_span(
        name, kind=SpanKind.PRODUCER, attributes=_drop_none(attributes)
    ):
        yield _current_trace()


@contextmanager
def request_context(headers: Mapping[str, str]) -> Iterator[None]:
    """The trace context of an HTTP request's ``traceparent`` / ``tracestate`` headers
    current in the block, unless a span is already current (a server instrumentation
    made one from those headers). A malformed header is ignored, as W3C Trace Context
    asks."""
    if not ENABLED or trace.get_current_span().get_span_context().is_valid:
        yield
        return
    carrier = {k: headers[k] for k in ("traceparent", "tracestate") if k in headers}
    if not carrier:
        yield
        return
    token = otel_context.attach(TraceContextTextMapPropagator().extract(carrier))
    try:
        yield
    finally:
        otel_context.detach(token)


class Attempt:
    """One attempt's CONSUMER span (nothing when tracing is off): made current around the
    handler with :meth:`active`, ended once with :meth:`end`."""

    __slots__ = ("_span",)

    def __init__(self, span: Any) -> None:
        self._span = span

    @contextmanager
    def active(self) -> Iterator[None]:
        """The span current in the block (and in a handler thread started in it)."""
        if self._span is None:
            yield
            return
        with trace.use_span(self._span, end_on_exit=False):
            yield

    def failed(self, error: str, exc: BaseException | None = None) -> None:
        """The handler failed (an exception, a timeout, a refused payload or result)."""
        if self._span is None:
            return
        if exc is not None:
            self._span.record_exception(exc)
        self._span.set_status(Status(StatusCode.ERROR, error))

    def end(self, outcome: str, state: str = "") -> None:
        """End the span: ``outcome`` is how the attempt ended (the event the worker sent:
        COMPLETE, FAIL, TIMEOUT, REQUEUE; or why it was stopped: CANCELLED, PAUSED,
        LOST), ``state`` the task's state after it when known. A second call does
        nothing."""
        span, self._span = self._span, None
        if span is None:
            return
        span.set_attribute("rsjobs.outcome", outcome)
        if state:
            span.set_attribute("rsjobs.task.state", state)
        span.end()


def start_attempt(stored: TraceContext, type: str, attributes: Mapping[str, Any]) -> Attempt:
    """Open the span of one attempt of a task of ``type``, a child of the context the task
    was submitted in (``stored``; a new trace when it has none). Not made current."""
    if not ENABLED:
        return Attempt(None)
    parent = None
    if stored.traceparent:
        carrier = {"traceparent": stored.traceparent}
        if stored.tracestate:
            carrier["tracestate"] = stored.tracestate
        parent = TraceContextTextMapPropagator().extract(carrier)
    span = _tracer().start_span(
        f"rsjobs.run {type}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=_drop_none(attributes),
    )
    return Attempt(span)


def task_attributes(
    task_id: str | None, type: str | None, queue: str | None, operation: str
) -> dict[str, Any]:
    """The attributes every span about one task carries (OpenTelemetry's messaging
    conventions, and rsjobs' own)."""
    return {
        "messaging.system": _NAME,
        "messaging.operation.type": operation,
        "messaging.destination.name": queue,
        "messaging.message.id": task_id,
        "rsjobs.task.id": task_id,
        "rsjobs.task.type": type,
        "rsjobs.queue": queue,
    }
