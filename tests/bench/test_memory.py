"""bench.memory, the reusable footprint measurement, on the session's real Redis: it
runs a workload through rsjobs's public API and accounts for the keys each task keeps."""

from __future__ import annotations

import pytest

from bench.keyspace import pattern
from bench.memory import Footprint, Workload, measure
from rsjobs import Settings

pytestmark = pytest.mark.integration

N = 300


def _group(fp: Footprint, which: str, suffix: str) -> tuple[int, int]:
    rows = fp.waiting_keys if which == "waiting" else fp.finished_keys
    found = [g for g in rows if g.pattern.endswith(suffix)]
    assert len(found) == 1, rows
    return found[0].keys, found[0].bytes


async def test_measure_counts_every_task_once_and_its_keys(redis_url: str) -> None:
    fp = await measure(
        redis_url, Workload(tasks=N, settings=Settings(namespace="mem")), release=True
    )
    assert fp.tasks == N
    # The warm-up task is in the baseline: exactly N task hashes grew, and nothing else
    # per task (a task's history is in its hash)
    assert _group(fp, "waiting", ":task:<id>")[0] == N
    assert _group(fp, "finished", ":task:<id>")[0] == N
    assert not [g for g in fp.finished_keys if g.pattern.endswith(":history")]
    # A finished task holds more than a waiting one (start, end, history entries).
    assert fp.finished_bytes_per_task > fp.waiting_bytes_per_task > 100
    # Deleting the per-task keys frees N + 1 of each (the warm-up's too), and not more
    # than the whole growth of the run plus the warm-up task's share.
    released = {r.pattern.rsplit(":", 1)[-1]: r for r in fp.released}
    assert {r.keys for r in fp.released} == {N + 1}
    freed = sum(r.freed_bytes for r in fp.released)
    assert 0 < freed <= (N + 1) * fp.finished_bytes_per_task
    assert set(released) == {"<id>"}
    assert fp.redis["version"]


async def test_dedup_keys_show_up_as_their_own_pattern(redis_url: str) -> None:
    fp = await measure(
        redis_url, Workload(tasks=50, dedup_keys=True, settings=Settings(namespace="mem"))
    )
    assert _group(fp, "waiting", ":dedup:memory-<id>")[0] == 50


def test_pattern_replaces_id_segments_only() -> None:
    assert pattern("rsjobs:{q}:task:0123456789abcdef0123456789abcdef:history") == (
        "rsjobs:{q}:task:<id>:history"
    )
    assert pattern("bull:bench:17") == "bull:bench:<id>"
    assert pattern("saq:job:bench:0f8fad5b-d9cb-469f-a165-70867728950e") == "saq:job:bench:<id>"
    assert pattern("rsjobs:{q}:dedup:order-17") == "rsjobs:{q}:dedup:order-<id>"
    assert pattern("rsjobs:{q}:queue:gpu2") == "rsjobs:{q}:queue:gpu2"
    assert pattern("rsjobs:{q}:events") == "rsjobs:{q}:events"
