"""Polls of DEFERRED tasks: a worker whose registry has pollers claims due polls
(``poll.lua``), runs each type's poller off the handler slots, and hands its answer to
``resolve.lua``: a result, a failure, or AGAIN (the next poll after ``poll_every_ms``).

A claim holds a poll for ``claim_ms``: a worker that dies while polling leaves nothing
behind, the poll is due again then. A poller that raises (the provider is unreachable) is
asked again at the next poll: the longest wait bounds how long that can go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from ..codec import decode, encode_payload
from ..errors import PayloadError, RedisUnavailable, RsjobsError
from ..model import is_terminal
from ..store import Store
from ..store.replies import Code, PollClaim
from .deferral import PollContext, PollResult
from .registry import Registry

if TYPE_CHECKING:
    from ..settings import Settings

__all__ = ["PollRunner"]

log = logging.getLogger("rsjobs.worker")


class PollRunner:
    """Claims and runs due polls for one worker, ``concurrency`` at a time."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        settings: Settings,
        *,
        name: str,
        every_ms: int = 250,
        claim_ms: int = 30_000,
        concurrency: int = 8,
    ) -> None:
        self.store = store
        self.registry = registry
        self.settings = settings
        self.name = name
        self.every_ms = every_ms
        self.claim_ms = claim_ms
        self.concurrency = concurrency
        self.running: set[asyncio.Task[None]] = set()
        #: polls answered (any answer), for tests and the registration
        self.polled = 0

    async def run(self, closing: asyncio.Event) -> None:
        """Until ``closing`` is set: claim what is due and free, run it."""
        while not closing.is_set():
            free = self.concurrency - len(self.running)
            if free > 0:
                try:
                    await self.tick(free)
                except RedisUnavailable:
                    pass
                except RsjobsError as exc:
                    log.warning("worker %s: polling failed (%s)", self.name, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(closing.wait(), self.every_ms / 1000)

    async def tick(self, free: int) -> int:
        """Claim up to ``free`` due polls and start them (of every shard of a sharded
        namespace, shard by shard); how many were claimed."""
        claimed = 0
        for store in await self.store.each():
            if claimed >= free:
                break
            deferred = store.deferred
            due = await deferred.due_polls(free - claimed)
            if not due:
                continue
            claims = [
                c for c in await deferred.claim_polls(due, self.claim_ms) if c.code is Code.APPLIED
            ]
            for c in claims:
                task = asyncio.get_running_loop().create_task(self.poll(c))
                self.running.add(task)
                task.add_done_callback(self.running.discard)
            claimed += len(claims)
        return claimed

    async def poll(self, c: PollClaim) -> None:
        """Run one claimed poll and write its answer."""
        poller = self.registry.get_poller(c.type)
        if poller is None:
            return  # a worker with that type's poller takes it when the claim lapses
        try:
            payload = decode(c.payload) if c.payload else None
        except Exception:
            payload = None
        ctx = PollContext(c.id, c.type, c.attempt, c.external_id, c.provider, payload)
        try:
            async with asyncio.timeout(self.claim_ms / 1000 * 0.8):
                answer = await poller.fn(ctx)
        except Exception as exc:
            log.warning(
                "worker %s: poller of %s (task %s, %s) raised %s: %s; polling again later",
                self.name,
                c.type,
                c.id,
                c.external_id,
                type(exc).__name__,
                exc,
            )
            answer = PollResult.pending()
        if not isinstance(answer, PollResult):
            log.error(
                "worker %s: poller of %s answered %r, not a PollResult", self.name, c.type, answer
            )
            answer = PollResult.pending()
        await self.answer(c, answer)

    async def answer(self, c: PollClaim, answer: PollResult) -> None:
        deferred = (await self.store.at(c.id)).deferred  # the task's shard
        ref = await deferred.ref(c.id)
        if ref is None:
            return
        event, body, etype = "AGAIN", "", ""
        if answer.kind == "DONE":
            try:
                body = encode_payload(answer.result, self.settings.payload_limit, "result").decode()
                event = "COMPLETE"
            except PayloadError as exc:
                event, body, etype = "FAIL", str(exc), "PayloadError"
        elif answer.kind == "FAILED":
            event, body, etype = (
                "FAIL",
                answer.error[:2000] or "the outside job failed",
                "ExternalError",
            )
        reply = await deferred.resolve(
            "worker",
            c.id,
            ref,
            event,
            attempt=c.attempt,
            external_id=c.external_id,
            body=body,
            error_type=etype,
            retryable=answer.retryable,
            via="poll",
        )
        self.polled += 1
        if reply.code is Code.APPLIED and ref.wf and is_terminal(reply.state):
            from ..workflows.spawn import redrive

            with contextlib.suppress(Exception):
                await redrive(self.store, ref.wf, "worker")

    async def drain(self) -> None:
        if self.running:
            await asyncio.gather(*self.running, return_exceptions=True)
