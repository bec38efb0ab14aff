"""The hook runner (``rsjobs hooks run``): runs hooks and sends webhooks, outside the
transitions that caused them.

Its own process, not a loop of the worker or the reaper: a hook may be slow (a mail
server, a frontend callback) and must never hold a worker's slot or delay a sweep; it
scales by running more runners, which share the hook stream through one consumer group.

One pass (:meth:`HookRunner.step`):
1. the entries this runner's name still holds (a restart under the same name), and those
   a dead runner held past ``claim_idle_ms`` (XAUTOCLAIM);
2. the due retries, each claimed by a script for ``retry_claim_ms``;
3. new entries (XREADGROUP, blocking up to ``block_ms``).
For each entry every matching hook and webhook runs once; the entry is acked and deleted
together with the retries of those that failed (one MULTI), so a crash at any point
leaves the entry pending (delivered again) or its retries waiting: every change is
delivered at least once. A run that fails its last attempt is dead-lettered
(``rsjobs hooks dead``, ``rsjobs hooks requeue``). A hook never changes a task's state: the
runner only reads tasks.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time
from collections.abc import Sequence

import msgspec

from ..errors import ConfigError, CorruptData, RsjobsError
from ..extras import require
from ..schemas import TaskInfo
from ..store import Store
from ..store.hooks import HookEntry, HookRetry, HookStore
from .registry import Backoff, Hook, HookEvent, Hooks, call_hook
from .webhooks import DELIVERY_HEADER, SIGNATURE_HEADER, Delivery, Webhook, body_of, sign

try:  # the hooks extra: webhook deliveries
    import httpx
except ImportError:  # pragma: no cover - installed without it (HookRunner says so)
    httpx = None  # type: ignore[assignment]

__all__ = ["HookRunner"]

log = logging.getLogger("rsjobs.hooks")

_webhook_dec = msgspec.json.Decoder(Webhook)
_delivery_enc = msgspec.json.Encoder()

Listener = Hook | Webhook


def _backoff(listener: Listener) -> Backoff:
    if isinstance(listener, Hook):
        return listener.backoff
    return Backoff(
        max_attempts=listener.max_attempts,
        base_ms=listener.backoff_base_ms,
        max_ms=listener.backoff_max_ms,
    )


class HookRunner:
    """Runs ``hooks`` (may be empty: webhooks only) for one store's namespace."""

    def __init__(
        self,
        store: Store,
        hooks: Hooks | None = None,
        *,
        name: str | None = None,
        batch: int = 50,
        concurrency: int = 16,
        block_ms: int = 1000,
        claim_idle_ms: int = 60_000,
        retry_claim_ms: int = 60_000,
        webhooks_refresh_ms: int = 2000,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        if not 1 <= batch <= 1000 or not 1 <= concurrency <= 1000:
            raise ConfigError("batch and concurrency must be between 1 and 1000")
        if claim_idle_ms < 100 or retry_claim_ms < 100 or block_ms < 1:
            raise ConfigError("claim_idle_ms and retry_claim_ms must be >= 100, block_ms >= 1")
        self.store = store
        self.hooks = hooks or Hooks()
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.batch, self.block_ms = batch, block_ms
        self.claim_idle_ms, self.retry_claim_ms = claim_idle_ms, retry_claim_ms
        self.webhooks_refresh_ms = webhooks_refresh_ms
        self._sem = asyncio.Semaphore(concurrency)
        if http is None:
            require("hooks", "rsjobs hooks (webhook deliveries)", "httpx")
        self._http = http or httpx.AsyncClient()
        self._own_http = http is None
        self._webhooks: dict[str, Webhook] = {}
        self._refreshed = -1.0
        self._forgot: dict[str, float] = {}
        #: the hook store of each shard (one: the namespace's, until start())
        self._shards: list[HookStore] = [store.hooks]
        self._started = False
        #: runs made, failed runs, dead letters, consumers of gone runners removed from the
        #: group (for logs and tests)
        self.runs = self.failures = self.buried = self.forgotten = 0

    async def start(self) -> None:
        """Create the group (on every shard's hook stream) and tell the scripts which
        states the hooks want (on every shard)."""
        self._shards = [s.hooks for s in await self.store.each()]
        for hs in self._shards:
            await hs.ensure_group()
        for hook in self.hooks:
            await self.store.hooks.listen(hook.listener, hook.states)
        await self._refresh(force=True)
        self._started = True

    async def close(self) -> None:
        if self._own_http:
            await self._http.aclose()

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Run passes until ``stop`` is set; a passing Redis error is logged and retried."""
        stop = stop or asyncio.Event()
        if not self._started:
            await self.start()
        # one loop per shard (a sharded namespace has a hook stream per shard), sharing
        # the runner's concurrency
        await asyncio.gather(*(self._run_shard(hs, stop) for hs in self._shards))

    async def _run_shard(self, hs: HookStore, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self._step(hs)
            except RsjobsError as exc:
                log.warning("hook pass failed: %s", exc)
                await asyncio.sleep(1)

    async def step(self) -> int:
        """One pass (see the module) over every shard; how many entries and retries it
        handled."""
        if not self._started:
            await self.start()
        done = 0
        for hs in self._shards:
            done += await self._step(hs, block=len(self._shards) == 1)
        return done

    async def _step(self, hs: HookStore, block: bool = True) -> int:
        """One pass over one shard's hook stream and retries."""
        await self._refresh()
        held = await hs.pending_of(self.name, self.batch)
        held += await hs.reclaim(self.name, self.claim_idle_ms, self.batch)
        await self._forget_gone(hs)
        done = await self._entries(hs, held)
        done += await self._retries(hs)
        wait = 1 if done or not block else self.block_ms
        done += await self._entries(hs, await hs.read(self.name, self.batch, wait))
        return done

    @property
    def webhook_count(self) -> int:
        return len(self._webhooks)

    async def _forget_gone(self, hs: HookStore) -> None:
        """Once per ``claim_idle_ms`` (per shard): remove from the group the consumers of
        runners that are gone (idle that long) and hold nothing (what they held was
        reclaimed above)."""
        loop = asyncio.get_running_loop()
        last = self._forgot.get(hs.keys.tag, -1.0)
        if last >= 0 and (loop.time() - last) * 1000 < self.claim_idle_ms:
            return
        self._forgot[hs.keys.tag] = loop.time()
        gone = await hs.forget_idle(self.name, self.claim_idle_ms)
        if gone:
            self.forgotten += len(gone)
            log.info("removed the consumers of gone hook runners: %s", ", ".join(gone))

    # -- listeners ---------------------------------------------------------------------------

    async def _refresh(self, force: bool = False) -> None:
        loop = asyncio.get_running_loop()
        if not force and (loop.time() - self._refreshed) * 1000 < self.webhooks_refresh_ms:
            return
        found: dict[str, Webhook] = {}
        for name, raw in (await self.store.hooks.webhooks()).items():
            try:
                found[name] = _webhook_dec.decode(raw)
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                log.warning("webhook %s: unreadable settings skipped: %s", name, exc)
        self._webhooks = found
        self._refreshed = loop.time()

    def _listener(self, name: str) -> Listener | None:
        kind, _, rest = name.partition(":")
        if kind == "hook":
            return self.hooks.get(rest)
        if kind == "webhook":
            return self._webhooks.get(rest)
        return None

    def _listeners(self, state: str, type: str) -> list[Listener]:
        out: list[Listener] = [h for h in self.hooks if h.wants(state, type)]
        out += [w for w in self._webhooks.values() if w.wants(state, type)]
        return out

    # -- runs --------------------------------------------------------------------------------

    async def _task(self, task_id: str) -> TaskInfo | None:
        try:
            return await self.store.tasks.get(task_id)
        except CorruptData:
            return None

    async def _attempt(self, listener: Listener, event: HookEvent) -> str:
        """Run ``listener`` once on ``event``: '' when it succeeded, else the error."""
        self.runs += 1
        # (at most half the claim: a run never outlives the claim on its entry or retry)
        limit = min(self.claim_idle_ms, self.retry_claim_ms) / 2000
        if isinstance(listener, Hook):
            timeout = min(listener.timeout_ms / 1000, limit)
            try:
                await asyncio.wait_for(call_hook(listener, event), timeout)
                return ""
            except TimeoutError:
                err = f"timed out after {timeout:g} s"
            except Exception as exc:  # a hook's own failure is retried, never fatal here
                err = f"{type(exc).__name__}: {exc}"
        else:
            hook = listener
            if hook.timeout_ms / 1000 > limit:
                hook = msgspec.structs.replace(hook, timeout_ms=int(limit * 1000))
            d = await post(self._http, hook, event)
            at = await self.store.at(event.task_id)  # the log lives on the task's shard
            await at.hooks.log_delivery(event.task_id, _delivery_enc.encode(d))
            err = d.error
        self.failures += 1
        log.info("hook %s on %s (%s) failed: %s", _name(listener), event.task_id, event.state, err)
        return err[:2000]

    def _event(self, e: HookEntry, task: TaskInfo | None, attempt: int) -> HookEvent:
        return HookEvent(
            delivery=e.entry,
            task_id=e.task_id,
            queue=e.queue,
            state=e.state,
            event=e.event,
            hid=e.hid,
            type=task.type if task is not None else "",
            task=task,
            attempt=attempt,
        )

    async def _entries(self, hs: HookStore, entries: Sequence[HookEntry]) -> int:
        await asyncio.gather(*(self._entry(hs, e) for e in entries))
        return len(entries)

    async def _entry(self, hs: HookStore, e: HookEntry) -> None:
        async with self._sem:
            task = await self._task(e.task_id)
            listeners = self._listeners(e.state, task.type if task is not None else "")
            event = self._event(e, task, 1)
            errors = await asyncio.gather(*(self._attempt(li, event) for li in listeners))
            now = await hs.now_ms()
            retries: list[tuple[HookRetry, int]] = []
            dead: list[HookRetry] = []
            for li, err in zip(listeners, errors, strict=True):
                if not err:
                    continue
                r = _retry(li.listener, e, 1, err)
                b = _backoff(li)
                if b.max_attempts <= 1:
                    dead.append(r)
                else:
                    retries.append((r, now + b.delay_ms(1, random.random())))
            self.buried += len(dead)
            await hs.settle([e.entry], retries, dead)

    async def _retries(self, hs: HookStore) -> int:
        due = await hs.due(self.batch, self.retry_claim_ms)
        await asyncio.gather(*(self._retry(hs, m, r) for m, r in due))
        return len(due)

    async def _retry(self, hs: HookStore, member: str, r: HookRetry | None) -> None:
        async with self._sem:
            if r is None:
                await hs.retry_done(member)  # not one this runner wrote: dropped
                return
            attempt = r.attempts + 1
            listener = self._listener(r.listener)
            if listener is None:
                err = f"no hook or webhook {r.listener!r} in this runner"
                b = Backoff()
            else:
                task = await self._task(r.task_id)
                err = await self._attempt(listener, self._event(r.of_entry(), task, attempt))
                b = _backoff(listener)
            if not err:
                await hs.retry_done(member)
                return
            nxt = msgspec.structs.replace(r, attempts=attempt, error=err)
            if attempt >= b.max_attempts:
                self.buried += 1
                await hs.bury(member, nxt)
            else:
                now = await hs.now_ms()
                await hs.retry_again(member, nxt, now + b.delay_ms(attempt, random.random()))


def _name(listener: Listener) -> str:
    return listener.listener


def _retry(listener: str, e: HookEntry, attempts: int, error: str) -> HookRetry:
    return HookRetry(
        listener=listener,
        entry=e.entry,
        task_id=e.task_id,
        queue=e.queue,
        state=e.state,
        event=e.event,
        hid=e.hid,
        attempts=attempts,
        error=error,
    )


async def post(http: httpx.AsyncClient, hook: Webhook, event: HookEvent) -> Delivery:
    """Send ``event`` to ``hook`` once; the attempt as logged (ok: a 2xx answer)."""
    body = body_of(event)
    now = time.time()
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: sign(hook.secret, body, int(now)),
        DELIVERY_HEADER: event.delivery,
        "User-Agent": "rsjobs-webhooks",
    }
    status, error = 0, ""
    t0 = time.monotonic()
    try:
        r = await http.post(hook.url, content=body, headers=headers, timeout=hook.timeout_ms / 1000)
        status = r.status_code
        if not 200 <= status < 300:
            error = f"HTTP {status}"
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"[:500]
    return Delivery(
        webhook=hook.name,
        delivery=event.delivery,
        state=event.state,
        attempt=event.attempt,
        at=int(now * 1000),
        ms=int((time.monotonic() - t0) * 1000),
        status=status,
        ok=not error,
        error=error,
    )
