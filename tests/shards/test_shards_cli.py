"""The command line on a sharded namespace: ``--shards`` creates it (or checks it, one line
and exit 2 for another count or a bad value, nothing written), and the merged views
(``tasks --all``, ``queues``, ``stats``) show every shard."""

from __future__ import annotations

import json

import redis as sync_redis

from rsjobs.store.shards import shard_of
from tests.cli.support import rsjobs
from tests.support.web import redis_state

NS = ("--namespace", "cli")


def test_shards_are_created_checked_and_merged(redis_url: str) -> None:
    ids = []
    for _ in range(4):
        out = rsjobs(redis_url, *NS, "--shards", "4", "enqueue", "render", "--queue", "gpu")
        assert out.returncode == 0, out.stderr
        ids.append(out.stdout.split()[0])
    assert all(0 <= shard_of(t) < 4 for t in ids)
    r = sync_redis.Redis.from_url(redis_url)
    before = redis_state(r)
    for bad, says in (
        ("8", "namespace cli has 4 shards, not 8"),
        ("0", "shards must be an integer between 1 and 256"),
        ("x", "--shards must be an integer between 1 and 256"),
    ):
        out = rsjobs(redis_url, *NS, "--shards", bad, "enqueue", "render")
        assert out.returncode == 2, (bad, out)
        assert out.stderr.strip() == f"rsjobs: {says}" or says in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
    assert redis_state(r) == before
    listed = rsjobs(redis_url, *NS, "tasks", "--all", "--json", "--limit", "3")
    assert listed.returncode == 0, listed.stderr
    assert sorted(json.loads(x)["id"] for x in listed.stdout.splitlines()) == sorted(ids)
    queues = rsjobs(redis_url, *NS, "queues", "--json")
    gpu = json.loads(queues.stdout)["gpu"]
    assert gpu["PENDING"] == 4, gpu
    status = rsjobs(redis_url, *NS, "status", ids[-1])
    assert status.returncode == 0 and "PENDING" in status.stdout
    cancel = rsjobs(redis_url, *NS, "cancel", ids[-1])
    assert cancel.returncode == 0, cancel.stderr
