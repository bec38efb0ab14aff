"""``wf_read.lua``, the workflow reads that need one consistent view (the status
document's hash, slots and assets; a retry's slots and open set): on fakeredis its replies,
its layout and view checks and that it writes nothing; through the store, the same values
as the keys hold, read-only (FCALL_RO) on a server that has functions (Redis >= 7.0,
fakeredis) and a plain EVALSHA on one that has not (6.2)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest
from redis.exceptions import ResponseError

from rsjobs import StoreError
from rsjobs.settings import Settings
from rsjobs.store import layout
from rsjobs.store.layout import Packed, WfReadArgs
from rsjobs.store.workflows import Workflows
from rsjobs.workflows import WorkflowClient
from tests.support.lua import LuaHarness
from tests.support.workflows import Hand, character, redis_dump

WID = "w" * 32


def read(h: LuaHarness, view: str, wf_id: str = WID) -> Packed:
    return layout.wf_read(h.c, "api", 10, h.k.workflow_keys(wf_id), WfReadArgs(view))


def dump(h: LuaHarness) -> dict[str, Any]:
    return {k: h.r.dump(k) for k in sorted(h.r.keys("*"))}


def pairs(flat: list[str]) -> dict[str, str]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def full(h: LuaHarness) -> None:
    """A workflow's four keys as the workflow scripts leave them (their content only
    matters here: the script reads them as they are)."""
    k = h.k
    h.r.hset(k.workflow(WID), mapping={"id": WID, "status": "RUNNING", "stage": "1"})
    h.r.hset(k.workflow_tasks(WID), mapping={"1:0:a": "t1", "1:1:x": "t2", "1:1:y": "t3"})
    h.r.hset(k.workflow_assets(WID), mapping={"1:0:a": '{"ref":"mem://a"}'})
    h.r.sadd(k.workflow_open(WID), "t2", "t3")


# -- the script on fakeredis -----------------------------------------------------------------


@pytest.mark.parametrize("view", ["state", "open"])
def test_a_missing_workflow_reads_empty(view: str) -> None:
    h = LuaHarness()
    assert h.run(read(h, view)) == [[], [], [], []]
    assert h.r.keys("*") == []


def test_the_state_view_reads_the_hash_slots_and_assets() -> None:
    h = LuaHarness()
    full(h)
    wf, slots, assets, open_ids = h.run(read(h, "state"))
    assert pairs(wf) == {"id": WID, "status": "RUNNING", "stage": "1"}
    assert pairs(slots) == {"1:0:a": "t1", "1:1:x": "t2", "1:1:y": "t3"}
    assert pairs(assets) == {"1:0:a": '{"ref":"mem://a"}'}
    assert open_ids == []


def test_the_open_view_reads_the_slots_and_the_open_set() -> None:
    h = LuaHarness()
    full(h)
    wf, slots, assets, open_ids = h.run(read(h, "open"))
    assert wf == [] and assets == []
    assert pairs(slots) == {"1:0:a": "t1", "1:1:x": "t2", "1:1:y": "t3"}
    assert sorted(open_ids) == ["t2", "t3"]


def test_a_call_that_is_not_its_layout_or_names_no_view_is_refused() -> None:
    h = LuaHarness()
    full(h)
    good = read(h, "state")
    for bad in (
        Packed(good.script, good.keys, good.argv[:-1]),  # no view
        Packed(good.script, good.keys, [*good.argv, "more"]),
        Packed(good.script, good.keys[:-1], good.argv),  # a workflow key short
        Packed(good.script, [*good.keys, "extra"], good.argv),
    ):
        with pytest.raises(ResponseError, match="invalid layout"):
            h.run(bad)
    for view in ("", "all", "STATE"):
        with pytest.raises(ResponseError, match="invalid view"):
            h.run(read(h, view))


def test_it_writes_nothing() -> None:
    h = LuaHarness()
    full(h)
    before = dump(h)
    for view in ("state", "open"):
        h.run(read(h, view))
        h.run(read(h, view, "x" * 32))  # no such workflow
        with pytest.raises(ResponseError):
            h.run(read(h, view + "?"))
    h.r.set(h.k.workflow_tasks("y" * 32), "not a hash")
    with_string = dump(h)
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        h.run(read(h, "open", "y" * 32))
    assert dump(h) == with_string
    h.r.delete(h.k.workflow_tasks("y" * 32))
    assert dump(h) == before


# -- through the store ----------------------------------------------------------------------


async def direct(c: WorkflowClient, wf_id: str) -> tuple[Any, ...]:
    """The four keys read one by one (the test does nothing meanwhile)."""
    r, k = c.redis, c.keys

    def t(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    def m(h: dict[Any, Any]) -> dict[str, str]:
        return {t(f): t(v) for f, v in h.items()}

    return (
        m(await r.hgetall(k.workflow(wf_id))),
        m(await r.hgetall(k.workflow_tasks(wf_id))),
        m(await r.hgetall(k.workflow_assets(wf_id))),
        {t(i) for i in await r.smembers(k.workflow_open(wf_id))},
    )


async def check_reads(c: WorkflowClient, hand: Hand) -> Workflows:
    """A workflow with a finished task, an asset and open tasks: state() and
    slots_and_open() answer what its keys hold, None for no such workflow, and write
    nothing."""
    wid = await c.start("character", {"name": "ada"})
    (task,) = await hand.claim()
    assert await hand.complete(task) == 1
    await c.confirm(wid)
    assert len(await hand.claim()) >= 1  # the next stage's tasks exist and are open
    wf = (await c.store.at(wid)).workflows
    h, slots, assets, open_ids = await direct(c, wid)
    assert slots and assets and open_ids
    before = await redis_dump(c.redis)
    state = await wf.state(wid)
    assert state is not None
    assert state.record.id == wid and state.record.status == h["status"]
    assert (state.slots, state.assets) == (slots, assets)
    assert await wf.slots_and_open(wid) == (slots, open_ids)
    assert await wf.state("n" * 32) is None
    assert await wf.slots_and_open("n" * 32) == ({}, set())
    assert await redis_dump(c.redis) == before
    return wf


@pytest.fixture
async def fake() -> AsyncIterator[tuple[WorkflowClient, Hand]]:
    r = fakeredis.aioredis.FakeRedis(decode_responses=True)
    st = Settings(namespace="t", retention_ms=0)
    c = WorkflowClient(r, st, definitions=[character()])
    yield c, Hand(r, st)
    await r.aclose()


async def test_the_store_reads_on_fakeredis(fake: tuple[WorkflowClient, Hand]) -> None:
    wf = await check_reads(*fake)
    # fakeredis has functions: the library's wf_read, flagged no-writes, by FCALL_RO
    assert wf.scripts.functions is True


async def test_the_store_reads_read_only_where_the_server_can(wf: WorkflowClient) -> None:
    """On the session's Redis: FCALL_RO on >= 7.0 (which refuses any write: the call
    succeeding shows the script, fsm.lua's begin_call and finish_call included, writes
    nothing), EVALSHA on 6.2; a script error is not taken for a missing command."""
    hand = Hand(wf.redis, wf.settings)
    store_wf = await check_reads(wf, hand)
    info = await wf.redis.info("server")
    major = int(str(info["redis_version"]).split(".")[0])
    assert store_wf.scripts.functions is (major >= 7)
    broken = "b" * 32
    await wf.redis.set(wf.keys.workflow_tasks(broken), "not a hash")
    with pytest.raises(StoreError, match="WRONGTYPE"):
        await (await wf.store.at(broken)).workflows.slots_and_open(broken)
    assert store_wf.scripts.functions is (major >= 7)
