"""``rsjobs tasks`` (a page of a task list, filters, the next page's cursor on stderr,
--all, --json), ``rsjobs enqueue --label``, and ``rsjobs queues``'s oldest-pending column,
on a real Redis; bad filters are exit 2 with one line and write nothing."""

from __future__ import annotations

import json

import pytest
import redis as sync_redis

from rsjobs import Client
from tests.cli.support import rsjobs

pytestmark = pytest.mark.integration


async def test_tasks_lists_filters_and_pages(redis_url: str) -> None:
    async with Client.from_url(redis_url) as client:
        gpu = [
            await client.enqueue("render", queue="gpu", labels={"user": "u_9"}) for _ in range(3)
        ]
        await client.enqueue("render", queue="gpu", labels={"user": "u_1"})
        cpu = await client.enqueue("resize", queue="cpu", labels={"user": "u_9"})
        await client.cancel(gpu[0], "not needed")
    out = rsjobs(redis_url, "tasks", "--queue", "gpu", "--label", "user=u_9")
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.splitlines()
    assert header.split()[:6] == ["listed", "id", "state", "queue", "pri", "type"]
    assert {r.split()[2] for r in rows} == set(gpu)  # the time takes two words
    assert out.stderr == ""
    cancelled = rsjobs(redis_url, "tasks", "--state", "CANCELLED", "--queue", "gpu", "--json")
    assert [json.loads(line)["id"] for line in cancelled.stdout.splitlines()] == [gpu[0]]
    # a page, its cursor on stderr, then the next page
    first = rsjobs(redis_url, "tasks", "--limit", "2", "--json")
    assert len(first.stdout.splitlines()) == 2
    cursor = first.stderr.split("--cursor ")[1].split()[0]
    rest = rsjobs(redis_url, "tasks", "--limit", "2", "--json", "--cursor", cursor)
    seen = [json.loads(x)["id"] for x in first.stdout.splitlines() + rest.stdout.splitlines()]
    assert len(set(seen)) == 4
    everything = rsjobs(
        redis_url, "tasks", "--limit", "2", "--all", "--json", "--state", "PENDING,CANCELLED"
    )
    assert len(everything.stdout.splitlines()) == 5 and everything.stderr == ""
    assert cpu in everything.stdout
    none = rsjobs(redis_url, "tasks", "--type", "nothing")
    assert none.returncode == 0 and none.stdout.strip() == "(no tasks)"
    # --since / --until take the time syntax of every command (ms, ISO 8601, a time ago)
    recent = rsjobs(redis_url, "tasks", "--since", "1h", "--all", "--json")
    assert len(recent.stdout.splitlines()) == len(everything.stdout.splitlines()) == 5
    later = rsjobs(redis_url, "tasks", "--since", "2100-01-01T00:00", "--json")
    assert later.returncode == 0 and later.stdout == ""
    old = rsjobs(redis_url, "tasks", "--until", "1h", "--json")
    assert old.returncode == 0 and old.stdout == ""


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["tasks", "--state", "DONE"], "unknown state"),
        (["tasks", "--label", "user"], "key=value"),
        (["tasks", "--limit", "0"], "limit"),
        (["tasks", "--cursor", "nonsense"], "invalid cursor"),
        (["tasks", "--since", "soon"], "invalid time"),
        (["tasks", "--cursor", "0-0"], "invalid cursor"),
        (["tasks", "--cursor", "AQ" + "A" * 40], "invalid cursor"),
        (["enqueue", "render", "--label", "user"], "expected KEY=VALUE"),
        (["enqueue", "render", "--label", "a=1", "--label", "a=2"], "given twice"),
        (["enqueue", "render", "--label", "bad key=1"], "label key"),
    ],
)
def test_bad_filters_and_labels_are_exit_2_and_write_nothing(
    redis_url: str, args: list[str], says: str
) -> None:
    r = sync_redis.Redis.from_url(redis_url)
    r.set("marker", "1")
    before = r.dbsize()
    out = rsjobs(redis_url, *args)
    assert out.returncode == 2 and says in out.stderr and len(out.stderr.splitlines()) == 1
    assert r.dbsize() == before
    r.close()


async def test_enqueue_labels_show_in_status(redis_url: str) -> None:
    out = rsjobs(redis_url, "enqueue", "render", "--label", "user=u_9", "--label", "character=c1")
    assert out.returncode == 0, out.stderr
    tid = out.stdout.split()[0]
    status = rsjobs(redis_url, "status", tid).stdout
    assert "character=c1 user=u_9" in status
    async with Client.from_url(redis_url) as client:
        assert (await client.get(tid)).labels == {"character": "c1", "user": "u_9"}
    queues = rsjobs(redis_url, "queues")
    assert "oldest" in queues.stdout.splitlines()[0]
    doc = json.loads(rsjobs(redis_url, "queues", "--json").stdout)
    assert doc["default"]["oldest_pending_ms"] >= 0 and doc["default"]["paused"] is False
