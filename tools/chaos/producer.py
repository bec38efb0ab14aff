"""The producer: submits the planned tasks on time, cancels some, repeats dedup submits,
and writes down every acknowledgement it gets (that is what the checker holds Redis to).

It rides out Redis restarts: a submit whose reply never came is *indeterminate* (the task
may or may not exist). Plain tasks are then submitted again (new ids; an orphan created by
the first call is reported by the checker as "created without ack"); tasks with a dedup key
are retried with the same key, which makes the retry idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from rsjobs.client import Client
from rsjobs.errors import InvalidTransition, TaskNotFound
from rsjobs.model import TERMINAL

from .records import CancelAck, Submission
from .workload import TaskSpec

__all__ = ["TRANSIENT", "Producer", "now_ms"]

#: errors after which the same call may succeed (a restart, a broken connection)
TRANSIENT: tuple[type[BaseException], ...] = (RedisConnectionError, RedisTimeoutError, OSError)


def now_ms() -> int:
    return int(time.time() * 1000)


class Producer:
    """Submits ``specs`` (sorted by ``at_s``) relative to a start time."""

    def __init__(
        self, client: Client, specs: list[TaskSpec], echo: Callable[[str], None] = print
    ) -> None:
        self.client = client
        self.specs = specs
        self.echo = echo
        self.submissions: list[Submission] = []
        self.indeterminate: list[int] = []
        self.cancels: list[CancelAck] = []
        #: cancel_running tasks that finished before they were seen RUNNING
        self.cancel_missed = 0
        #: pause_resume tasks paused (and resumed), and those that finished first
        self.paused = 0
        self.pause_missed = 0
        self.retries = 0
        self._side: set[asyncio.Task[None]] = set()

    @property
    def accepted_ids(self) -> list[str]:
        return list(dict.fromkeys(s.task_id for s in self.submissions))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._side.add(task)
        task.add_done_callback(self._side.discard)

    async def _retrying(self, what: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        """``what()`` until it answers (only for idempotent calls)."""
        backoff = 0.05
        while True:
            try:
                return await what()
            except TRANSIENT:
                self.retries += 1
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    # -- submitting ----------------------------------------------------------------------

    async def run(self, t0: float) -> None:
        """Submit every spec at ``t0 + spec.at_s`` (``t0`` on the loop's clock)."""
        loop = asyncio.get_running_loop()
        i = 0
        while i < len(self.specs):
            now = loop.time() - t0
            due: list[TaskSpec] = []
            while i < len(self.specs) and self.specs[i].at_s <= now:
                due.append(self.specs[i])
                i += 1
            if not due:
                await asyncio.sleep(min(0.05, max(0.0, self.specs[i].at_s - now)))
                continue
            keyed = [s for s in due if s.dedup]
            for s in keyed:
                self._spawn(self._submit_keyed(s))
            plain = [s for s in due if not s.dedup]
            if plain:
                await self._submit_plain(plain)

    async def _submit_plain(self, specs: list[TaskSpec]) -> None:
        backoff = 0.05
        while True:
            try:
                ids = await self.client.enqueue_many([s.request() for s in specs])
                break
            except TRANSIENT:
                # unknown outcome: the tasks may exist; submit them again under new ids
                self.indeterminate.extend(s.seq for s in specs)
                self.retries += 1
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
        ack = now_ms()
        for s, tid in zip(specs, ids, strict=True):
            self.submissions.append(Submission(seq=s.seq, kind=s.kind, task_id=tid, ack_ms=ack))
            self._after_submit(s, tid)

    async def _submit_keyed(self, s: TaskSpec) -> None:
        req = s.request()

        async def submit() -> str:
            return await self.client.enqueue(
                req.type,
                req.payload,
                queue=req.queue,
                max_attempts=req.max_attempts,
                timeout_ms=req.timeout_ms,
                delay_ms=req.delay_ms,
                dedup_key=req.dedup_key,
                backoff_base_ms=req.backoff_base_ms,
                backoff_max_ms=req.backoff_max_ms,
                wait_timeout_ms=req.wait_timeout_ms,
            )

        tid = str(await self._retrying(submit))
        self.submissions.append(
            Submission(seq=s.seq, kind=s.kind, task_id=tid, ack_ms=now_ms(), dedup=s.dedup)
        )
        self._after_submit(s, tid)
        if s.repeat_after_s >= 0:
            await asyncio.sleep(s.repeat_after_s)
            again = str(await self._retrying(submit))
            self.submissions.append(
                Submission(
                    seq=s.seq,
                    kind=s.kind,
                    task_id=again,
                    ack_ms=now_ms(),
                    dedup=s.dedup,
                    repeat=True,
                )
            )

    # -- cancelling ----------------------------------------------------------------------

    def _after_submit(self, s: TaskSpec, tid: str) -> None:
        if s.kind == "cancel_pending":
            self._spawn(self._cancel(tid, "pending"))
        elif s.kind == "cancel_running":
            self._spawn(self._cancel_when_running(tid))
        elif s.kind == "pause_resume":
            self._spawn(self._pause_resume(tid, int(s.payload.get("hold") or 0) / 1000))

    async def _cancel(self, tid: str, phase: str) -> None:
        try:
            state = await self._retrying(lambda: self.client.cancel(tid, f"chaos ({phase})"))
        except TaskNotFound:
            state = ""  # lost (the checker says so); nothing was cancelled
        self.cancels.append(CancelAck(task_id=tid, phase=phase, ack_ms=now_ms(), state=state))

    async def _cancel_when_running(self, tid: str) -> None:
        if await self._wait_running(tid, 60.0) == "RUNNING":
            await self._cancel(tid, "running")
        else:
            self.cancel_missed += 1

    async def _wait_running(self, tid: str, give_up_s: float) -> str:
        """Poll until the task is RUNNING or terminal; its state then ('' = gone)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + give_up_s
        state = ""
        while loop.time() < end:
            try:
                state = (await self.client.get(tid)).state
            except TRANSIENT:
                await asyncio.sleep(0.2)
                continue
            except TaskNotFound:
                return ""
            if state == "RUNNING" or state in TERMINAL:
                return state
            await asyncio.sleep(0.1)
        return state

    async def _pause_resume(self, tid: str, hold_s: float) -> None:
        """PAUSE (once RUNNING, or after 10 s whatever its state), wait, RESUME."""
        state = await self._wait_running(tid, 10.0)
        if not state or state in TERMINAL:
            self.pause_missed += 1
            return
        try:
            await self._retrying(lambda: self.client.pause(tid, "chaos"))
        except (InvalidTransition, TaskNotFound):
            self.pause_missed += 1  # finished meanwhile
            return
        self.paused += 1
        await asyncio.sleep(hold_s)
        # until it answers: a task left PAUSED would never finish (NOT_TERMINAL)
        with contextlib.suppress(InvalidTransition, TaskNotFound):
            await self._retrying(lambda: self.client.resume(tid, "chaos"))

    async def finish(self, timeout_s: float) -> int:
        """Wait for the side tasks (repeats, cancels); returns how many had to be dropped."""
        if self._side:
            await asyncio.wait(set(self._side), timeout=timeout_s)
        left = set(self._side)
        for t in left:
            t.cancel()
        for t in left:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        return len(left)
