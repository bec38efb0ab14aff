"""/metrics (read from Redis at scrape time, durations from the hub), /healthz, /openapi.json."""

from __future__ import annotations

import re
from urllib.parse import urljoin

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.routing import Route

from rsjobs import Client
from rsjobs.web import create_app
from rsjobs.web.openapi import openapi_document
from tests.support.web import ALICE, ROOT, TestClient, running_worker

pytestmark = pytest.mark.integration


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def test_metrics_read_redis_at_scrape_time(
    api: httpx.AsyncClient, client: Client, redis_url: str
) -> None:
    assert (await api.get("/metrics", headers=ROOT)).status_code == 200
    ok = [(await api.post("/tasks", json={"type": "sleep", "payload": {"s": 0.2, "steps": 2},
                                          "queue": "gen"}, headers=ALICE)).json()["id"]
          for _ in range(2)]  # fmt: skip
    waiting = [await client.enqueue("x", queue="later") for _ in range(3)]
    await client.cancel(waiting[0])
    async with running_worker(redis_url, queues=["gen"]):
        for tid in ok:
            await client.wait(tid, timeout_ms=10_000)
    r = await api.get("/metrics", headers=ROOT)
    assert r.headers["content-type"].startswith("text/plain")
    m = samples(r.text)
    assert m[("rsjobs_redis_up", ())] == 1
    assert m[("rsjobs_queue_depth", (("queue", "later"),))] == 2
    assert m[("rsjobs_queue_stream_length", (("queue", "later"),))] == 2
    assert m[("rsjobs_tasks", (("queue", "later"), ("state", "PENDING")))] == 2
    assert m[("rsjobs_tasks", (("queue", "gen"), ("state", "RUNNING")))] == 0
    assert m[("rsjobs_tasks_finished_total", (("queue", "gen"), ("state", "SUCCEEDED")))] == 2
    assert m[("rsjobs_tasks_finished_total", (("queue", "later"), ("state", "CANCELLED")))] == 1
    counters = await client.counters()
    assert m[("rsjobs_transitions_total", (("event", "ENQUEUE"),))] == counters["ev:ENQUEUE"] == 5
    assert m[("rsjobs_transitions_total", (("event", "COMPLETE"),))] == 2
    assert m[("rsjobs_reclaims_total", ())] == counters.get("ev:RECLAIM", 0)
    assert m[("rsjobs_late_results_rejected_total", (("event", "COMPLETE"),))] == 0
    # durations: START..COMPLETE in Redis TIME, counted by the scripts, about 0.2 s each
    count = m[("rsjobs_task_duration_seconds_count", (("queue", "gen"), ("state", "SUCCEEDED")))]
    total = m[("rsjobs_task_duration_seconds_sum", (("queue", "gen"), ("state", "SUCCEEDED")))]
    assert count == 2 and 0.3 <= total <= 5
    gen_ok = (("queue", "gen"), ("state", "SUCCEEDED"))
    bucket = "rsjobs_task_duration_seconds_bucket"
    assert m[(bucket, tuple(sorted((*gen_ok, ("le", "0.1")))))] == 0  # each took ~0.2 s
    assert m[(bucket, tuple(sorted((*gen_ok, ("le", "+Inf")))))] == 2
    # a task never started (the cancelled one) is no duration
    assert (
        "rsjobs_task_duration_seconds_count",
        (("queue", "later"), ("state", "CANCELLED")),
    ) not in m
    hist = await client.history(ok[0])
    start = next(e.ts for e in hist if e.event == "START")
    assert hist[-1].event == "COMPLETE" and hist[-1].ts - start >= 150
    # a refused late result shows up in its own counter
    await client.redis.hincrby(client.keys.stats, "rej:COMPLETE", 1)  # as finish.lua does
    m = samples((await api.get("/metrics", headers=ROOT)).text)
    assert m[("rsjobs_late_results_rejected_total", (("event", "COMPLETE"),))] == 1
    assert m[("rsjobs_rejected_total", (("event", "COMPLETE"),))] == 1


async def test_metrics_and_health_when_redis_is_down() -> None:
    app = create_app("redis://127.0.0.1:1/0", env={}, dev=True)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://x") as c:
        r = await c.get("/healthz")
        assert r.status_code == 503 and r.json()["redis"] == "unreachable"
        # readiness says so too; liveness does not (a Redis outage restarts no web process)
        r = await c.get("/readyz")
        assert r.status_code == 503 and r.json()["redis"] == "unreachable"
        assert (await c.get("/livez")).json() == {"status": "ok"}
        m = samples((await c.get("/metrics")).text)
        assert m[("rsjobs_redis_up", ())] == 0
        r = await c.get("/tasks/" + "0" * 32)
        assert r.status_code == 503 and r.json()["error"] == "redis_unavailable"
    await app.state.rsjobs.aclose()


def test_healthz(tc: TestClient) -> None:
    r = tc.get("/healthz")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok" and body["redis"] == "ok"
    assert body["events_reader"] == "ok"  # started by the lifespan


def test_openapi_describes_exactly_the_api_routes(tc: TestClient) -> None:
    doc = tc.get("/openapi.json").json()
    assert doc == openapi_document() and doc["openapi"].startswith("3.1")
    documented = {(path, m.upper()) for path, ops in doc["paths"].items() for m in ops}
    app = tc.app
    # (a route's converter, {external_id:path}, is no part of its OpenAPI path)
    served = {
        (re.sub(r"\{(\w+):\w+\}", r"{\1}", r.path), m)
        for r in app.routes  # type: ignore[attr-defined]
        # the pages' redirects are no API
        if isinstance(r, Route) and r.path not in ("/", "/dashboard")
        for m in (r.methods or set()) - {"HEAD"}
    }
    assert documented == served
    # every $ref resolves
    schemas = doc["components"]["schemas"]
    text = str(doc["paths"])
    for name in ("SubmitRequest", "SubmitResult", "TaskView", "HistoryPage", "CancelResult",
                 "CancelRequest", "ErrorBody"):  # fmt: skip
        assert f"#/components/schemas/{name}" in text and name in schemas
    assert "#/components/schemas/HistoryEntry" in str(schemas["TaskView"])
    assert schemas["SubmitRequest"]["additionalProperties"] is False
    assert schemas["SubmitRequest"]["required"] == ["type"]


def test_the_example_page_is_served(tc: TestClient) -> None:
    r = tc.get("/", follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"].endswith("/ui/")
    page = tc.get("/ui/")
    assert page.status_code == 200 and '<script src="app.js"></script>' in page.text
    js = tc.get("/ui/app.js")
    assert js.status_code == 200 and "EventSource" in js.text
    assert tc.get("/ui/style.css").status_code == 200


def test_the_dashboard_is_served(tc: TestClient) -> None:
    r = tc.get("/dashboard", follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "/dashboard/"
    page = tc.get("/dashboard/")
    assert page.status_code == 200 and '<script src="main.js"></script>' in page.text
    # the scripts it loads, its own and the pages' shared one
    for src in re.findall(r'<script src="([^"]+)"', page.text):
        js = tc.get(urljoin("/dashboard/", src))
        assert js.status_code == 200 and "javascript" in js.headers["content-type"]
    assert tc.get("/dashboard/dashboard.css").status_code == 200
    graph = tc.get("/dashboard/fsm.json")
    assert graph.status_code == 200 and graph.json()["edges"]
