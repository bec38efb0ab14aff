"""The autoscaling signal (rsjobs/scaling.py): its arithmetic (no Redis), then a queue's
figure rising with its backlog and falling to 0 as it drains, on the API and /metrics."""

from __future__ import annotations

import asyncio
import json

import pytest

from rsjobs import Client, Settings, Worker
from rsjobs.scaling import per_worker, scale_signal, serving, slots_wanted, workers_wanted
from tests.support.apps import tasks
from tests.support.waits import poll_until
from tests.support.web import ROOT, TestClient, make_app


def test_the_slots_and_workers_a_backlog_wants() -> None:
    assert slots_wanted(0, 0, 0, 0) == 0  # nothing: scale to zero
    assert slots_wanted(0, 3, 1000, 0) == 3  # running tasks keep their slots
    assert slots_wanted(10, 2, 0, 5000) == 12  # no run time known: a slot each
    assert slots_wanted(10, 2, 1000, 0) == 12  # no target wait: a slot each
    # W = 4 s, D = 1 s: a slot starts 5 of them within W (one now, one a second after)
    assert slots_wanted(10, 2, 1000, 4000) == 2 + 2
    assert slots_wanted(11, 0, 1000, 4000) == 3
    assert workers_wanted(12, 4) == 3 and workers_wanted(13, 4) == 4
    assert workers_wanted(0, 4) == 0 and workers_wanted(5, 0) == 5
    regs = [json.dumps({"queues": ["gpu", "cpu"], "concurrency": 4}),
            json.dumps({"queues": ["gpu"], "concurrency": 2}), "not json", "[1]",
            json.dumps({"queues": "gpu", "concurrency": 9}),
            json.dumps({"queues": ["gpu", {"x": 1}], "concurrency": "many"})]  # fmt: skip
    served = serving(regs)
    assert served["gpu"] == (2, 6)
    assert served["cpu"] == (1, 4)
    assert served.get("video", (0, 0)) == (0, 0)
    assert per_worker(*served["gpu"]) == 3 and per_worker(0, 0) == 1


@pytest.mark.integration
async def test_the_figure_rises_with_the_backlog_and_falls_to_zero_as_it_drains(
    redis_url: str,
) -> None:
    ns = "scale"
    client = Client.from_url(redis_url, namespace=ns)
    ids = [await client.enqueue("noop", {"n": i}, queue="render") for i in range(9)]
    s = await scale_signal(client.store, "render", slots_per_worker=2)
    assert (s.pending, s.running, s.workers, s.wanted_slots, s.wanted_workers) == (9, 0, 0, 9, 5)
    assert s.oldest_wait_ms >= 0
    with TestClient(make_app(redis_url, namespace=ns)) as tc:
        body = tc.get("/queues/render/scale?slots_per_worker=3", headers=ROOT).json()
        assert body["wanted_workers"] == 3 and body["pending"] == 9
        assert tc.get("/queues/nope/scale", headers=ROOT).status_code == 404
        assert tc.get("/queues/render/scale?target_wait_ms=-1", headers=ROOT).status_code == 400
        assert tc.get("/queues/render/scale?slots_per_worker=0", headers=ROOT).status_code == 400
        assert tc.get("/queues/render/scale").status_code == 401  # admin only
        metrics = tc.get("/metrics", headers=ROOT).text
        assert 'rsjobs_queue_workers_wanted{queue="render"} 9.0' in metrics
    more = [await client.enqueue("noop", {"n": i}, queue="render") for i in range(3)]
    assert (await scale_signal(client.store, "render", slots_per_worker=2)).wanted_workers == 6
    w = Worker(tasks, url=redis_url, settings=Settings(namespace=ns), queues=["render"],
               concurrency=4, handle_signals=False)  # fmt: skip
    run = asyncio.create_task(w.run())
    try:
        for tid in ids + more:
            assert (await client.wait(tid, timeout_ms=15_000)).state == "SUCCEEDED"

        async def drained() -> bool:
            s = await scale_signal(client.store, "render")
            return s.wanted_workers == 0 and s.workers == 1 and s.slots == 4

        await poll_until(drained, 10, "the signal at 0 with the worker registered")
        s = await scale_signal(client.store, "render", target_wait_ms=1000)
        assert s.slots_per_worker == 4 and s.pending == 0 and s.running == 0
    finally:
        w.stop()
        await asyncio.wait_for(run, 20)
        await w.redis.aclose()
        await client.close()
