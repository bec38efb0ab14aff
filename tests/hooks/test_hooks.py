"""Hooks on a real Redis, in this process: what the scripts write to the hook stream, what
the runner runs, its retries with backoff, the dead letters and their requeue."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from rsjobs import Client
from rsjobs.hooks import HookEvent, HookRunner, Hooks
from rsjobs.store.hooks import HOOK_GROUP


async def _drain(runner: HookRunner, until: float = 5.0, settle: float = 0.0) -> None:
    """Run passes until nothing is left to do (and ``settle`` s more)."""
    deadline = time.monotonic() + until
    quiet_since = None
    while time.monotonic() < deadline:
        done = await runner.step()
        backlog = await runner.store.hooks.backlog()
        if not done and backlog["stream"] == 0 and backlog["retries"] == 0:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since >= settle:
                return
        else:
            quiet_since = None


async def test_without_a_listener_the_scripts_write_no_hook_entry(client: Client) -> None:
    tid = await client.enqueue("image.make", {})
    await client.cancel(tid)
    assert not await client.redis.exists(client.keys.hooks)


async def test_a_hook_runs_once_per_matching_change_and_never_moves_the_task(
    client: Client,
) -> None:
    seen: list[HookEvent] = []
    hooks = Hooks()

    @hooks.hook(on=["CANCELLED"], types=["image.*"], name="seen")
    async def on_cancel(event: HookEvent) -> None:
        seen.append(event)

    runner = HookRunner(client.store, hooks, name="r1", block_ms=20)
    await runner.start()
    try:
        images = [await client.enqueue("image.make", {"n": n}) for n in range(5)]
        video = await client.enqueue("video.make", {})
        kept = await client.enqueue("image.make", {"kept": True})
        for tid in [*images, video]:
            await client.cancel(tid)
        await _drain(runner)
        # only the images' CANCELLED changes: not the video's, not the ENQUEUEs
        assert sorted(e.task_id for e in seen) == sorted(images)
        assert {(e.state, e.event, e.type) for e in seen} == {("CANCELLED", "CANCEL", "image.make")}
        assert all(e.task is not None and e.task.state == "CANCELLED" for e in seen)
        # the entries are deleted once handled; the untouched task is still PENDING
        assert await client.redis.xlen(client.keys.hooks) == 0
        assert (await client.get(kept)).state == "PENDING"
        # the video's change was written (someone listens for CANCELLED) and dropped
        assert await client.redis.zcard(client.keys.hooks_retry) == 0
    finally:
        await runner.close()


async def test_a_failing_hook_is_retried_with_backoff_then_dead_lettered_and_requeued(
    client: Client,
) -> None:
    attempts: list[tuple[float, int]] = []
    fixed = asyncio.Event()
    hooks = Hooks()

    @hooks.hook(on=["CANCELLED"], name="flaky", max_attempts=4, backoff_base_ms=200)
    async def flaky(event: HookEvent) -> None:
        attempts.append((time.monotonic(), event.attempt))
        if not fixed.is_set():
            raise RuntimeError("mail server down")

    runner = HookRunner(client.store, hooks, name="r1", block_ms=10)
    await runner.start()
    try:
        tid = await client.enqueue("image.make", {})
        await client.cancel(tid)
        await _drain(runner, until=10)
        assert [a for _, a in attempts] == [1, 2, 3, 4]
        # equal jitter: the n-th wait is in [base * 2**(n-1) / 2, base * 2**(n-1)]
        waits = [b - a for (a, _), (b, _) in itertools.pairwise(attempts)]
        for n, w in enumerate(waits, start=1):
            lo = 0.2 * 2 ** (n - 1) / 2
            assert w >= lo - 0.02, (n, waits)
        dead = await client.store.hooks.dead()
        assert len(dead) == 1
        d = dead[0].retry
        assert (d.listener, d.task_id, d.attempts) == ("hook:flaky", tid, 4)
        assert "mail server down" in d.error
        assert (await client.get(tid)).state == "CANCELLED"
        # requeued: it runs again (attempt 1 of a fresh series) and succeeds
        fixed.set()
        now = await client.store.hooks.now_ms()
        assert await client.store.hooks.requeue([dead[0].id], now) == 1
        await _drain(runner)
        assert attempts[-1][1] == 1 and len(attempts) == 5
        assert await client.store.hooks.dead() == []
        assert await client.redis.zcard(client.keys.hooks_retry) == 0
    finally:
        await runner.close()


async def test_entries_written_before_the_first_runner_started_are_delivered(
    client: Client,
) -> None:
    seen: list[str] = []
    hooks = Hooks()

    @hooks.hook(on=["CANCELLED"], name="late")
    async def late(event: HookEvent) -> None:
        seen.append(event.task_id)

    # the listener is known (an earlier runner said so) but no group exists yet
    await client.store.hooks.listen("hook:late", ["CANCELLED"])
    tid = await client.enqueue("x", {})
    await client.cancel(tid)
    runner = HookRunner(client.store, hooks, name="r1", block_ms=10)
    await runner.start()
    try:
        await _drain(runner)
        assert seen == [tid]
    finally:
        await runner.close()


async def test_an_entry_a_dead_runner_held_is_taken_over(client: Client) -> None:
    seen: list[str] = []
    hooks = Hooks()

    @hooks.hook(on=["CANCELLED"], name="takeover")
    async def takeover(event: HookEvent) -> None:
        seen.append(event.task_id)

    r1 = HookRunner(client.store, hooks, name="r1", block_ms=10, claim_idle_ms=3000)
    await r1.start()
    tid = await client.enqueue("x", {})
    await client.cancel(tid)
    # r1 reads the entry and dies before running it
    held = await client.store.hooks.read("r1", 10, 10)
    assert [e.task_id for e in held] == [tid]
    r2 = HookRunner(client.store, hooks, name="r2", block_ms=10, claim_idle_ms=3000)
    try:
        await r2.step()
        assert seen == []  # not yet idle long enough: r1 may still be at it
        # time passes for r1's hold: the entry's idle time set past claim_idle_ms, as 3.1 s
        # of silence would leave it (XCLAIM IDLE, to r1 itself: nothing else changes)
        await client.redis.xclaim(
            client.keys.hooks, HOOK_GROUP, "r1", 0, [held[0].entry], idle=3100
        )
        await _drain(r2)
        assert seen == [tid]
    finally:
        await r1.close()
        await r2.close()


@pytest.mark.parametrize("bad", [[], ["DONE"], ["*", "NOPE"]])
def test_a_hook_naming_no_or_an_unknown_state_is_refused(bad: list[str]) -> None:
    from rsjobs.errors import ConfigError

    with pytest.raises(ConfigError):
        Hooks().hook(on=bad)
