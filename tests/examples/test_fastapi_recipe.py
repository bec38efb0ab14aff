"""examples/fastapi_app.py: the FastAPI recipe against a real Redis and a real worker
process: the host app's users become task owners, who see only their own tasks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")

from examples.fastapi_app import create_app
from tests.support.processes import spawn_worker, stop_process
from tests.support.waits import poll_until

pytestmark = pytest.mark.integration

ALICE = {"Authorization": "Bearer alice-token"}
BOB = {"Authorization": "Bearer bob-token"}


@pytest.fixture
async def http(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(redis_url)
    async with (
        app.router.lifespan_context(app),  # the app's own start and stop
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c,
    ):
        yield c


async def call(http: httpx.AsyncClient, method: str, path: str, **kw: Any) -> Any:
    r = await http.request(method, path, **kw)
    return r.status_code, r.json()


async def test_users_submit_follow_and_cancel_their_own_jobs(
    http: httpx.AsyncClient, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RSJOBS_DEMO_OUT", str(tmp_path))  # where the worker writes images
    body = {"type": "image.generate", "payload": {"prompt": "a fox", "steps": 3, "step_s": 0.05}}
    code, job = await call(http, "POST", "/jobs", json=body, headers=ALICE)
    assert code == 202, job
    assert job["state"] == "PENDING" and job["type"] == "image.generate"
    tid = job["id"]

    # another user cannot see, follow or cancel it: the answer of a missing job
    for method, path in (("GET", f"/jobs/{tid}"), ("GET", f"/jobs/{tid}/history"),
                         ("POST", f"/jobs/{tid}/cancel")):  # fmt: skip
        other = await call(http, method, path, headers=BOB)
        missing = await call(http, method, path.replace(tid, "0" * 32), headers=ALICE)
        assert other == missing and other[0] == 404
    assert (await http.get(f"/jobs/{tid}")).status_code == 401  # no token at all

    worker = spawn_worker(redis_url, "default", "-q", "gpu", app="examples.demo_tasks:tasks")
    try:

        async def succeeded() -> dict[str, Any] | None:
            doc = (await call(http, "GET", f"/jobs/{tid}", headers=ALICE))[1]
            return doc if doc["state"] == "SUCCEEDED" else None

        doc = await poll_until(succeeded, 30, "the job SUCCEEDED")
        assert doc["progress"] == 100 and doc["result"]["prompt"] == "a fox"
        assert Path(doc["result"]["image"]).parent == tmp_path
        _, history = await call(http, "GET", f"/jobs/{tid}/history", headers=ALICE)
        events = [e["event"] for e in history]
        assert events[:2] == ["ENQUEUE", "START"] and events[-1] == "COMPLETE"

        # Bob cancels his long job; Alice's finished one stays finished
        slow = {"type": "image.generate", "payload": {"steps": 200, "step_s": 0.05}}
        _, long_job = await call(http, "POST", "/jobs", json=slow, headers=BOB)
        _, cancelled = await call(http, "POST", f"/jobs/{long_job['id']}/cancel", headers=BOB)
        assert cancelled["state"] == "CANCELLED"
        _, again = await call(http, "POST", f"/jobs/{tid}/cancel", headers=ALICE)
        assert again["state"] == "SUCCEEDED"
    finally:
        stop_process(worker)


async def test_idempotency_keys_are_per_user_and_bad_input_is_refused(
    http: httpx.AsyncClient,
) -> None:
    body = {"type": "image.generate", "payload": {}, "idempotency_key": "render-42"}
    a1 = (await call(http, "POST", "/jobs", json=body, headers=ALICE))[1]["id"]
    a2 = (await call(http, "POST", "/jobs", json=body, headers=ALICE))[1]["id"]
    b1 = (await call(http, "POST", "/jobs", json=body, headers=BOB))[1]["id"]
    assert a1 == a2 and b1 != a1  # one user's key never answers another's task
    other = {**body, "payload": {"prompt": "else"}}
    code, doc = await call(http, "POST", "/jobs", json=other, headers=ALICE)
    assert code == 422 and "different job" in doc["detail"]

    code, doc = await call(http, "POST", "/jobs", json={"type": "rm -rf"}, headers=ALICE)
    assert code == 400 and "unknown job type" in doc["detail"]
    big = {"type": "image.generate", "payload": "x" * 2_000_000}
    code, doc = await call(http, "POST", "/jobs", json=big, headers=ALICE)
    assert code == 400 and "payload" in doc["detail"]
    assert (await http.get("/jobs/not-an-id", headers=ALICE)).status_code == 404
