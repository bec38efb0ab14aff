"""Cost accounting over a whole workflow, and the attempts it counts as waste.

The acceptance run: the character example (``examples/character``: its handlers charge GPU
seconds and their price) played through one regenerate of the images and one emotion video
that fails for good and is retried. The totals per task, per stage, of the workflow, of
its owner, per type and per queue add up exactly; the waste is exactly the failed attempt's
amounts and the superseded images' succeeded attempts. Then: a SIGKILLed worker's attempt
counts as ``reclaimed``; a regenerate supersedes each task once; bad charges raise
:class:`rsjobs.ChargeError` and write nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from examples.character.__main__ import Screen, background, play
from examples.character.pipeline import character_pipeline
from rsjobs import ChargeError, Client, Settings, Worker, connect
from rsjobs.costs import BUILTIN_UNITS, CATEGORIES, SCALE, Charges
from rsjobs.store.layout import Ending
from rsjobs.workflows import WorkflowClient
from tests.support.apps import tasks
from tests.support.processes import spawn_worker, stop_process, wait_for_state
from tests.support.reaper import reaper_loop
from tests.support.workflows import Hand, redis_dump, ref_of

pytestmark = pytest.mark.integration

Amounts = Mapping[str, int | float]


def micro(amounts: Amounts) -> dict[str, int]:
    """Shown amounts as exact integers (charges in millionths), zeros left out."""
    out = {u: int(v) if u in BUILTIN_UNITS else round(v * SCALE) for u, v in amounts.items()}
    return {u: v for u, v in out.items() if v}


def added(rows: Iterable[Amounts]) -> dict[str, int]:
    total: dict[str, int] = {}
    for row in rows:
        for u, v in micro(row).items():
            total[u] = total.get(u, 0) + v
    return {u: v for u, v in total.items() if v}


def by_category(categories: Mapping[str, Amounts]) -> dict[str, dict[str, int]]:
    return {c: m for c in CATEGORIES if (m := micro(categories.get(c, {})))}


@pytest.fixture
async def character_run(redis_url: str, tmp_path: Path) -> AsyncIterator[tuple[Client, str, str]]:
    """The character example played to PUBLISHED in a namespace of its own: one
    regenerate of the images, the "angry" emotion failing for good once, then retried."""
    import examples.character.generators as gen

    gen.OUT = tmp_path  # (its files go to the test's directory)
    settings = Settings(namespace=f"costs-{uuid.uuid4().hex[:6]}")
    definition = character_pipeline(fail_rate=0.0, flaky=("angry",), speed=0.1)
    wf = WorkflowClient(connect(redis_url), settings, definitions=[definition], source="user")
    args = argparse.Namespace(no_regenerate=False, timeout=60.0, verbose=False)
    try:
        async with background(redis_url, settings, interval_ms=100):
            wid = await wf.start("character", {"name": "Mei"}, owner="mei-studio")
            assert await play(wf, wid, args, Screen()) == "PUBLISHED"
        yield Client(wf.redis, settings), wid, "mei-studio"
    finally:
        await wf.close()


async def test_the_character_workflow_costs_add_up_with_the_waste_shown(
    character_run: tuple[Client, str, str],
) -> None:
    client, wid, owner = character_run
    cost = await client.workflow_cost(wid)
    assert cost.status == "PUBLISHED" and cost.version == 2 and cost.owner == owner
    tasks = [await client.task_cost(t.id) for t in cost.tasks]
    # 1 params, 2 images per version, 2 actions, 8 emotions and the retried angry one
    assert len(tasks) == 16
    whole = micro(cost.totals.total)
    assert whole["attempts"] == 16 and whole["gpu_s"] > 0 and whole["usd"] > 0

    # per task (over all attempts) = the workflow = its owner's = per type = per queue
    assert added(t.totals.total for t in tasks) == whole
    cats = by_category(cost.totals.categories)
    for t in tasks:
        assert micro(t.totals.total) == added(
            {**a.charges, "attempts": 1, "run_ms": a.run_ms} for a in t.attempts
        )
    (mine,) = (await client.costs("owner", name=owner)).rows
    assert mine.name == owner and by_category(mine.totals.categories) == cats
    for by, names in (("type", 3), ("queue", 4), ("stage", 4)):
        report = await client.costs(by)
        assert len(report.rows) == names, report.rows
        assert by_category(report.total.categories) == cats
        assert added(r.totals.total for r in report.rows) == whole
    # the stage totals sum to the workflow's, each one as the workflow reports it
    stages = {r.name: r.totals for r in (await client.costs("stage")).rows}
    assert (
        set(stages)
        == set(cost.stages)
        == {f"character/{s}" for s in ("params", "images", "actions", "emotions")}
    )
    for name, totals in stages.items():
        assert by_category(totals.categories) == by_category(cost.stages[name].categories)

    # the waste: exactly the failed attempt and the superseded images' succeeded work
    failed = [(t, a) for t in tasks for a in t.attempts if a.category == "failed"]
    assert len(failed) == 1
    failed_task, failed_attempt = failed[0]
    assert failed_task.stage == "character/emotions" and failed_task.state == "FAILED"
    assert failed_attempt.end == "FAIL" and failed_attempt.charges["gpu_s"] > 0
    superseded = [t for t in tasks if t.superseded]
    rows = {t.id: t for t in cost.tasks}
    assert sorted((rows[t.id].item, rows[t.id].version) for t in superseded) == [
        ("front", 1),
        ("side", 1),
    ]
    replaced = [a for t in superseded for a in t.attempts]
    assert [a.category for a in replaced] == ["superseded", "superseded"]
    waste = [failed_attempt, *replaced]
    expected = added({**a.charges, "attempts": 1, "run_ms": a.run_ms} for a in waste)
    assert micro(cost.totals.waste) == expected
    assert set(cats) == {"ok", "failed", "superseded"}
    assert cats["failed"] == micro({**failed_attempt.charges, "attempts": 1,
                                    "run_ms": failed_attempt.run_ms})  # fmt: skip
    # the params task was carried into version 2: still ok
    params = [t for t in tasks if t.stage == "character/params"]
    assert len(params) == 1 and not params[0].superseded
    assert [a.category for a in params[0].attempts] == ["ok"]


async def test_a_sigkilled_workers_attempt_counts_as_reclaimed(
    redis_url: str, tmp_path: Path
) -> None:
    client = Client.from_url(redis_url, namespace="t")
    victim = spawn_worker(redis_url, "t", "--lease-ms", "1000", "--name", "victim")
    procs: list[subprocess.Popen[bytes]] = [victim]
    try:
        tid = await client.enqueue("charge", {"charges": {"gpu_s": 2}, "first_s": 60}, owner="ana")
        await wait_for_state(client, tid, "RUNNING", timeout=20)
        await asyncio.sleep(0.3)  # (some run time to count)
        stop_process(victim)  # SIGKILL: its charges never leave it
        procs.append(spawn_worker(redis_url, "t", "--lease-ms", "1000", "--name", "rescuer"))
        async with reaper_loop(redis_url, "t", lease_ms=1000):
            info = await client.wait(tid, timeout_ms=20_000)
        assert info.state == "SUCCEEDED" and info.attempt == 2
        cost = await client.task_cost(tid)
        lost, ok = cost.attempts
        assert (lost.category, lost.end, lost.charges) == ("reclaimed", "RECLAIM", {})
        assert lost.run_ms >= 300 and lost.run_ms == lost.ended_at - lost.started_at
        assert (ok.category, ok.charges) == ("ok", {"gpu_s": 2.0})
        for by, name in (("queue", "default"), ("type", "charge"), ("owner", "ana")):
            (row,) = (await client.costs(by, name=name)).rows
            # (an amount of 0 is no field: the second attempt may run in under 1 ms)
            assert by_category(row.totals.categories) == {
                "ok": {"attempts": 1, "gpu_s": 2 * SCALE}
                | ({"run_ms": ok.run_ms} if ok.run_ms else {}),
                "reclaimed": {"attempts": 1, "run_ms": lost.run_ms},
            }
    finally:
        for p in procs:
            stop_process(p)
        await client.close()


def _ending(lease: str, body: str, charges: str) -> Ending:
    return Ending("COMPLETE", lease, body, "", 1, -1, 0.5, "", charges)


async def test_a_regenerate_supersedes_each_task_once(wf: WorkflowClient) -> None:
    """The images of v1 are superseded by the regenerate from images; the params task,
    carried into v2, is superseded only when a regenerate from params leaves it behind;
    v1's images are not counted again."""
    hand = Hand(wf.redis, wf.settings)
    client = Client(wf.redis, wf.settings)

    async def complete_all(charge: str) -> list[str]:
        done = []
        for c in await hand.claim():
            ending = _ending(c.lease, f'{{"ref": "{ref_of(c)}"}}', charge)
            assert await hand.finisher.finish(c.wf, c.id, c.keys, ending, give_up_s=5) == 1
            done.append(c.id)
        return done

    async def stage(name: str) -> dict[str, dict[str, int]]:
        rows = (await client.costs("stage", name=f"character/{name}")).rows
        return by_category(rows[0].totals.categories) if rows else {}

    wid = await wf.start("character", {"name": "Mei"}, owner="o")
    (params,) = await complete_all("gpu_s:1")
    await wf.confirm(wid)
    v1_images = await complete_all("gpu_s:2.5")
    assert (await stage("images"))["ok"]["gpu_s"] == 5 * SCALE
    await wf.regenerate(wid, "images")
    images = await stage("images")
    assert images["superseded"]["gpu_s"] == 5 * SCALE and images["superseded"]["attempts"] == 2
    assert "ok" not in images
    assert [(await client.task_cost(t)).superseded for t in v1_images] == [True, True]
    assert not (await client.task_cost(params)).superseded
    v2_images = await complete_all("gpu_s:2")
    await wf.confirm(wid)
    await wf.regenerate(wid, "params")  # leaves v2's params (v1's task) and images behind
    images = await stage("images")
    assert images["superseded"]["gpu_s"] == 9 * SCALE  # 2 x 2.5 of v1, 2 x 2 of v2
    assert images["superseded"]["attempts"] == 4 and "ok" not in images
    p = await stage("params")
    assert p["superseded"]["attempts"] == 1 and p["superseded"]["gpu_s"] == SCALE
    assert "ok" not in p
    for t in [params, *v1_images, *v2_images]:
        assert (await client.task_cost(t)).superseded
    regen = [e for e in await wf.history(wid) if e.event == "REGENERATE"]
    assert [e.extra["superseded"] for e in regen] == ["2", "3"]
    # the workflow's sums agree with the hash's
    cost = await client.workflow_cost(wid)
    total = await client.costs("owner", name="o")
    assert by_category(cost.totals.categories) == by_category(total.rows[0].totals.categories)


async def test_bad_charges_raise_charge_error_and_change_nothing(
    client: Client, redis_url: str
) -> None:
    bad = [["nan", "gpu_s"], ["inf", "gpu_s"], ["-1", "gpu_s"], [1, "GPU"], [1, "run_ms"],
           [1, ""], [1, "a" * 17], ["1e10", "usd"], [True, "usd"]]  # fmt: skip
    w = Worker(tasks, url=redis_url, settings=Settings(namespace="t"), handle_signals=False)
    run = asyncio.create_task(w.run())
    try:
        tid = await client.enqueue("charge", {"charges": {"usd": 0.25}, "bad": bad})
        info = await client.wait(tid, timeout_ms=10_000)
    finally:
        w.stop()
        await asyncio.wait_for(run, 20)
        await w.redis.aclose()
    assert info.state == "SUCCEEDED" and len(info.result["refused"]) == len(bad)
    (attempt,) = (await client.task_cost(tid)).attempts
    assert attempt.charges == {"usd": 0.25}  # the bad ones were never recorded

    # a ninth unit, and a unit's sum over the bound
    c = Charges()
    for i in range(8):
        c.add(1, f"u{i}")
    with pytest.raises(ChargeError):
        c.add(1, "u8")
    with pytest.raises(ChargeError):
        c.add(999_999_999, "u0")  # 1 + that: over 999,999,999.999999
    c.add(999_999_998.999999, "u0")  # exactly the bound
    with pytest.raises(ChargeError):
        c.add(0.000001, "u0")
    assert c.amounts()["u0"] == 999_999_999 * SCALE + 999_999

    # outside results and finish calls with bad charges: refused, nothing written
    r = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        before = await redis_dump(r)
        with pytest.raises(ChargeError):
            await client.complete_external(tid, {"x": 1}, charges={"usd": -1})
        with pytest.raises(ChargeError):
            await client.fail_external(tid, "no", charges={"Bad Unit": 1})
        store = client.store
        keys = store.keys.task_keys(tid, "default")
        for text in ("usd:-1", "usd:1e3", "usd", "run_ms:1", "usd:1,usd:2", "x:1.1234567",
                     ",".join(f"u{i}:1" for i in range(9))):  # fmt: skip
            with pytest.raises(Exception, match="charges"):
                await store.work.finish([(keys, _ending("1:x", "null", text))])
        assert await redis_dump(r) == before
    finally:
        await r.aclose()
