"""OpenTelemetry tracing (rsjobs.tracing): a submit's PRODUCER span, its trace context
stored with the task, the worker's CONSUMER span per attempt a child of it (in this
process and in a worker child process), and nothing stored without a trace."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis as sync_redis
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.util._once import Once

from rsjobs import Client, EnqueueRequest, Settings, SyncClient, Worker
from rsjobs.workflows import WorkflowClient
from tests.support.processes import ROOT, spawn_worker, stop_process
from tests.support.traced_apps import tasks
from tests.support.web import ALICE, make_app

NS = "t"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """An SDK tracer provider for this test, its ended spans in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        # back to no provider, as OpenTelemetry's own test helpers do, so that no other
        # test records spans (and its tasks stay without a trace context)
        trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
        trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]


@contextlib.asynccontextmanager
async def worker(url: str) -> AsyncIterator[Worker]:
    w = Worker(
        tasks,
        url=url,
        settings=Settings(namespace=NS),
        handle_signals=False,
        concurrency=4,
        lease_ms=2000,
        promote_ms=20,
        block_ms=100,
    )
    run = asyncio.create_task(w.run())
    try:
        yield w
    finally:
        w.stop(force=True)
        await asyncio.wait_for(run, 20)
        await w.redis.aclose()


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def ended(exporter: InMemorySpanExporter, name: str, count: int = 1) -> list[ReadableSpan]:
    """The spans ``name`` once ``count`` of them ended (an attempt's span ends with the
    reply to its end, just after the task's state changed)."""
    deadline = time.monotonic() + 10
    while len(found := named(exporter, name)) < count:
        assert time.monotonic() < deadline, [s.name for s in exporter.get_finished_spans()]
        await asyncio.sleep(0.02)
    return found


def traceparent_of(span: ReadableSpan) -> str:
    ctx = span.get_span_context()
    assert ctx is not None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"


def task_hash(redis_url: str, tid: str) -> dict[str, str]:
    r = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        return r.hgetall(f"rsjobs:{{{NS}}}:task:{tid}")  # type: ignore[return-value]
    finally:
        r.close()


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    ctx = span.get_span_context()
    assert ctx is not None
    return ctx.span_id


@pytest.mark.parametrize("kind", ["traced", "traced_sync"])
async def test_the_attempt_span_is_a_child_of_the_enqueue_span(
    spans: InMemorySpanExporter, client: Client, redis_url: str, kind: str
) -> None:
    with trace.get_tracer("test").start_as_current_span("caller") as caller:
        tid = await client.enqueue(kind, {"n": 1}, owner="alice")
    (producer,) = named(spans, f"rsjobs.enqueue {kind}")
    assert producer.kind is SpanKind.PRODUCER and parent_id(producer) == span_id(caller)
    assert producer.attributes is not None and producer.attributes["rsjobs.task.id"] == tid
    # the stored context is the producer span's: hash fields tp (and no ts: no tracestate)
    stored = task_hash(redis_url, tid)
    assert stored["tp"] == traceparent_of(producer) and "ts" not in stored

    async with worker(redis_url):
        assert (await client.wait(tid, timeout_ms=10_000)).state == "SUCCEEDED"
        (run,) = await ended(spans, f"rsjobs.run {kind}")
    assert run.kind is SpanKind.CONSUMER
    assert run.context.trace_id == producer.context.trace_id
    assert parent_id(run) == span_id(producer)
    assert dict(run.attributes or {}) | {"rsjobs.worker": ""} == {
        "messaging.system": "rsjobs",
        "messaging.operation.type": "process",
        "messaging.destination.name": "default",
        "messaging.message.id": tid,
        "rsjobs.task.id": tid,
        "rsjobs.task.type": kind,
        "rsjobs.queue": "default",
        "rsjobs.task.attempt": 1,
        "rsjobs.task.owner": "alice",
        "rsjobs.worker": "",
        "rsjobs.outcome": "COMPLETE",
        "rsjobs.task.state": "SUCCEEDED",
    }
    assert run.status.status_code is StatusCode.UNSET
    # the handler's own span (async, or in the sync handler's thread) is the attempt's child
    (inside,) = named(spans, "inside")
    assert parent_id(inside) == span_id(run) and inside.context.trace_id == run.context.trace_id


async def test_a_failed_attempt_is_an_error_span_with_its_exception(
    spans: InMemorySpanExporter, client: Client, redis_url: str
) -> None:
    tid = await client.enqueue("traced_fail", None, max_attempts=2, backoff_base_ms=0)
    (producer,) = named(spans, "rsjobs.enqueue traced_fail")
    async with worker(redis_url):
        assert (await client.wait(tid, timeout_ms=10_000)).state == "FAILED"
        first, last = sorted(
            await ended(spans, "rsjobs.run traced_fail", 2),
            key=lambda s: (s.attributes or {})["rsjobs.task.attempt"],
        )
    for attempt, span in enumerate((first, last), 1):
        attrs = span.attributes or {}
        assert attrs["rsjobs.task.attempt"] == attempt and attrs["rsjobs.outcome"] == "FAIL"
        assert parent_id(span) == span_id(producer)  # every attempt: a child of the submit
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == f"RuntimeError: boom on attempt {attempt}"
        (event,) = [e for e in span.events if e.name == "exception"]
        assert (event.attributes or {})["exception.type"] == "RuntimeError"
    # the first failure left it to retry, the last one ended it
    assert (first.attributes or {})["rsjobs.task.state"] != "FAILED"
    assert (last.attributes or {})["rsjobs.task.state"] == "FAILED"


async def test_a_bulk_submit_is_one_span_whose_context_every_task_keeps(
    spans: InMemorySpanExporter, client: Client, redis_url: str
) -> None:
    reqs = [EnqueueRequest(type="traced", payload=i) for i in range(3)]
    ids = await client.enqueue_many(reqs)
    (bulk,) = named(spans, "rsjobs.enqueue_many")
    assert bulk.kind is SpanKind.PRODUCER
    assert (bulk.attributes or {})["messaging.batch.message_count"] == 3
    assert {task_hash(redis_url, t)["tp"] for t in ids} == {traceparent_of(bulk)}
    async with worker(redis_url):
        runs = await ended(spans, "rsjobs.run traced", 3)
    assert {(parent_id(r), (r.attributes or {})["rsjobs.task.id"]) for r in runs} == {
        (span_id(bulk), t) for t in ids
    }


async def test_a_sync_client_call_runs_in_its_callers_trace(
    spans: InMemorySpanExporter, redis_url: str
) -> None:
    sync = SyncClient(redis_url, Settings(namespace=NS))
    try:
        with trace.get_tracer("test").start_as_current_span("caller") as caller:
            # (to_thread runs it in a thread with this context, as a caller's thread is;
            # the call reaches the client's loop in a copy of it: call_soon_threadsafe)
            tid = await asyncio.to_thread(sync.enqueue, "traced", 1)
    finally:
        await asyncio.to_thread(sync.close)
    (producer,) = named(spans, "rsjobs.enqueue traced")
    assert parent_id(producer) == span_id(caller)
    assert task_hash(redis_url, tid)["tp"] == traceparent_of(producer)


async def test_an_http_submit_continues_the_callers_traceparent(
    spans: InMemorySpanExporter, redis_url: str
) -> None:
    trace_id, caller_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    app = make_app(redis_url)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://rsjobs.test") as web:
            headers = {**ALICE, "traceparent": f"00-{trace_id}-{caller_id}-01",
                       "tracestate": "vendor=v1"}  # fmt: skip
            r = await web.post("/tasks", json={"type": "traced", "payload": 1}, headers=headers)
            assert r.status_code == 202, r.text
            # a malformed traceparent is ignored (W3C Trace Context): a trace of its own
            bad = {**ALICE, "traceparent": "00-zz-00-01"}
            r2 = await web.post("/tasks", json={"type": "traced", "payload": 2}, headers=bad)
            assert r2.status_code == 202, r2.text
    finally:
        await app.state.rsjobs.aclose()
    first, second = named(spans, "rsjobs.enqueue traced")
    assert f"{first.context.trace_id:032x}" == trace_id and parent_id(first) == int(caller_id, 16)
    stored = task_hash(redis_url, r.json()["id"])
    assert stored["tp"] == traceparent_of(first) and stored["ts"] == "vendor=v1"
    assert second.parent is None  # a root: the bad header named no parent
    assert task_hash(redis_url, r2.json()["id"])["tp"] == traceparent_of(second)


async def test_without_a_trace_nothing_is_stored(client: Client, redis_url: str) -> None:
    # no SDK provider: the API's spans are not recording and carry no valid context
    tid = await client.enqueue("traced", 1)
    assert not {"tp", "ts"} & set(task_hash(redis_url, tid))


def test_rsjobs_runs_without_opentelemetry(redis_url: str, project_env: dict[str, str]) -> None:
    """With the package hidden, tracing is off and a task is submitted and run as ever."""
    script = f"""
import asyncio, sys
sys.modules["opentelemetry"] = None  # import opentelemetry... raises ImportError
import rsjobs, rsjobs.tracing, rsjobs.web
from rsjobs import Client, Registry, Settings, Worker
assert not rsjobs.tracing.ENABLED
reg = Registry()
reg.handler("noop")(lambda ctx, p: p)
async def main():
    c = Client.from_url({redis_url!r}, namespace="nootel")
    tid = await c.enqueue("noop", 7)
    w = Worker(reg, url={redis_url!r}, settings=Settings(namespace="nootel"),
               handle_signals=False, block_ms=100)
    run = asyncio.create_task(w.run())
    info = await c.wait(tid, timeout_ms=10_000)
    w.stop(force=True)
    await run
    assert info.state == "SUCCEEDED" and info.result == 7, info
    assert "tp" not in await c.redis.hgetall(f"rsjobs:{{{{nootel}}}}:task:{{tid}}")
    assert not any(m.startswith("opentelemetry.") for m in sys.modules)
    print("ok")
asyncio.run(main())
"""
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=project_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def read_spans(path: Path, name: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 15
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        found = [s for s in map(json.loads, lines) if s["name"] == name]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


async def test_across_processes_the_workers_span_continues_the_submitters_trace(
    spans: InMemorySpanExporter,
    client: Client,
    redis_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """This process submits inside a span; a real ``rsjobs worker`` child process, its
    own SDK exporting to a file, runs the task: its span has the submitter's trace id and
    the enqueue span as parent."""
    with trace.get_tracer("test").start_as_current_span("caller"):
        tid = await client.enqueue("traced", {"n": 1}, owner="alice")
    (producer,) = named(spans, "rsjobs.enqueue traced")
    out = tmp_path / "spans.jsonl"
    monkeypatch.setenv("RSJOBS_TEST_SPANS", str(out))
    proc = spawn_worker(redis_url, NS, app="tests.support.traced_apps:tasks")
    try:
        assert (await client.wait(tid, timeout_ms=20_000)).state == "SUCCEEDED"
        runs = await asyncio.to_thread(read_spans, out, "rsjobs.run traced")
    finally:
        stop_process(proc, signal.SIGTERM)
    (run,) = runs
    assert run["kind"] == "CONSUMER" and run["attributes"]["rsjobs.task.id"] == tid
    assert run["trace_id"] == f"{producer.context.trace_id:032x}"
    assert run["parent_id"] == f"{span_id(producer):016x}"
    assert run["attributes"]["rsjobs.task.state"] == "SUCCEEDED"
    assert run["attributes"]["rsjobs.worker"] and run["attributes"]["rsjobs.task.owner"] == "alice"
    (inside,) = read_spans(out, "inside")
    assert inside["parent_id"] == run["span_id"] and inside["trace_id"] == run["trace_id"]


async def test_a_workflow_stage_is_spawned_in_the_starters_trace(
    spans: InMemorySpanExporter, wf: WorkflowClient, redis_url: str
) -> None:
    with trace.get_tracer("test").start_as_current_span("caller") as caller:
        wf_id = await wf.start("character", {"name": "x"})
    (spawn,) = named(spans, "rsjobs.spawn params")
    assert spawn.kind is SpanKind.PRODUCER and parent_id(spawn) == span_id(caller)
    assert (spawn.attributes or {})["rsjobs.workflow.id"] == wf_id
    (task,) = (await wf.status(wf_id)).tasks
    assert task_hash(redis_url, task.id)["tp"] == traceparent_of(spawn)
