"""Transition scripts on a real Redis: one that fails part-way (the error reaches the caller,
and the counters of the transitions it made before failing are written with them: counters
are summed during the call and written when it ends, returned or raised), and the
compaction of task histories."""

from __future__ import annotations

import asyncio

import pytest
from redis.exceptions import ResponseError

from rsjobs import Client, EnqueueRequest, StoreError
from rsjobs.client import new_task, new_task_id
from rsjobs.codec import encode_payload

pytestmark = pytest.mark.integration


async def test_counters_follow_the_writes_of_a_failing_batch(client: Client) -> None:
    ids = [new_task_id() for _ in range(3)]
    # the second task's history key already holds a string: its XADD fails mid-batch,
    # after the first task was fully written and the second's hash was
    await client.redis.set(client.keys.history(ids[1]), "not a stream")
    req = EnqueueRequest(type="noop")
    tasks = [
        (client.keys.task_keys(tid, "default"), new_task(tid, req, encode_payload(None, 1 << 20)))
        for tid in ids
    ]
    with pytest.raises(StoreError, match="WRONGTYPE"):
        await client.store.tasks.enqueue("api", tasks)
    states = [await client.redis.hget(client.keys.task(tid), "state") for tid in ids]
    assert states[0] == "PENDING" and states[2] is None
    written = sum(1 for st in states if st == "PENDING")
    # the counters say exactly what the hashes say
    assert await client.redis.hget(client.keys.stats, "default:PENDING") == str(written)
    assert (await client.counters())["ev:ENQUEUE"] == written


async def test_an_illegal_transition_is_an_error_reply_naming_it(client: Client) -> None:
    # the table refuses what no script should ask; the message survives the wrapper
    tid = await client.enqueue("noop")
    src = "return finish_call(function() transition({state = 'PENDING'}, 'X', 'Y') end)"
    with pytest.raises(ResponseError, match="illegal transition PENDING -X-> Y"):
        await client.redis.eval(_with_fsm(src), 0, "api", "1000", "0", "rsjobs")
    assert (await client.get(tid)).state == "PENDING"


def _with_fsm(tail: str) -> str:
    from importlib import resources

    fsm = (resources.files("rsjobs") / "fsm.lua").read_text(encoding="utf-8")
    return fsm + "\n" + tail


async def test_task_histories_are_compacted(client: Client) -> None:
    """Redis preallocates a stream's first node (4 kB with the default config); a task's
    history is rewritten to what its entries use when it is created, keeping its ids and
    entries, and appends grow it only by what they add."""
    r = client.redis
    cfg = await r.config_get("stream-node-max-bytes")
    await r.config_set("stream-node-max-bytes", 4096)  # Redis' default
    try:
        await r.xadd("plain", {"ev": "X"})
        assert await r.memory_usage("plain") > 4000  # what an uncompacted stream holds
        done, pending = await client.enqueue("noop"), await client.enqueue("noop")
        assert await r.memory_usage(client.keys.history(pending)) < 1500
        await client.cancel(done, "finish it")
        used = await r.memory_usage(client.keys.history(done))
        assert used < 1500, used
        hist = await client.history(done)
        assert [(e.event, e.to_state) for e in hist] == [
            ("ENQUEUE", "PENDING"),
            ("CANCEL", "CANCELLED"),
        ]
        assert 0 < await r.pttl(client.keys.history(done)) <= client.settings.retention_ms
        assert not await r.exists(client.keys.scratch)
    finally:
        await r.config_set("stream-node-max-bytes", cfg["stream-node-max-bytes"])


async def test_a_long_history_is_compacted_again_when_the_task_ends(client: Client) -> None:
    """Entries added after ENQUEUE can open new, preallocated nodes; the end compacts them,
    and a caller blocked on the history (Client.wait) still sees the end."""
    r = client.redis
    cfg = await r.config_get("stream-node-max-bytes")
    await r.config_set("stream-node-max-bytes", 4096)  # Redis' default
    try:
        tid = await client.enqueue("noop")
        reason = "r" * 900  # each refusal or transition entry carries it as msg
        for _ in range(5):
            await client.pause(tid, reason)
            await client.resume(tid, reason)
        hkey = client.keys.history(tid)
        waiter = asyncio.create_task(client.wait(tid, timeout_ms=10_000))
        await asyncio.sleep(0.1)  # blocked in XREAD on the history
        await client.cancel(tid, "end")
        assert (await waiter).state == "CANCELLED"
        assert len(await client.history(tid)) == 12
        # compact: an exact copy of it takes as much memory as it does
        await r.copy(hkey, "probe")
        assert await r.memory_usage(hkey) <= await r.memory_usage("probe") + 64
    finally:
        await r.config_set("stream-node-max-bytes", cfg["stream-node-max-bytes"])
