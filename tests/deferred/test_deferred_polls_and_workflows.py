"""Poll mode (no handler slot held between polls) with real worker processes, and
deferred workflow tasks: a callback completes the stage; after a regenerate, the old
version's callback is refused and recorded."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from rsjobs import Client, connect
from rsjobs.callbacks import Claims, sign
from rsjobs.settings import Settings
from rsjobs.workflows import WorkflowClient
from tests.deferred.conftest import SECRET
from tests.support.processes import wait_for_state
from tests.support.provider import Provider
from tests.support.web import ServerThread
from tests.support.workflows import Hand, character

pytestmark = pytest.mark.integration


async def test_polls_complete_tasks_without_holding_a_slot(
    client: Client, provider: Provider, workers: Any
) -> None:
    workers("-c", "1")
    slow = {"provider": provider.url, "delay_ms": 1500, "poll_ms": 100}
    polled = [await client.enqueue("gen.poll", slow) for _ in range(3)]
    for tid in polled:
        await wait_for_state(client, tid, "DEFERRED", timeout=20)
    # one slot, three tasks waiting on polls: a task submitted now still runs at once
    quick = await client.enqueue("quick", {})
    q = await client.wait(quick, timeout_ms=10_000)
    assert q.state == "SUCCEEDED"
    done = [await client.wait(t, timeout_ms=20_000) for t in polled]
    assert [i.state for i in done] == ["SUCCEEDED"] * 3
    assert q.finished_at < min(i.finished_at for i in done)
    for info in done:
        assert info.result == {"image": f"{info.external_id}.png"}
        # polled again after a "not yet" (AGAIN), until the job was done
        assert provider.jobs[info.external_id].polls >= 2
        complete = [e for e in await client.history(info.id) if e.event == "COMPLETE"]
        assert len(complete) == 1 and complete[0].extra.get("via") == "poll"


async def test_a_failed_poll_follows_the_retry_policy(
    client: Client, provider: Provider, workers: Any
) -> None:
    workers("-c", "2")
    tid = await client.enqueue(
        "gen.poll", {"provider": provider.url, "mode": "fail", "delay_ms": 10}, max_attempts=2,
        backoff_base_ms=10,
    )  # fmt: skip
    info = await client.wait(tid, timeout_ms=20_000)
    assert info.state == "FAILED" and info.attempt == 2 and info.failures == 2
    events = [(e.event, e.to_state) for e in await client.history(tid) if not e.rejected]
    assert events.count(("DEFER", "DEFERRED")) == 2
    assert ("FAIL", "SCHEDULED") in events and events[-1] == ("FAIL", "FAILED")


async def test_a_regenerate_refuses_the_old_versions_callback(
    redis_url: str, web: ServerThread
) -> None:
    settings = Settings(namespace="t")
    wf = WorkflowClient(connect(redis_url), settings, definitions=[character()])
    client = Client.from_url(redis_url, namespace="t")
    hand = Hand(wf.redis, settings)
    try:
        wf_id = await wf.start(character(), {"n": 1})
        (c,) = await hand.claim()
        reply = await hand.store.deferred.defer(c.keys, c.lease, "job-v1", "testprov", 60_000)
        assert reply.state == "DEFERRED"
        token = sign(SECRET, Claims("t", c.id, "wf", 1, int(time.time() * 1000) + 60_000))
        await wf.regenerate(wf_id, "params", reason="new prompt")
        old = await client.get(c.id)
        assert old.state == "CANCELLED"
        body = {"status": "succeeded", "result": {"ref": "mem://late"}}
        async with httpx.AsyncClient(base_url=web.url) as http:
            r = await http.post(f"/callbacks/{token}", json=body)
            assert r.status_code == 409 and r.json()["error"] == "refused"
            again = await http.post(f"/callbacks/{token}", json=body)
            assert again.status_code == 409
        refused = [e for e in await client.history(c.id) if e.rejected]
        assert len(refused) == 1 and refused[0].repeats == 1  # coalesced
        assert (await client.get(c.id)).result is None
        status = await wf.status(wf_id)
        assert status.version == 2
        assert not any(a.ref == "mem://late" for a in status.completed_assets)
        # the new version's task, deferred and called back, completes the stage
        (c2,) = await hand.claim()
        assert c2.id != c.id
        await hand.store.deferred.defer(c2.keys, c2.lease, "job-v2", "testprov", 60_000)
        token2 = sign(SECRET, Claims("t", c2.id, "wf", 1, int(time.time() * 1000) + 60_000))
        async with httpx.AsyncClient(base_url=web.url) as http:
            ok = await http.post(
                f"/callbacks/{token2}",
                json={"status": "succeeded", "result": {"ref": "mem://v2"}},
            )
        assert ok.status_code == 200 and ok.json() == {"id": c2.id, "state": "SUCCEEDED",
                                                       "changed": True}  # fmt: skip
        status = await wf.status(wf_id)
        assert status.status == "WAITING_CONFIRMATION"
        assert [a.ref for a in status.completed_assets] == ["mem://v2"]
    finally:
        await client.close()
        await wf.close()
