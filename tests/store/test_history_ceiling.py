"""On a real Redis: a task's history keeps at most ``KEPT_MAX`` entries whatever its
clients send (its first ``HEAD`` and last ``TAIL``; the ones between elided and counted),
so a waiting task paused and resumed without end stays under the documented ceiling, and
its history still says what happened."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rsjobs import Client, InvalidTransition
from rsjobs.store import history
from rsjobs.store.history import HEAD, KEPT_MAX, TAIL

pytestmark = pytest.mark.integration

#: the documented ceiling (docs/task-size.md) of a task whose payload, result and messages
#: are small, however many entries its history had, on Redis's default encoding limits
CEILING = 6 * 1024


@pytest.fixture
async def default_encoding(client: Client) -> AsyncIterator[None]:
    """Redis's default compact-hash limit (128 fields; the embedded server allows more)."""
    name = "hash-max-ziplist-entries"
    was = (await client.redis.config_get(name))[name]
    await client.redis.config_set(name, 128)
    try:
        yield
    finally:
        await client.redis.config_set(name, was)


async def _memory(client: Client, key: str) -> int:
    return int(await client.redis.memory_usage(key, samples=0) or 0)


async def test_a_thousand_pause_resume_cycles_stay_under_the_ceiling(
    client: Client, default_encoding: None
) -> None:
    tid = await client.enqueue("noop", {"x": 1}, owner="alice")
    key = client.keys.task(tid)
    sizes = []
    for i in range(1000):
        assert await client.pause(tid) == "PAUSED"
        assert await client.resume(tid) == "PENDING"
        if i in (100, 500, 999):
            sizes.append(await _memory(client, key))
        if i == 3:
            with pytest.raises(InvalidTransition):  # recorded among the first entries
                await client.resume(tid)
    # the size stops growing once the history is at its ceiling
    assert max(sizes) <= CEILING, sizes
    assert sizes[-1] <= sizes[0] + 512, sizes
    raw = await client.redis.hgetall(key)
    kept = [f for f in raw if f.startswith("h") and f[1:].isdigit()]
    assert len(kept) == KEPT_MAX
    assert not [f for f in raw if f.startswith("rep") and int(f.split(":")[1]) > HEAD]
    hist = await client.history(tid)
    # the first entries, one that stands for the elided ones, the last entries
    assert len(hist) == KEPT_MAX + 1
    assert [e.event for e in hist[:3]] == ["ENQUEUE", "PAUSE", "RESUME"]
    gap = hist[HEAD]
    total = 1 + 2 * 1000 + 1  # ENQUEUE, the cycles, the refused RESUME
    assert gap.event == "ELIDED" and gap.id == str(total - TAIL)
    elided = total - KEPT_MAX
    assert gap.extra["elided"] == str(elided) and gap.extra["first"] == str(HEAD + 1)
    counts = dict(p.split("=") for p in gap.extra["counts"].split(","))
    assert counts == {"PAUSE": str(elided // 2), "RESUME": str(elided - elided // 2)}
    # (entry 16 is a RESUME, and so is the last elided one: PENDING to PENDING)
    assert gap.from_state == hist[HEAD - 1].to_state == "PENDING"
    assert gap.to_state == "PENDING" == hist[HEAD + 1].from_state
    assert hist[HEAD + 1].event == "PAUSE"
    # every transition is accounted for: kept entries plus the elided ones' counts
    pauses = sum(1 for e in hist if e.event == "PAUSE") + int(counts["PAUSE"])
    resumes = sum(1 for e in hist if e.event == "RESUME" and not e.rejected)
    assert pauses == 1000 and resumes + int(counts["RESUME"]) == 1000
    refused = [e for e in hist if e.rejected]
    assert [(e.event, e.id) for e in refused] == [("RESUME", "10")]
    assert hist[-1].to_state == "PENDING" == (await client.get(tid)).state
    # and the task still ends as any other, and lists with its end read from its history
    assert await client.cancel(tid) == "CANCELLED"
    assert (await client.history(tid))[-1].event == "CANCEL"
    page = await client.list_tasks(state="CANCELLED")
    (listed,) = page.items
    assert listed.id == tid and listed.finished_at == (await client.history(tid))[-1].ts


async def test_refusals_in_the_elided_part_are_counted_with_their_repeats(client: Client) -> None:
    tid = await client.enqueue("noop", {"x": 1})
    # past the first entries: a RESUME refused 5 times (coalesced: one entry, 4 repeats)
    for _ in range(HEAD):
        await client.pause(tid)
        await client.resume(tid)
    for _ in range(5):
        with pytest.raises(InvalidTransition):
            await client.resume(tid)
    for _ in range(TAIL):  # push them out of the last entries
        await client.pause(tid)
        await client.resume(tid)
    hist = await client.history(tid)
    gap = next(e for e in hist if e.event == "ELIDED")
    counts = dict(p.split("=") for p in gap.extra["counts"].split(","))
    assert counts["RESUME!"] == "5"
    raw = await client.redis.hgetall(client.keys.task(tid))
    assert not [f for f in raw if f.startswith("rep")]
    # a refusal after its entry was elided is a new entry again (not a count on a gone one)
    hn = int(raw[history.COUNT])
    assert len([e for e in hist if e.rejected]) == 0 and hn > KEPT_MAX


async def test_a_history_written_before_the_ceiling_reads_whole_and_then_elides(
    client: Client,
) -> None:
    """A task whose hash holds more entries than the ceiling (written by a release before
    it, or migrated from layout 1) reads back entry by entry; entries appended after that
    elide one old entry each, and the history reads as those entries plus one ELIDED."""
    tid = await client.enqueue("noop", {"x": 1}, owner="alice")
    key = client.keys.task(tid)
    for _ in range(80):  # 1 + 160 entries, all kept below
        await client.pause(tid)
        await client.resume(tid)
    raw = await client.redis.hgetall(key)
    hn = int(raw[history.COUNT])
    assert hn == 161
    # as a release before the ceiling left it: every entry in the hash, no elided count
    entry = raw["h2"], raw["h3"]
    pipe = client.redis.pipeline(transaction=True)
    pipe.hdel(key, history.ELIDED)
    for n in range(HEAD + 1, hn + 1):
        pipe.hset(key, f"h{n}", entry[n % 2])
    await pipe.execute()
    hist = await client.history(tid)
    assert len(hist) == hn and not [e for e in hist if e.event == "ELIDED"]
    await client.pause(tid)
    await client.resume(tid)
    raw = await client.redis.hgetall(key)
    assert int(raw[history.COUNT]) == hn + 2
    hist = await client.history(tid)
    elided = [e for e in hist if e.event == "ELIDED"]
    assert len(elided) == 1 and len(hist) == hn + 2 - 2 + 1
