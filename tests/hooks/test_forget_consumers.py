"""The hook stream's group does not grow with every runner that ever ran: a runner removes
the consumers of runners that are gone and hold nothing (``hooks_forget.lua``: the check
that a consumer holds nothing and its removal are one step), and never one that holds a
delivery."""

from __future__ import annotations

import asyncio

import pytest
import redis

from rsjobs import Client
from rsjobs.hooks import HookRunner, Hooks
from rsjobs.store import layout
from rsjobs.store.hooks import HOOK_GROUP
from tests.support.lua import LuaHarness


def _group(h: LuaHarness) -> None:
    h.r.xgroup_create(h.k.hooks, HOOK_GROUP, id="0", mkstream=True)


def _consumers(h: LuaHarness) -> set[str]:
    return {c["name"] for c in h.r.xinfo_consumers(h.k.hooks, HOOK_GROUP)}


def test_a_consumer_that_holds_nothing_is_removed_and_one_that_holds_is_kept() -> None:
    h = LuaHarness()
    _group(h)
    h.r.xadd(h.k.hooks, {"id": "t1", "s": "SUCCEEDED"})
    h.r.xreadgroup(HOOK_GROUP, "holder", {h.k.hooks: ">"}, count=1)  # holds the entry
    h.r.xreadgroup(HOOK_GROUP, "empty", {h.k.hooks: ">"}, count=1)  # holds nothing
    call = layout.hooks_forget(h.c, h.k, "hooks", HOOK_GROUP, ["holder", "empty", "nobody"])
    assert h.run(call) == [0, 1, 1]
    assert _consumers(h) == {"holder"}
    assert h.r.xpending(h.k.hooks, HOOK_GROUP)["pending"] == 1  # its delivery is kept


@pytest.mark.parametrize("bad", ["group", "name", "no group"])
def test_malformed_calls_write_nothing(bad: str) -> None:
    h = LuaHarness()
    if bad != "no group":
        _group(h)
        h.r.xreadgroup(HOOK_GROUP, "empty", {h.k.hooks: ">"}, count=1)
    group, names = {"group": ("", ["empty"]), "name": (HOOK_GROUP, ["empty", ""]),
                    "no group": (HOOK_GROUP, ["empty"])}[bad]  # fmt: skip
    before = h.snapshot()
    consumers = _consumers(h) if bad != "no group" else set()
    with pytest.raises(redis.ResponseError, match="rsjobs: invalid"):
        h.run(layout.hooks_forget(h.c, h.k, "hooks", group, names))
    assert h.snapshot() == before
    if bad != "no group":
        assert _consumers(h) == consumers


@pytest.mark.integration
async def test_a_runner_removes_the_consumers_of_gone_runners(client: Client) -> None:
    hooks = Hooks()
    first = HookRunner(client.store, hooks, name="gone-1", block_ms=1, claim_idle_ms=100)
    await first.start()
    await first.step()  # it reads as a consumer of its own, then dies
    await first.close()
    r = client.redis
    k = client.keys
    await r.xadd(k.hooks, {"id": "t1", "q": "default", "s": "SUCCEEDED", "e": "COMPLETE",
                           "hid": "2"})  # fmt: skip
    await r.xreadgroup(HOOK_GROUP, "gone-2", {k.hooks: ">"}, count=1)  # dies holding one
    await asyncio.sleep(0.15)
    live = HookRunner(client.store, hooks, name="live", block_ms=1, claim_idle_ms=100)
    await live.start()
    try:
        await live.step()
    finally:
        await live.close()
    names = {c["name"] for c in await r.xinfo_consumers(k.hooks, HOOK_GROUP)}
    # gone-2's delivery was taken over first (XAUTOCLAIM), then it held nothing either
    assert names == {"live"} and live.forgotten == 2
    assert await r.xlen(k.hooks) == 0  # the delivery was handled by the live runner
