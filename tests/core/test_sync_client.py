"""rsjobs.SyncClient: the asyncio client's methods, blocking, from many threads at once,
on a real Redis, with a real worker process; and after a fork."""

from __future__ import annotations

import inspect
import os
import signal
import threading
import time
import warnings
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from rsjobs import (
    Client,
    ConfigError,
    EnqueueRequest,
    InvalidTransition,
    SyncClient,
    TaskNotFound,
    WaitTimeout,
)
from tests.support.processes import spawn_worker, stop_process

pytestmark = pytest.mark.integration

THREADS = 16


def test_it_has_every_method_of_the_async_client_with_the_same_parameters() -> None:
    public = {
        name
        for name, fn in inspect.getmembers(Client, inspect.iscoroutinefunction)
        if not name.startswith("_")
    }
    assert public >= {"enqueue", "wait", "cancel", "stats"}  # the scan found the methods
    for name in sorted(public):
        ours = getattr(SyncClient, name, None)
        assert ours is not None and not inspect.iscoroutinefunction(ours), name
        theirs = inspect.signature(getattr(Client, name)).parameters
        assert list(inspect.signature(ours).parameters.values()) == list(theirs.values()), name


def test_many_threads_submit_read_and_control_at_once(redis_url: str) -> None:
    per_thread = 25
    barrier = threading.Barrier(THREADS)
    with SyncClient.from_url(redis_url, namespace="sync") as client:

        def work(n: int) -> list[str]:
            barrier.wait()  # every thread calls at the same moment
            ids = []
            for i in range(per_thread):
                tid = client.enqueue("noop", {"n": n, "i": i}, queue=f"q{n % 4}", owner=f"u{n}")
                info = client.get(tid)
                assert info.payload == {"n": n, "i": i} and info.owner == f"u{n}"
                if i % 5 == 0:
                    assert client.cancel(tid, "not needed") == "CANCELLED"
                    assert client.cancel(tid) == "CANCELLED"  # a repeat changes nothing
                ids.append(tid)
            return ids

        with ThreadPoolExecutor(THREADS) as pool:
            results = list(pool.map(work, range(THREADS)))
        ids = [tid for part in results for tid in part]
        assert len(set(ids)) == THREADS * per_thread
        infos = client.get_many(ids)
        states = Counter(i.state for i in infos if i is not None)
        cancelled = THREADS * (per_thread // 5)
        assert states == {"PENDING": len(ids) - cancelled, "CANCELLED": cancelled}
        stats = client.stats()
        assert sum(s.get("PENDING", 0) for s in stats.values()) == len(ids) - cancelled
        assert sum(s.get("CANCELLED", 0) for s in stats.values()) == cancelled
        assert client.counters()["ev:CANCEL"] == cancelled
        # every cancel's history: ENQUEUE, CANCEL, and the repeat refused
        h = client.history(next(i.id for i in infos if i and i.state == "CANCELLED"))
        assert [(e.event, e.rejected) for e in h] == [
            ("ENQUEUE", False),
            ("CANCEL", False),
            ("CANCEL", True),
        ]


def test_threads_wait_for_tasks_a_worker_runs(redis_url: str) -> None:
    worker = spawn_worker(redis_url, "sync", "-c", "8")
    try:
        with SyncClient.from_url(redis_url, namespace="sync") as client:
            reqs = [EnqueueRequest(type="sleep", payload={"s": 0.3, "steps": 3}) for _ in range(24)]
            ids = client.enqueue_many(iter(reqs))  # an iterator is consumed by the caller

            def wait(tid: str) -> str:
                return client.wait(tid, timeout_ms=30_000).state

            # more waiting threads than the worker has slots: each blocks only itself
            with ThreadPoolExecutor(24) as pool:
                assert list(pool.map(wait, ids)) == ["SUCCEEDED"] * 24
            assert all(i is not None and i.result["attempt"] == 1 for i in client.get_many(ids))
    finally:
        stop_process(worker)


def test_errors_are_the_async_clients_and_reach_the_calling_thread(redis_url: str) -> None:
    with SyncClient.from_url(redis_url, namespace="sync") as client:
        with pytest.raises(ConfigError, match="invalid task id"):
            client.get("nope")
        with pytest.raises(TaskNotFound):
            client.get("0" * 32)
        with pytest.raises(ConfigError, match="max_attempts"):
            client.enqueue("noop", queue="q", max_attempts=0)
        assert client.stats() == {}  # the refused submit wrote nothing
        tid = client.enqueue("noop", queue="q")
        with pytest.raises(WaitTimeout):
            client.wait(tid, timeout_ms=50)
        assert client.cancel(tid) == "CANCELLED"
        with pytest.raises(InvalidTransition):
            client.pause(tid)
    with pytest.raises(ConfigError, match="closed"):
        client.get(tid)


def wait_child(pid: int, timeout: float) -> int:
    """The child's wait status; kills it after ``timeout`` (a child calling the parent's
    loop, which has no thread in the child, would block forever)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"the forked child did not finish within {timeout} s")


def test_a_forked_child_gets_a_loop_of_its_own(redis_url: str) -> None:
    client = SyncClient.from_url(redis_url, namespace="sync")
    try:
        first = client.enqueue("noop", {"who": "parent"})
        read, write = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
            pid = os.fork()
        if pid == 0:  # the child: the parent's loop thread does not exist here
            code = 1
            try:
                tid = client.enqueue("noop", {"who": "child"})
                if client.get(first).payload == {"who": "parent"}:
                    os.write(write, tid.encode())
                    code = 0
            finally:
                os._exit(code)
        os.close(write)
        status = wait_child(pid, timeout=20)
        child_tid = os.read(read, 64).decode()
        os.close(read)
        assert os.waitstatus_to_exitcode(status) == 0
        # the parent's client still works, and sees the child's task
        assert client.get(child_tid).payload == {"who": "child"}
        assert client.get(first).state == "PENDING"
    finally:
        client.close()
        client.close()  # idempotent


def test_lists_and_the_namespace_views_from_a_thread(redis_url: str) -> None:
    with SyncClient(redis_url) as c:
        tagged = c.enqueue("img", queue="gpu", labels={"user": "u_9"})
        c.enqueue("img", queue="gpu")
        page = c.list_tasks(label="user=u_9", state=iter(["PENDING"]))
        assert [s.id for s in page.items] == [tagged] and page.items[0].labels == {"user": "u_9"}
        assert len(c.list_tasks(queue=("gpu",)).items) == 2
        (gpu,) = c.queues()
        assert gpu.name == "gpu" and gpu.counts["PENDING"] == 2 and gpu.depth == 2
        assert c.workers() == [] and c.deadletters().items == []
        with pytest.raises(ConfigError, match="unknown state"):
            c.list_tasks(state="DONE")
