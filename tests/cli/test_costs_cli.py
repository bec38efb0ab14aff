"""``rsjobs cost ID [--workflow]`` and ``rsjobs costs``: aligned tables of what the
attempts cost and wasted, the documents of the API with ``--json``, one-line errors."""

from __future__ import annotations

import asyncio
import json

import pytest

from rsjobs import Client, Settings, Worker
from rsjobs.workflows import WorkflowClient
from tests.cli.support import rsjobs
from tests.support.apps import tasks
from tests.support.wf_fixtures import NS, running_worker, wait_status

pytestmark = pytest.mark.integration


async def _charged(url: str) -> tuple[str, str]:
    """Two finished tasks of "charge": one ok at once, one failed then ok."""
    client = Client.from_url(url, namespace="t")
    w = Worker(tasks, url=url, settings=Settings(namespace="t"), handle_signals=False)
    run = asyncio.create_task(w.run())
    try:
        ok = await client.enqueue("charge", {"charges": {"gpu_s": 1.25}}, owner="ana")
        retried = await client.enqueue(
            "charge", {"charges": {"gpu_s": 2, "usd": 0.5}, "until": 2}, owner="bo",
            backoff_base_ms=10, backoff_max_ms=10,
        )  # fmt: skip
        for tid in (ok, retried):
            assert (await client.wait(tid, timeout_ms=15_000)).state == "SUCCEEDED"
    finally:
        w.stop()
        await asyncio.wait_for(run, 20)
        await w.redis.aclose()
        await client.close()
    return ok, retried


def _table(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.strip()]


async def test_cost_of_a_task_and_the_totals_print_aligned_tables(redis_url: str) -> None:
    ok, retried = await _charged(redis_url)
    r = rsjobs(redis_url, "--namespace", "t", "cost", retried)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"task {retried} (charge, queue default, owner bo): SUCCEEDED")
    rows = _table("\n".join(lines[1:4]))
    assert rows[0] == ["attempt", "category", "end", "run_ms", "gpu_s", "usd"]
    assert rows[1][:3] == ["1", "failed", "FAIL"] and rows[1][-2:] == ["2", "0.5"]
    assert rows[2][:3] == ["2", "ok", "COMPLETE"] and rows[2][-2:] == ["2", "0.5"]
    assert lines[4].startswith("total: 2 attempts") and lines[4].endswith("gpu_s 4, usd 1")
    assert lines[5].startswith("waste: 1 attempts") and lines[5].endswith("gpu_s 2, usd 0.5")
    # the same document as the API's
    j = rsjobs(redis_url, "--namespace", "t", "cost", retried, "--json")
    doc = json.loads(j.stdout)
    assert [a["category"] for a in doc["attempts"]] == ["failed", "ok"]

    r = rsjobs(redis_url, "--namespace", "t", "costs", "--by", "owner")
    assert r.returncode == 0, r.stderr
    rows = _table(r.stdout)
    assert rows[0] == ["owner", "category", "attempts", "run_ms", "gpu_s", "usd"]
    assert [row[:3] for row in rows[1:]] == [
        ["ana", "ok", "1"],
        ["bo", "ok", "1"],
        ["bo", "failed", "1"],
        ["(all)", "ok", "2"],
        ["(all)", "failed", "1"],
    ]
    assert rows[1][-2:] == ["1.25", "0"]
    # the columns line up: every cell of a numeric column ends where its header ends
    header = r.stdout.splitlines()[0]
    for line in r.stdout.splitlines()[1:]:
        assert len(line) == len(header)
    one = rsjobs(redis_url, "--namespace", "t", "costs", "--owner", "ana", "--json")
    report = json.loads(one.stdout)
    assert report["by"] == "owner" and [x["name"] for x in report["rows"]] == ["ana"]
    by_type = rsjobs(redis_url, "--namespace", "t", "costs")  # default: per type
    assert _table(by_type.stdout)[0][0] == "type" and _table(by_type.stdout)[1][0] == "charge"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["cost", "nope"], "invalid task id"),
        (["cost", "0" * 32], "no such task"),
        (["cost", "--workflow", "0" * 32], "no such workflow"),
        (["costs", "--owner", "ana", "--by", "type"], "--owner reads the owner dimension"),
        (["costs", "--by", "colour"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(redis_url: str, args: list[str], message: str) -> None:
    r = rsjobs(redis_url, "--namespace", "t", *args)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert r.stdout == ""


async def test_cost_of_a_workflow_per_stage_and_task(wf: WorkflowClient, redis_url: str) -> None:
    async with running_worker(redis_url):
        wid = await wf.start("character", {"name": "Mei"}, owner="ana")
        await wait_status(wf, wid, "WAITING_CONFIRMATION")
    r = rsjobs(redis_url, "--namespace", NS, "cost", "--workflow", wid)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert (
        lines[0]
        == f"workflow {wid} (character, owner ana): WAITING_CONFIRMATION, version 1, 1 tasks"
    )
    stages = _table("\n".join(lines[1:4]))
    assert stages[0] == ["stage", "category", "attempts", "run_ms"]
    assert stages[1][:3] == ["character/params", "ok", "1"]
    assert stages[2][:3] == ["(all)", "ok", "1"]
    task_rows = _table("\n".join(lines[5:7]))
    assert task_rows[0][:5] == ["task", "stage", "item", "v", "state"]
    assert task_rows[1][1:5] == ["character/params", "params", "1", "SUCCEEDED"]
    assert lines[-1] == "waste: none"


async def test_tasks_without_an_owner_have_a_row_of_their_own(redis_url: str) -> None:
    """``costs --by owner`` answers for every task: those submitted without an owner are
    its "(no owner)" row (what the queues hold beyond the owners'), and the total is the
    queues' total."""
    client = Client.from_url(redis_url, namespace="nobody")
    w = Worker(tasks, url=redis_url, settings=Settings(namespace="nobody"), handle_signals=False)
    run = asyncio.create_task(w.run())
    try:
        ids = [
            await client.enqueue("charge", {"charges": {"gpu_s": 1}}, owner="ana"),
            await client.enqueue("charge", {"charges": {"gpu_s": 2}}),
            await client.enqueue("charge", {"charges": {"gpu_s": 4}}),
        ]
        for tid in ids:
            assert (await client.wait(tid, timeout_ms=15_000)).state == "SUCCEEDED"
        report = await client.costs("owner")
        queues = await client.costs("queue")
    finally:
        w.stop()
        await asyncio.wait_for(run, 20)
        await w.redis.aclose()
        await client.close()
    rows = {r.name: r.totals for r in report.rows}
    assert sorted(rows) == ["(no owner)", "ana"]
    assert rows["(no owner)"].total["attempts"] == 2 and rows["(no owner)"].total["gpu_s"] == 6
    assert rows["ana"].total["gpu_s"] == 1
    assert report.total == queues.total
    r = rsjobs(redis_url, "--namespace", "nobody", "costs", "--by", "owner")
    assert [row.split()[0] for row in r.stdout.splitlines()[1:3]] == ["(no", "ana"]
