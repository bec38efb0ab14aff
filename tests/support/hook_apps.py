"""Hooks the hook tests run in ``rsjobs hooks run`` child processes: each run is recorded
in the test's Redis (``RSJOBS_TEST_URL``), outside the namespace's keys."""

from __future__ import annotations

import os
import time

import redis

from rsjobs.hooks import HookEvent, Hooks

hooks = Hooks()
_r: redis.Redis | None = None

#: every run: "<task id>" pushed here; each distinct task id added to the set
RUNS, SEEN = "test:hook:runs", "test:hook:seen"


def _redis() -> redis.Redis:
    global _r
    if _r is None:
        _r = redis.Redis.from_url(os.environ["RSJOBS_TEST_URL"])
    return _r


@hooks.hook(on=["CANCELLED"], types=["image.*"], name="record", timeout_ms=5000)
def record(event: HookEvent) -> None:
    # slow enough that a SIGKILL lands while some runs are under way
    time.sleep(float(os.environ.get("RSJOBS_TEST_HOOK_SLEEP", "0.05")))
    r = _redis()
    r.rpush(RUNS, event.task_id)
    r.sadd(SEEN, event.task_id)
