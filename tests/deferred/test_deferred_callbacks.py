"""Deferred completion end to end: real Redis, real worker processes, the web app's
callback route and the test provider. Slots are freed while tasks wait; duplicate
callbacks change nothing; late and forged ones are refused (forged: 401, Redis
unchanged); the client completes by external id; a regenerate's old callback is refused."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis as sync_redis

from rsjobs import Client, InvalidTransition, TaskNotFound
from rsjobs.callbacks import Claims, body_signature, sign
from tests.deferred.conftest import NS, SECRET
from tests.support.processes import stop_process, wait_for_state
from tests.support.provider import Provider
from tests.support.reaper import reaper_loop, sweeps_past, wait_history
from tests.support.waits import on_events
from tests.support.web import ServerThread

pytestmark = pytest.mark.integration


def _snapshot(url: str) -> dict[str, Any]:
    """Every key of the server and its content (what a refused request must not touch)."""
    r = sync_redis.Redis.from_url(url, decode_responses=True)
    out: dict[str, Any] = {}
    try:
        for key in sorted(r.keys("*")):
            kind = r.type(key)
            if kind == "hash":
                out[key] = r.hgetall(key)
            elif kind == "stream":
                out[key] = r.xrange(key)
            elif kind == "zset":
                out[key] = r.zrange(key, 0, -1, withscores=True)
            elif kind == "string":
                out[key] = r.get(key)
            elif kind == "set":
                out[key] = sorted(r.smembers(key))
            else:
                out[key] = kind
    finally:
        r.close()
    return out


async def _all_done(client: Client, ids: list[str], timeout: float) -> list[Any]:
    return [await client.wait(t, timeout_ms=int(timeout * 1000)) for t in ids]


async def test_forty_deferred_tasks_wait_at_once_on_four_slots(
    client: Client, provider: Provider, workers: Any
) -> None:
    provider.hold()
    workers("-c", "4")
    payload = {"provider": provider.url, "delay_ms": 0}
    ids = [await client.enqueue("gen.callback", payload) for _ in range(40)]

    # every one is DEFERRED at once: four slots could not hold forty running handlers
    async def all_deferred() -> bool:
        infos = await client.get_many(ids)
        return sum(1 for i in infos if i is not None and i.state == "DEFERRED") == 40

    await on_events(client.store.events, all_deferred, 60, "40 DEFERRED at once")
    provider.release()
    done = await _all_done(client, ids, 60)
    assert [i.state for i in done] == ["SUCCEEDED"] * 40
    assert all(i.result == {"image": f"{i.external_id}.png"} for i in done)
    assert all(i.provider == "testprov" for i in done)
    # (a second attempt only after a failed first one: the handler's call to the provider
    # failed, e.g. timed out on a loaded machine; never a retry without a recorded cause)
    for i in done:
        if i.attempt > 1:
            events = [(e.event, e.to_state, e.message) for e in await client.history(i.id)]
            assert any(e[0] in ("FAIL", "RECLAIM", "TIMEOUT") for e in events), events


async def test_duplicate_callbacks_change_nothing(
    client: Client, provider: Provider, workers: Any, redis_url: str
) -> None:
    workers("-c", "2")
    tid = await client.enqueue("gen.callback", {"provider": provider.url, "mode": "duplicate"})
    info = await client.wait(tid, timeout_ms=20_000)
    assert info.state == "SUCCEEDED"
    await asyncio.to_thread(provider.wait_sent, info.external_id, 3)
    # each of the three got 200; the first ended the wait, the others wrote nothing
    assert provider.sent(info.external_id) == [200, 200, 200]
    history = await client.history(tid)
    assert [e.event for e in history if e.event == "COMPLETE"] == ["COMPLETE"]
    assert not any(e.rejected for e in history)
    before = _snapshot(redis_url)
    assert await client.complete_external(info.external_id, {"image": f"{info.external_id}.png"},
                                          provider="testprov") == "SUCCEEDED"  # fmt: skip
    assert _snapshot(redis_url) == before


async def test_a_callback_after_the_longest_wait_is_refused_and_recorded(
    client: Client, provider: Provider, workers: Any, reaper_proc: Any
) -> None:
    provider.hold()  # the provider calls back once the wait is over: late
    workers("-c", "2")
    tid = await client.enqueue(
        "gen.callback", {"provider": provider.url, "max_wait_ms": 300}, max_attempts=1
    )
    info = await client.wait(tid, timeout_ms=20_000)
    assert info.state == "TIMED_OUT" and info.error_type == "DeferTimeout"
    provider.release()
    assert await asyncio.to_thread(provider.wait_sent, info.external_id) == [409]
    after = await client.get(tid)
    assert after.state == "TIMED_OUT" and after.result is None
    refused = [e for e in await client.history(tid) if e.rejected]
    assert len(refused) == 1 and refused[0].event == "COMPLETE"
    assert "task is TIMED_OUT" in refused[0].message and refused[0].source == "callback"


async def test_a_forged_callback_is_401_and_writes_nothing(
    client: Client, provider: Provider, workers: Any, web: ServerThread, redis_url: str
) -> None:
    provider.hold()
    workers("-c", "2")
    tid = await client.enqueue("gen.callback", {"provider": provider.url, "mode": "forge"})
    info = await wait_for_state(client, tid, "DEFERRED", timeout=20)
    await asyncio.sleep(0.3)  # the worker's writes are done (stats, registration aside)
    r = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    stats = r.hgetall(f"rsjobs:{{{NS}}}:stats")
    task_before = r.hgetall(f"rsjobs:{{{NS}}}:task:{tid}")
    keys_before = sorted(k for k in r.keys("*") if not k.endswith(":workers"))
    provider.release()
    assert await asyncio.to_thread(provider.wait_sent, info.external_id) == [401]
    # more forgeries, straight at the server: a token signed with another secret, a
    # token naming another attempt unsigned, a body signature under another secret
    other = sign("another-secret-entirely-xyz", Claims(NS, tid, "default", 1, 2**41))
    valid = sign(SECRET, Claims(NS, tid, "default", 1, 2**41))
    body = b'{"status": "succeeded", "result": 1}'
    async with httpx.AsyncClient(base_url=web.url) as http:
        assert (
            await http.post(
                f"/callbacks/{other}", content=body, headers={"content-type": "application/json"}
            )
        ).status_code == 401
        tampered = valid[: valid.index(".")] + "x" + valid[valid.index(".") :]
        assert (await http.post(f"/callbacks/{tampered}", content=body)).status_code == 401
        assert (await http.post("/callbacks/garbage", content=body)).status_code == 401
        ext = f"/callbacks/external/testprov/{info.external_id}"
        bad = {"x-rsjobs-signature": body_signature(
            "another-secret-entirely-xyz", "testprov", info.external_id, body)}  # fmt: skip
        assert (await http.post(ext, content=body, headers=bad)).status_code == 401
        assert (await http.post(ext, content=body)).status_code == 401
    assert r.hgetall(f"rsjobs:{{{NS}}}:stats") == stats
    assert r.hgetall(f"rsjobs:{{{NS}}}:task:{tid}") == task_before
    assert sorted(k for k in r.keys("*") if not k.endswith(":workers")) == keys_before
    r.close()
    assert (await client.get(tid)).state == "DEFERRED"
    # the real provider's result, by external id with a valid body signature, completes it
    async with httpx.AsyncClient(base_url=web.url) as http:
        ok = await http.post(ext, content=body, headers={"x-rsjobs-signature": body_signature(
            SECRET, "testprov", info.external_id, body)})  # fmt: skip
    assert ok.status_code == 200 and ok.json()["state"] == "SUCCEEDED"


async def test_the_provider_calls_back_by_external_id_signed_for_its_job(
    client: Client, provider: Provider, workers: Any, redis_url: str
) -> None:
    """The provider adapter's way: ``X-Rsjobs-Signature: t=...,v1=...`` over the provider,
    the job's id and the body. A body signed for another job, or signed too long ago, is a
    401 and writes nothing; the job's own signed result ends its task."""
    provider.hold()
    workers("-c", "3")
    ids = {
        mode: await client.enqueue("gen.callback", {"provider": provider.url, "mode": mode})
        for mode in ("misdirect", "stale", "external")
    }
    infos = {m: await wait_for_state(client, t, "DEFERRED", timeout=20) for m, t in ids.items()}
    await asyncio.sleep(0.3)  # the worker's writes are done (stats, registration aside)
    r = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    refused = (infos["misdirect"].id, infos["stale"].id)
    before = {t: r.hgetall(f"rsjobs:{{{NS}}}:task:{t}") for t in refused}
    provider.release()
    info = await client.wait(ids["external"], timeout_ms=20_000)
    assert info.state == "SUCCEEDED" and info.result == {"image": f"{info.external_id}.png"}
    assert await asyncio.to_thread(provider.wait_sent, info.external_id) == [200]
    for mode in ("misdirect", "stale"):
        assert await asyncio.to_thread(provider.wait_sent, infos[mode].external_id) == [401]
    assert {t: r.hgetall(f"rsjobs:{{{NS}}}:task:{t}") for t in refused} == before
    r.close()
    for t in refused:
        assert (await client.get(t)).state == "DEFERRED"


async def test_the_client_completes_and_fails_by_external_id(
    client: Client, provider: Provider, workers: Any
) -> None:
    workers("-c", "2")
    a = await client.enqueue("gen.callback", {"provider": provider.url, "mode": "lose"})
    b = await client.enqueue(
        "gen.callback", {"provider": provider.url, "mode": "lose"}, max_attempts=1
    )
    ia = await wait_for_state(client, a, "DEFERRED", timeout=20)
    await wait_for_state(client, b, "DEFERRED", timeout=20)
    assert (
        await client.complete_external(ia.external_id, {"v": 1}, provider="testprov") == "SUCCEEDED"
    )
    assert (await client.get(a)).result == {"v": 1}
    assert await client.fail_external(b, "provider lost it", retryable=False) == "FAILED"
    with pytest.raises(InvalidTransition):
        await client.complete_external(b, {"v": 2})
    with pytest.raises(TaskNotFound):
        await client.complete_external("no-such-job", provider="testprov")


async def test_the_reaper_never_takes_a_deferred_task_of_a_killed_worker(
    client: Client, provider: Provider, workers: Any, redis_url: str, tmp_path: Path
) -> None:
    """SIGKILL the worker that deferred a task and runs another: within a few leases the
    reaper takes the RUNNING one back (RECLAIM), while the DEFERRED one stays as it is (no
    entry, no lease: nothing to reclaim); the provider's callback then completes it with no
    worker alive."""
    provider.hold()
    worker = workers("-c", "2", "--lease-ms", "500")
    tid = await client.enqueue("gen.callback", {"provider": provider.url})
    await wait_for_state(client, tid, "DEFERRED", timeout=20)
    running = await client.enqueue("slow", {"s": 60})
    await wait_for_state(client, running, "RUNNING", timeout=20)
    stop_process(worker)  # SIGKILL
    async with reaper_loop(redis_url, NS, interval_ms=100, lease_ms=500) as reaper:
        await wait_history(client, running, lambda e: e.event == "RECLAIM", 20)
        # two more leases of the reaper's sweeps
        await sweeps_past(reaper, await client.store.reaper.now_ms() + 1000)
        info = await client.get(tid)
        assert info.state == "DEFERRED" and info.attempt == 1
        assert not any(e.event == "RECLAIM" for e in await client.history(tid))
        provider.release()
        done = await client.wait(tid, timeout_ms=20_000)
        assert done.state == "SUCCEEDED" and done.attempt == 1
