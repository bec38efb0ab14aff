"""Transition scripts on a real Redis: one that fails part-way (the error reaches the caller,
and the counters of the transitions it made before failing are written with them: counters
are summed during the call and written when it ends, returned or raised), and task
histories kept in their hashes."""

from __future__ import annotations

import asyncio
from importlib import resources

import pytest
from redis.exceptions import ResponseError

from rsjobs import Client, EnqueueRequest, StoreError
from rsjobs.client import new_task, new_task_id
from rsjobs.codec import encode_payload
from rsjobs.store.record import field
from tests.support.encodings import COMPACT_HASH

pytestmark = pytest.mark.integration


async def test_counters_follow_the_writes_of_a_failing_batch(client: Client) -> None:
    ids = [new_task_id() for _ in range(3)]
    # the second task's queue key already holds a string: its XADD fails mid-batch, after
    # the first task was fully written
    await client.redis.set(client.keys.queue("broken"), "not a stream")
    tasks = []
    for n, tid in enumerate(ids):
        req = EnqueueRequest(type="noop", queue="broken" if n == 1 else "default")
        payload = encode_payload(None, 1 << 20)
        tasks.append((client.keys.task_keys(tid, req.queue), new_task(tid, req, payload)))
    with pytest.raises(StoreError, match="WRONGTYPE"):
        await client.store.tasks.enqueue("api", tasks)
    states = [await client.redis.hget(client.keys.task(tid), field("state")) for tid in ids]
    assert states == ["PENDING", None, None]
    # the counters say exactly what the hashes say
    assert await client.redis.hget(client.keys.stats, "default:PENDING") == "1"
    assert (await client.counters())["ev:ENQUEUE"] == 1


async def test_an_illegal_transition_is_an_error_reply_naming_it(client: Client) -> None:
    # the table refuses what no script should ask; the message survives the wrapper
    tid = await client.enqueue("noop")
    src = "return finish_call(function() transition({state = 'PENDING'}, 'X', 'Y') end)"
    with pytest.raises(ResponseError, match="illegal transition PENDING -X-> Y"):
        await client.redis.eval(_with_fsm(src), 0, "api", "1000", "0", "rsjobs")
    assert (await client.get(tid)).state == "PENDING"


def _with_fsm(tail: str) -> str:
    """``tail`` run as a script's body is (see rsjobs.store.scripts.script_source)."""
    fsm = (resources.files("rsjobs") / "fsm.lua").read_text(encoding="utf-8")
    return (
        f"local CALL_KEYS, CALL_ARGV = KEYS, ARGV\n{fsm}\nbegin_call(CALL_KEYS, CALL_ARGV)\n{tail}"
    )


async def test_a_task_history_lives_in_its_hash(client: Client) -> None:
    """A task's history is entries of its hash (no stream, no scratch key): a waiting and a
    finished task with a short history each stay one small listpack hash, the finished
    one with the retention's expiry."""
    r = client.redis
    done, pending = await client.enqueue("noop"), await client.enqueue("noop")
    await client.cancel(done, "finish it")
    for tid in (done, pending):
        assert await r.object("encoding", client.keys.task(tid)) in COMPACT_HASH
        assert not await r.exists(client.keys.history(tid))
    hist = await client.history(done)
    assert [(e.event, e.to_state, e.message) for e in hist] == [
        ("ENQUEUE", "PENDING", ""),
        ("CANCEL", "CANCELLED", "finish it"),
    ]
    assert 0 < await r.pttl(client.keys.task(done)) <= client.settings.retention_ms
    assert await r.pttl(client.keys.task(pending)) == -1


async def test_a_long_history_is_read_whole_and_its_end_seen_by_a_waiter(
    client: Client,
) -> None:
    """Entries with long messages (past the listpack value limit the hash becomes a
    hashtable, still one key): every entry reads back, and a caller blocked in
    Client.wait sees the end."""
    tid = await client.enqueue("noop")
    reason = "r" * 900  # each refusal or transition entry carries it as msg
    for _ in range(5):
        await client.pause(tid, reason)
        await client.resume(tid, reason)
    waiter = asyncio.create_task(client.wait(tid, timeout_ms=10_000))
    await asyncio.sleep(0.1)  # blocked in XREAD on the events stream
    await client.cancel(tid, "end")
    assert (await waiter).state == "CANCELLED"
    hist = await client.history(tid)
    assert [e.event for e in hist] == ["ENQUEUE"] + ["PAUSE", "RESUME"] * 5 + ["CANCEL"]
    assert all(e.message == reason for e in hist[1:-1]) and hist[-1].message == "end"
    assert not await client.redis.exists(client.keys.history(tid))
