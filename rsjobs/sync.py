"""A blocking client for threaded code: WSGI servers (Django, Flask under gunicorn's
threads), scripts, notebooks.

:class:`SyncClient` has the methods of :class:`rsjobs.Client`, with the same arguments,
and blocks until each is done. It does not copy the client: it runs one
:class:`rsjobs.Client` on one asyncio event loop in a background thread of its own, and
each call from any thread hands its coroutine to that loop
(``asyncio.run_coroutine_threadsafe``) and waits for the result. So every rule of the
asyncio client holds unchanged (validation before any write, the transition scripts, the
connection pool, the pipelined script connection, the transient-error policy), and any
number of threads share one pool of connections: calls from many threads run
concurrently on the loop, a blocking :meth:`wait` holds one connection while it waits and
blocks only its own caller.

After a fork (gunicorn's pre-forked workers, ``multiprocessing``) the child has no loop
thread: the first call in the child starts a fresh loop and client of its own; the
connections inherited from the parent are left alone. Close it with :meth:`close` (or use
it as a context manager); a client that is never closed ends with the process.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

from .client import Client, connect
from .costs import CostReport, TaskCost, WorkflowCost
from .errors import ConfigError
from .limits import QueueLimits, RateLimit
from .queries import Labels, Names
from .schedules import ScheduleInfo
from .schemas import (
    BulkResult,
    EnqueueRequest,
    EnqueueResult,
    HistoryEntry,
    QueuePause,
    RetryResult,
    TaskFilter,
    TaskInfo,
    TaskPage,
    WebhookDelivery,
)
from .settings import Settings
from .store import Code, TaskRef

if TYPE_CHECKING:
    from .overview import DeadLetterPage, QueueSeries, QueueView
    from .reaper import WorkerInfo
    from .workflows.listing import WorkflowPage

__all__ = ["SyncClient"]

T = TypeVar("T")


class _LoopThread:
    """An event loop running forever in a daemon thread, with the client bound to it."""

    def __init__(self, url: str, settings: Settings, source: str) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="rsjobs-sync-loop", daemon=True)
        self.thread.start()
        # the client (and its connections) is made on the loop it will run on
        self.client: Client = self.run(self._make(url, settings, source))

    async def _make(self, url: str, settings: Settings, source: str) -> Client:
        return Client(connect(url), settings, source=source)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.get_ident() == self.thread.ident:
            coro.close()
            raise ConfigError(
                "a SyncClient was called from its own event loop thread (use rsjobs.Client "
                "in async code)"
            )
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result()
        except BaseException:
            fut.cancel()  # e.g. KeyboardInterrupt in the caller: do not leave it running
            raise

    def close(self) -> None:
        try:
            self.run(self.client.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            if not self.thread.is_alive():
                self.loop.close()


class SyncClient:
    """Submit, inspect and control tasks from threads; see the module docstring.

    ``url`` as for :func:`rsjobs.connect`; ``settings`` and ``source`` as for
    :class:`rsjobs.Client`. Safe to share between threads (one instance per process is
    the intended use).
    """

    def __init__(self, url: str, settings: Settings | None = None, *, source: str = "api") -> None:
        self.url = url
        self.settings = settings or Settings()
        self.source = source
        self._lock = threading.Lock()
        self._loop: _LoopThread | None = None
        self._closed = False

    @classmethod
    def from_url(cls, url: str, *, source: str = "api", **settings: Any) -> SyncClient:
        return cls(url, Settings(**settings), source=source)

    def _runner(self) -> _LoopThread:
        loop = self._loop
        if loop is not None and loop.pid == os.getpid():
            return loop
        with self._lock:
            if self._closed:
                raise ConfigError("this SyncClient is closed")
            if self._loop is None or self._loop.pid != os.getpid():
                # first use, or first use in a forked child: a loop of this process
                self._loop = _LoopThread(self.url, self.settings, self.source)
            return self._loop

    @property
    def client(self) -> Client:
        """The asyncio client underneath (use it only on :attr:`loop`)."""
        return self._runner().client

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._runner().loop

    def close(self) -> None:
        """Close the connections and stop the loop thread; idempotent."""
        with self._lock:
            loop, self._loop, self._closed = self._loop, None, True
        if loop is not None and loop.pid == os.getpid():
            loop.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the methods of rsjobs.Client ----------------------------------------------------

    def enqueue(
        self,
        type: str,
        payload: Any = None,
        *,
        queue: str = "default",
        max_attempts: int = 3,
        timeout_ms: int = 0,
        delay_ms: int = 0,
        dedup_key: str | None = None,
        owner: str | None = None,
        backoff_base_ms: int = 1000,
        backoff_max_ms: int = 300_000,
        wait_timeout_ms: int = 0,
        labels: Mapping[str, str] | None = None,
        after: Sequence[str] | None = None,
        after_policy: str = "succeeded",
        shard_key: str | None = None,
        priority: int = 0,
    ) -> str:
        """Submit one task; returns its id (see :meth:`rsjobs.Client.enqueue`; ``after``
        makes it a successor of those tasks; ``shard_key`` places it in a sharded
        namespace)."""
        r = self._runner()
        return r.run(
            r.client.enqueue(
                type,
                payload,
                queue=queue,
                max_attempts=max_attempts,
                timeout_ms=timeout_ms,
                delay_ms=delay_ms,
                dedup_key=dedup_key,
                owner=owner,
                backoff_base_ms=backoff_base_ms,
                backoff_max_ms=backoff_max_ms,
                wait_timeout_ms=wait_timeout_ms,
                labels=dict(labels) if labels is not None else None,
                after=list(after) if after is not None else None,
                after_policy=after_policy,
                shard_key=shard_key,
                priority=priority,
            )
        )

    def submit(self, req: EnqueueRequest, *, shard_key: str | None = None) -> EnqueueResult:
        """Submit one task and say what happened (see :meth:`rsjobs.Client.submit`)."""
        r = self._runner()
        return r.run(r.client.submit(req, shard_key=shard_key))

    def enqueue_many(
        self,
        requests: Iterable[EnqueueRequest],
        *,
        chunk: int = 250,
        shard_key: str | None = None,
    ) -> list[str]:
        """Submit many tasks in few round trips (see :meth:`rsjobs.Client.enqueue_many`)."""
        reqs = list(requests)  # consumed here, in the caller's thread
        r = self._runner()
        return r.run(r.client.enqueue_many(reqs, chunk=chunk, shard_key=shard_key))

    def get(self, task_id: str) -> TaskInfo:
        """The task as stored now. Raises :class:`rsjobs.TaskNotFound`."""
        r = self._runner()
        return r.run(r.client.get(task_id))

    def get_many(self, task_ids: Sequence[str]) -> list[TaskInfo | None]:
        """Several tasks in one round trip; ``None`` for ids that name no task."""
        r = self._runner()
        return r.run(r.client.get_many(list(task_ids)))

    def history(
        self, task_id: str, *, after: str = "0", count: int | None = None
    ) -> list[HistoryEntry]:
        """The task's history, oldest first (see :meth:`rsjobs.Client.history`)."""
        r = self._runner()
        return r.run(r.client.history(task_id, after=after, count=count))

    def wait(self, task_id: str, *, timeout_ms: int | None = None) -> TaskInfo:
        """Block the calling thread until the task is terminal; raises
        :class:`rsjobs.WaitTimeout` after ``timeout_ms`` (None = wait forever)."""
        r = self._runner()
        return r.run(r.client.wait(task_id, timeout_ms=timeout_ms))

    def stats(self) -> dict[str, dict[str, int]]:
        """Per queue: task counts per state, stream length."""
        r = self._runner()
        return r.run(r.client.stats())

    def list_tasks(
        self,
        *,
        state: Names = None,
        queue: Names = None,
        type: str | None = None,
        owner: str | None = None,
        label: Labels = None,
        since: int = 0,
        until: int = 0,
        cursor: str | None = None,
        limit: int = 50,
    ) -> TaskPage:
        """One page of tasks, newest first (see :meth:`rsjobs.Client.list_tasks`)."""

        def frozen(v: Any) -> Any:  # iterables are read here, in the caller's thread
            return v if v is None or isinstance(v, str | Mapping) else list(v)

        r = self._runner()
        return r.run(
            r.client.list_tasks(
                state=frozen(state),
                queue=frozen(queue),
                type=type,
                owner=owner,
                label=frozen(label),
                since=since,
                until=until,
                cursor=cursor,
                limit=limit,
            )
        )

    def queues(self) -> list[QueueView]:
        """Every queue: depth, counts per state, oldest pending age, live workers."""
        r = self._runner()
        return r.run(r.client.queues())

    def queue_series(self, queue: str, *, minutes: int = 60) -> QueueSeries:
        """The queue's per-minute series (see :meth:`rsjobs.Client.queue_series`)."""
        r = self._runner()
        return r.run(r.client.queue_series(queue, minutes=minutes))

    def list_workflows(
        self,
        *,
        state: str | None = None,
        name: str | None = None,
        owner: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> WorkflowPage:
        """A page of workflows, newest first (see :meth:`rsjobs.Client.list_workflows`)."""
        r = self._runner()
        return r.run(
            r.client.list_workflows(state=state, name=name, owner=owner, cursor=cursor, limit=limit)
        )

    def workers(self) -> list[WorkerInfo]:
        """The workers registry (see :meth:`rsjobs.Client.workers`)."""
        r = self._runner()
        return r.run(r.client.workers())

    def deadletters(self, *, cursor: str | None = None, limit: int = 50) -> DeadLetterPage:
        """A page of the dead-letter stream, newest first."""
        r = self._runner()
        return r.run(r.client.deadletters(cursor=cursor, limit=limit))

    def counters(self) -> dict[str, int]:
        """Raw counters: transitions per event and refusals."""
        r = self._runner()
        return r.run(r.client.counters())

    def task_cost(self, task_id: str) -> TaskCost:
        """What a task cost, per attempt and in sum (see :meth:`rsjobs.Client.task_cost`)."""
        r = self._runner()
        return r.run(r.client.task_cost(task_id))

    def workflow_cost(self, wf_id: str) -> WorkflowCost:
        """What a workflow cost (see :meth:`rsjobs.Client.workflow_cost`)."""
        r = self._runner()
        return r.run(r.client.workflow_cost(wf_id))

    def costs(self, by: str = "type", *, name: str | None = None) -> CostReport:
        """The cost totals along one dimension (see :meth:`rsjobs.Client.costs`)."""
        r = self._runner()
        return r.run(r.client.costs(by, name=name))

    def ref(self, task_id: str) -> TaskRef:
        """The task's state, owner, queue and dedup key in one read; raises
        :class:`rsjobs.TaskNotFound`."""
        r = self._runner()
        return r.run(r.client.ref(task_id))

    def control(
        self,
        task_id: str,
        event: str,
        reason: str = "",
        *,
        ref: TaskRef | None = None,
        source: str | None = None,
    ) -> tuple[Code, str]:
        """CANCEL, PAUSE or RESUME: the reply code and the state after the call."""
        r = self._runner()
        return r.run(r.client.control(task_id, event, reason, ref=ref, source=source))

    def schedule(
        self,
        name: str,
        *,
        type: str,
        payload: Any = None,
        cron: str = "",
        every_ms: int = 0,
        queue: str = "default",
        max_attempts: int = 3,
        timeout_ms: int = 0,
        owner: str | None = None,
        wait_timeout_ms: int = 0,
        labels: Mapping[str, str] | None = None,
        priority: int = 0,
    ) -> int:
        """Add or replace a recurring schedule; its first tick (see :meth:`Client.schedule`)."""
        r = self._runner()
        return r.run(
            r.client.schedule(
                name,
                type=type,
                payload=payload,
                cron=cron,
                every_ms=every_ms,
                queue=queue,
                max_attempts=max_attempts,
                timeout_ms=timeout_ms,
                owner=owner,
                wait_timeout_ms=wait_timeout_ms,
                labels=labels,
                priority=priority,
            )
        )

    # -- limits of shared queues (rsjobs.limits) ---------------------------------------------

    def set_limit(self, queue: str, limit: int, *, owner: str | None = None) -> None:
        """At most ``limit`` RUNNING tasks of each owner (or of ``owner``) on ``queue``
        (see :meth:`rsjobs.Client.set_limit`)."""
        r = self._runner()
        r.run(r.client.set_limit(queue, limit, owner=owner))

    def clear_limit(self, queue: str, *, owner: str | None = None) -> bool:
        """Remove the queue's default limit, or ``owner``'s own; whether there was one."""
        r = self._runner()
        return r.run(r.client.clear_limit(queue, owner=owner))

    def set_rate(
        self,
        queue: str,
        per_second: float,
        *,
        type: str | None = None,
        burst: int | None = None,
        retries: bool = False,
    ) -> RateLimit:
        """A rate limit for ``queue`` (or a type on it, or its retries): see
        :meth:`rsjobs.Client.set_rate`."""
        r = self._runner()
        return r.run(r.client.set_rate(queue, per_second, type=type, burst=burst, retries=retries))

    def clear_rate(self, queue: str, *, type: str | None = None, retries: bool = False) -> bool:
        """Remove a rate limit; whether there was one."""
        r = self._runner()
        return r.run(r.client.clear_rate(queue, type=type, retries=retries))

    def limits(self, queue: str | None = None) -> list[QueueLimits]:
        """The limits of ``queue`` (None: of every queue), and how they hold now."""
        r = self._runner()
        return r.run(r.client.limits(queue))

    def webhook_deliveries(self, task_id: str) -> list[WebhookDelivery]:
        """The task's webhook deliveries, every attempt, newest first."""
        r = self._runner()
        return r.run(r.client.webhook_deliveries(task_id))

    def unschedule(self, name: str) -> bool:
        """Remove a recurring schedule; whether there was one."""
        r = self._runner()
        return r.run(r.client.unschedule(name))

    def schedules(self) -> list[ScheduleInfo]:
        """Every recurring schedule, its next tick and what it fired."""
        r = self._runner()
        return r.run(r.client.schedules())

    def cancel(self, task_id: str, reason: str = "", *, source: str | None = None) -> str:
        """Cancel the task; returns the state after the call (idempotent)."""
        r = self._runner()
        return r.run(r.client.cancel(task_id, reason, source=source))

    def complete_external(
        self,
        task_or_external_id: str,
        result: Any = None,
        *,
        provider: str | None = None,
        source: str | None = None,
        charges: Mapping[str, float] | None = None,
    ) -> str:
        """End a DEFERRED task's wait with its result (see Client.complete_external)."""
        r = self._runner()
        return r.run(
            r.client.complete_external(
                task_or_external_id, result, provider=provider, source=source, charges=charges
            )
        )

    def fail_external(
        self,
        task_or_external_id: str,
        error: str,
        *,
        retryable: bool = True,
        provider: str | None = None,
        source: str | None = None,
        charges: Mapping[str, float] | None = None,
    ) -> str:
        """Fail a DEFERRED task's wait (see Client.fail_external)."""
        r = self._runner()
        return r.run(
            r.client.fail_external(
                task_or_external_id,
                error,
                retryable=retryable,
                provider=provider,
                source=source,
                charges=charges,
            )
        )

    def pause(self, task_id: str, reason: str = "", *, source: str | None = None) -> str:
        """Hold the task back; raises :class:`rsjobs.InvalidTransition` when terminal."""
        r = self._runner()
        return r.run(r.client.pause(task_id, reason, source=source))

    def resume(self, task_id: str, reason: str = "", *, source: str | None = None) -> str:
        """Put a PAUSED task back on its queue."""
        r = self._runner()
        return r.run(r.client.resume(task_id, reason, source=source))

    def retry(
        self,
        task_id: str,
        reason: str = "",
        *,
        ref: TaskRef | None = None,
        source: str | None = None,
    ) -> RetryResult:
        """Start a FAILED, TIMED_OUT or CANCELLED task over as a new task (see
        :meth:`rsjobs.Client.retry`)."""
        r = self._runner()
        return r.run(r.client.retry(task_id, reason, ref=ref, source=source))

    def replay(
        self,
        task_id: str,
        reason: str = "",
        *,
        ref: TaskRef | None = None,
        source: str | None = None,
    ) -> RetryResult:
        """Start a SUCCEEDED task over as a new task (see :meth:`rsjobs.Client.replay`)."""
        r = self._runner()
        return r.run(r.client.replay(task_id, reason, ref=ref, source=source))

    def restart(
        self,
        task_id: str,
        reason: str = "",
        *,
        ref: TaskRef | None = None,
        source: str | None = None,
    ) -> RetryResult:
        """Replay a SUCCEEDED task, retry any other (see :meth:`rsjobs.Client.restart`)."""
        r = self._runner()
        return r.run(r.client.restart(task_id, reason, ref=ref, source=source))

    def select(self, where: TaskFilter, *, limit: int = 100) -> tuple[int, list[str]]:
        """How many tasks a filter selects, and the oldest ``limit`` ids."""
        r = self._runner()
        return r.run(r.client.select(where, limit=limit))

    def pause_queue(self, queue: str, reason: str = "", *, source: str | None = None) -> QueuePause:
        """Pause a whole queue (see :meth:`rsjobs.Client.pause_queue`)."""
        r = self._runner()
        return r.run(r.client.pause_queue(queue, reason, source=source))

    def resume_queue(
        self, queue: str, reason: str = "", *, source: str | None = None
    ) -> QueuePause:
        """Let a paused queue go on."""
        r = self._runner()
        return r.run(r.client.resume_queue(queue, reason, source=source))

    def delete_queue(self, queue: str) -> int:
        """Remove an unused queue (see :meth:`Client.delete_queue`)."""
        r = self._runner()
        return r.run(r.client.delete_queue(queue))

    def paused_queues(self) -> dict[str, QueuePause]:
        """Every paused queue of the namespace."""
        r = self._runner()
        return r.run(r.client.paused_queues())

    def bulk_cancel(
        self,
        where: TaskFilter,
        *,
        dry_run: bool = False,
        limit: int = 100,
        reason: str = "",
        source: str | None = None,
    ) -> BulkResult:
        """Cancel the unfinished tasks a filter selects (see
        :meth:`rsjobs.Client.bulk_cancel`)."""
        r = self._runner()
        return r.run(
            r.client.bulk_cancel(where, dry_run=dry_run, limit=limit, reason=reason, source=source)
        )

    def bulk_retry(
        self,
        where: TaskFilter,
        *,
        dry_run: bool = False,
        limit: int = 100,
        reason: str = "",
        source: str | None = None,
    ) -> BulkResult:
        """Start over the failed tasks a filter selects (see
        :meth:`rsjobs.Client.bulk_retry`)."""
        r = self._runner()
        return r.run(
            r.client.bulk_retry(where, dry_run=dry_run, limit=limit, reason=reason, source=source)
        )
