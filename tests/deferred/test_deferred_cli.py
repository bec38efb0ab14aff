"""``rsjobs complete`` / ``rsjobs fail``: a DEFERRED task's wait ended from the command
line, by task id or by the outside job's id; a refused one exits 1 and is recorded."""

from __future__ import annotations

import pytest

from rsjobs import Client
from rsjobs.store import Store
from tests.cli.support import rsjobs

pytestmark = pytest.mark.integration


async def _deferred(client: Client, store: Store, job: str) -> str:
    """A task started by hand and deferred on outside job ``job`` of provider ``acme``."""
    tid = await client.enqueue("gen", {"n": 1}, max_attempts=1)
    work, k = store.work, store.keys
    await work.ensure_groups([k.queue("default")])
    (d,) = await work.read("hand", {k.queue("default"): "default"}, 1, None)
    (started,) = await work.start("hand", 60_000, "hand-n", [d])
    reply = await store.deferred.defer(
        k.task_keys(tid, "default"), started.lease, job, "acme", 60_000
    )
    assert reply.state == "DEFERRED"
    return tid


async def test_complete_and_fail_from_the_command_line(client: Client, redis_url: str) -> None:
    store = client.store
    a = await _deferred(client, store, "job-a")
    b = await _deferred(client, store, "job-b")
    ns = ["--namespace", "t"]
    done = rsjobs(redis_url, *ns, "complete", "job-a", "--provider", "acme", "--result", '{"u": 1}')
    assert (done.returncode, done.stdout.strip()) == (0, "SUCCEEDED"), done.stderr
    assert (await client.get(a)).result == {"u": 1}
    failed = rsjobs(redis_url, *ns, "fail", b, "--error", "provider gave up", "--final")
    assert (failed.returncode, failed.stdout.strip()) == (0, "FAILED"), failed.stderr
    again = rsjobs(redis_url, *ns, "complete", b, "--result", "1")
    assert again.returncode == 1 and "refused" in again.stderr
    assert [e.event for e in await client.history(b) if e.rejected] == ["COMPLETE"]
    bad = rsjobs(redis_url, *ns, "complete", a, "--result", "{nope")
    assert bad.returncode == 2 and "not valid JSON" in bad.stderr
    missing = rsjobs(redis_url, *ns, "complete", "no-such-job", "--provider", "acme")
    assert missing.returncode == 2 and "no-such-job" in missing.stderr


async def test_deferred_tasks_are_listed(client: Client, redis_url: str) -> None:
    store = client.store
    a = await _deferred(client, store, "job-l1")
    b = await _deferred(client, store, "job-l2")
    running = await client.enqueue("gen", {"n": 2}, timeout_ms=60_000)  # in deadlines too
    k = store.keys
    (d,) = await store.work.read("hand", {k.queue("default"): "default"}, 1, None)
    await store.work.start("hand", 60_000, "hand-n", [d])
    page = await client.list_tasks(state="DEFERRED")
    assert sorted(t.id for t in page.items) == sorted([a, b])
    assert all(t.state == "DEFERRED" for t in page.items)
    everything = await client.list_tasks()
    assert {a, b, running} <= {t.id for t in everything.items}
    listed = rsjobs(redis_url, "--namespace", "t", "tasks", "--state", "DEFERRED")
    assert a in listed.stdout or a[:8] in listed.stdout, listed.stdout + listed.stderr


async def test_the_outside_jobs_charges_from_the_command_line(
    client: Client, redis_url: str
) -> None:
    c = await _deferred(client, client.store, "job-c")
    ns = ["--namespace", "t"]
    for bad, says in (("usd", "expected UNIT=AMOUNT"), ("usd=x", "expected UNIT=AMOUNT"),
                      ("usd=-1", "a finite number >= 0"), ("USD=1", "charge unit")):  # fmt: skip
        r = rsjobs(redis_url, *ns, "complete", c, "--result", "1", "--charge", bad)
        assert r.returncode == 2 and says in r.stderr, r.stderr
    assert (await client.get(c)).state == "DEFERRED"  # nothing written
    done = rsjobs(redis_url, *ns, "complete", c, "--result", "1", "--charge", "usd=0.25",
                  "--charge", "usd=0.15", "--charge", "gpu_s=2")  # fmt: skip
    assert (done.returncode, done.stdout.strip()) == (0, "SUCCEEDED"), done.stderr
    (attempt,) = (await client.task_cost(c)).attempts
    assert attempt.charges == {"gpu_s": 2, "usd": 0.4} and attempt.deferred
