"""``rsjobs limits`` and ``rsjobs rate`` (rsjobs.limits), ``enqueue --priority``, and the
priority in ``status`` and ``tasks``: a bad value is one line on stderr, exit 2, and
nothing written."""

from __future__ import annotations

import json

import pytest
import redis as sync_redis

from tests.cli.support import rsjobs
from tests.support.web import redis_state

pytestmark = pytest.mark.integration


def test_limits_set_list_clear(redis_url: str) -> None:
    assert (
        rsjobs(redis_url, "enqueue", "noop", "--queue", "gpu", "--owner", "alice").returncode == 0
    )
    r = rsjobs(redis_url, "limits", "set", "gpu", "2")
    assert r.returncode == 0, r.stderr
    assert "at most 2 running tasks of every owner" in r.stdout
    assert rsjobs(redis_url, "limits", "set", "gpu", "5", "--owner", "vip").returncode == 0
    out = rsjobs(redis_url, "limits", "list").stdout.splitlines()
    assert out[0].split() == ["queue", "owner", "limit", "running", "waiting"]
    assert out[1].split()[:3] == ["gpu", "*", "2"] and out[2].split()[:3] == ["-", "vip", "5"]
    doc = json.loads(rsjobs(redis_url, "limits", "list", "gpu", "--json").stdout)
    assert doc["default"] == 2 and doc["owners"] == {"vip": 5}
    assert rsjobs(redis_url, "limits", "clear", "gpu", "--owner", "vip").returncode == 0
    gone = rsjobs(redis_url, "limits", "clear", "gpu", "--owner", "vip")
    assert gone.returncode == 2 and "has no limit of owner 'vip'" in gone.stderr
    rdb = sync_redis.Redis.from_url(redis_url)
    before = redis_state(rdb)
    for args in (["set", "gpu", "0"], ["set", "gpu", "-2"], ["set", "gpu", "99999999"],
                 ["set", "bad queue", "2"], ["set", "gpu", "2", "--owner", "a b"]):  # fmt: skip
        r = rsjobs(redis_url, "limits", *args)
        assert r.returncode == 2 and r.stderr.startswith("rsjobs: "), (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1
    assert redis_state(rdb) == before
    rdb.close()


def test_rate_set_list_clear(redis_url: str) -> None:
    assert rsjobs(redis_url, "enqueue", "noop", "--queue", "api").returncode == 0
    r = rsjobs(redis_url, "rate", "set", "api", "5")
    assert r.returncode == 0 and "5 starts/s of every task, burst 5" in r.stdout
    r = rsjobs(
        redis_url, "rate", "set", "api", "0.5", "--type", "call", "--retries", "--burst", "1"
    )
    assert r.returncode == 0 and "type call (retries)" in r.stdout
    rows = rsjobs(redis_url, "rate", "list").stdout.splitlines()
    assert [x.split()[:5] for x in rows[1:]] == [["api", "*", "-", "5", "5"],
                                                  ["api", "call", "yes", "0.5", "1"]]  # fmt: skip
    rdb = sync_redis.Redis.from_url(redis_url)
    before = redis_state(rdb)
    for args in (["set", "api", "0"], ["set", "api", "-1"], ["set", "api", "5", "--burst", "0"],
                 ["set", "api", "nan"], ["set", "api", "5", "--retries"],
                 ["set", "api", "1e-9"], ["set", "api", "inf"], ["set", "api", "1e308"],
                 ["set", "api", "5", "--type", "a b"], ["set", "api", "5", "--type", "t\n"],
                 ["set", "api", "5", "--type", "\u2460"]):  # fmt: skip
        r = rsjobs(redis_url, "rate", *args)
        assert r.returncode == 2 and r.stderr.startswith("rsjobs: "), (args, r.stderr)
    assert redis_state(rdb) == before
    rdb.close()
    assert rsjobs(redis_url, "rate", "clear", "api", "--type", "call", "--retries").returncode == 0
    assert rsjobs(redis_url, "rate", "clear", "api", "--type", "call").returncode == 2


def test_enqueue_priority_and_where_it_shows(redis_url: str) -> None:
    r = rsjobs(redis_url, "enqueue", "noop", "--priority", "8")
    assert r.returncode == 0, r.stderr
    tid = r.stdout.split()[0]
    status = rsjobs(redis_url, "status", tid).stdout
    assert any(line.split() == ["priority", "8"] for line in status.splitlines())
    assert json.loads(rsjobs(redis_url, "status", tid, "--json").stdout)["priority"] == 8
    rows = rsjobs(redis_url, "tasks").stdout.splitlines()
    head = rows[0].split()
    assert "pri" in head and rows[1].split()[head.index("pri") + 1] == "8"  # (listed: 2 words)
    rdb = sync_redis.Redis.from_url(redis_url)
    before = redis_state(rdb)
    for bad in ("10", "-1"):
        r = rsjobs(redis_url, "enqueue", "noop", "--priority", bad)
        assert r.returncode == 2 and "priority" in r.stderr
    assert redis_state(rdb) == before
    rdb.close()
