"""The chaos workload's handler: ``tools.chaos.handlers:tasks`` (task types ``chaos`` and
``chaos.rated``, the same handler; ``chaos.wf`` for workflows).

Every call records itself in the run's Redis before doing anything (a ``start`` record),
and again when it returns or raises (``end``) or is cancelled (``stop``), or just before a
poison task SIGKILLs its own worker (``kill``), on the stream
:func:`exec_key` (outside the rsjobs namespace's keys). The checker counts these records
against the START entries of the tasks' histories: that is how it sees duplicate
executions. A result names the attempt and worker that produced it, which the checker
compares with the task's lease.

The worker processes get the Redis URL and namespace from ``RSJOBS_CHAOS_URL`` and
``RSJOBS_CHAOS_NAMESPACE`` (set by the harness).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import traceback
import uuid
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from rsjobs.errors import NonRetryable
from rsjobs.store.transient import TRANSIENT, is_transient
from rsjobs.worker import Context, Registry

__all__ = ["exec_key", "external_id", "jobs_key", "tasks"]

tasks = Registry()

#: what a record's write outlives (rsjobs's own policy: a restart, a failover, a
#: cluster settling; redis-py 5.2 gives the cluster's replies no class of their own)
_TRANSIENT = (*TRANSIENT, ResponseError)
_redis: Redis | None = None


def exec_key(namespace: str) -> str:
    """The stream of execution records of a chaos run in ``namespace``."""
    return f"rschaos:{{{namespace}}}:exec"


def jobs_key(namespace: str) -> str:
    """The hash of the outside jobs deferred tasks hand their attempts to: external id ->
    the result the job will deliver (JSON), which the producer, as the provider, sends."""
    return f"rschaos:{{{namespace}}}:jobs"


def external_id(task_id: str, attempt: int, exec_id: str) -> str:
    """The outside job of one execution of a deferred task's attempt: unique per execution,
    as a provider's job ids are (an attempt number alone is not: a failover can make Redis
    forget an attempt, whose number the next START then gives again, and the forgotten
    attempt's job would answer for it)."""
    return f"chaos-{task_id}-a{attempt}-{exec_id[:12]}"


def _conn() -> Redis:
    global _redis
    if _redis is None:
        from rsjobs.client import connect

        _redis = connect(os.environ.get("RSJOBS_CHAOS_URL", "redis://127.0.0.1:6379/0"))
    return _redis


async def _record(
    ctx: Context, xid: str, ev: str, outcome: str = "", *, give_up_s: float = 0, began: int = 0
) -> None:
    """Append one record; retries through Redis restarts (forever unless ``give_up_s``).

    Records carry the execution id, so a retried XADD that did land twice is harmless."""
    key = exec_key(os.environ.get("RSJOBS_CHAOS_NAMESPACE", "chaos"))
    fields = {
        "x": xid,
        "t": ctx.task_id,
        "a": ctx.attempt,
        "w": ctx.worker,
        "pid": os.getpid(),
        "ev": ev,
        "o": outcome,
    }
    if began:
        # when the handler began (just after its START): the record itself may land much
        # later, retried through a restart or failover
        fields["b"] = began
    loop = asyncio.get_running_loop()
    end = loop.time() + give_up_s
    while True:
        try:
            await _conn().xadd(key, fields)
            return
        except _TRANSIENT as exc:
            if not is_transient(exc):
                raise
            if give_up_s and loop.time() > end:
                return
            await asyncio.sleep(0.1)


async def _hset(key: str, field: str, value: dict[str, Any]) -> None:
    """HSET, retried through Redis restarts (idempotent)."""
    import json

    while True:
        try:
            await _conn().hset(key, field, json.dumps(value))
            return
        except _TRANSIENT as exc:
            if not is_transient(exc):
                raise
            await asyncio.sleep(0.1)


class Flaky(RuntimeError):
    """Raised by a flaky task's early attempts (retryable)."""


class Fatal(NonRetryable):
    """Raised by a fatal task (non-retryable)."""


def _dump_stacks(signum: int, frame: object) -> None:
    """SIGUSR1: print every asyncio task's stack to stderr (the worker's log), so that a
    worker which does not stop in time leaves evidence before the harness kills it."""
    loop = asyncio._get_running_loop()
    print(f"--- stacks of {os.getpid()} (SIGUSR1) ---", file=sys.stderr)
    traceback.print_stack(frame, file=sys.stderr)  # type: ignore[arg-type]
    if loop is not None:
        for t in asyncio.all_tasks(loop):
            print(f"--- {t!r}", file=sys.stderr)
            t.print_stack(file=sys.stderr)
    sys.stderr.flush()


if "RSJOBS_CHAOS_NAMESPACE" in os.environ:  # inside a chaos worker only
    signal.signal(signal.SIGUSR1, _dump_stacks)


@tasks.handler("chaos")
async def chaos(ctx: Context, payload: dict[str, Any]) -> Any:
    xid = uuid.uuid4().hex
    await _record(ctx, xid, "start", began=int(time.time() * 1000))
    kind = str(payload.get("k", "fast"))
    try:
        if kind == "poison":
            # the record goes first: the checker knows this worker is dead from this
            # moment (Redis TIME), however late the harness sees the exit
            await _record(ctx, xid, "kill")
            os.kill(os.getpid(), signal.SIGKILL)
        ms = int(payload.get("ms") or 0)
        if kind == "slow":
            await asyncio.sleep(ms / 2000)
            await ctx.progress(50, "half way")
            await asyncio.sleep(ms / 2000)
        elif ms:
            await asyncio.sleep(ms / 1000)
        if kind == "flaky" and ctx.attempt <= int(payload.get("fail") or 0):
            await _record(ctx, xid, "end", "fail")
            raise Flaky(f"attempt {ctx.attempt} fails on purpose")
        if kind == "fatal" or (kind == "chain" and payload.get("fail")):
            await _record(ctx, xid, "end", "fatal")
            raise Fatal("this task can never succeed")
        if kind == "deferred":
            # the outside job: what it will deliver is written down first (the producer,
            # as the provider, sends it); this attempt is then the job's to end
            ext = external_id(ctx.task_id, ctx.attempt, xid)
            result = {"attempt": ctx.attempt, "worker": ctx.worker, "pid": os.getpid(),
                      "exec": xid}  # fmt: skip
            await _hset(jobs_key(os.environ.get("RSJOBS_CHAOS_NAMESPACE", "chaos")), ext, result)
            await _record(ctx, xid, "end", "deferred")
            return ctx.defer(ext, provider="chaos", max_wait_ms=int(payload.get("wait") or 1500))
    except asyncio.CancelledError:
        await _record(ctx, xid, "stop", ctx.stop_reason or "cancelled", give_up_s=1.0)
        raise
    await _record(ctx, xid, "end", "ok")
    out: dict[str, Any] = {"attempt": ctx.attempt, "worker": ctx.worker, "pid": os.getpid(),
                           "exec": xid}  # fmt: skip
    if kind == "chain":
        # what it was given of its predecessors: the checker compares it with their ends
        out["got"] = sorted(ctx.predecessors)
        out["states"] = dict(ctx.predecessor_states)
    return out


# the share of the workload held to the run's rate limit (workload.RATED_TYPE): the same
# behaviour under another type
tasks.handler("chaos.rated")(chaos)


@tasks.handler("chaos.wf")
async def chaos_wf(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    """A task of the chaos workflow (``tools.chaos.flows``). Its input says what to do:
    sleep ``ms``; ``flaky``: item a's first attempt raises (retryable); ``fail_item``: that
    item fails for good on its first run (``retry`` 0), so the workflow goes
    PARTIALLY_FAILED until the producer retries it; ``ref_bytes``: the asset reference is
    that long (the next stage's payload carries it)."""
    xid = uuid.uuid4().hex
    await _record(ctx, xid, "start", began=int(time.time() * 1000))
    inp = payload.get("input") or {}
    item, retry = str(payload.get("item") or ""), int(payload.get("retry") or 0)
    try:
        await asyncio.sleep(int(inp.get("ms") or 0) / 1000)
        if inp.get("flaky") and item == "a" and ctx.attempt == 1:
            await _record(ctx, xid, "end", "fail")
            raise Flaky("the first attempt of item a fails on purpose")
        if inp.get("fail_item") == item and retry == 0:
            await _record(ctx, xid, "end", "fatal")
            raise Fatal(f"item {item} fails on its first run; a retry succeeds")
    except asyncio.CancelledError:
        await _record(ctx, xid, "stop", ctx.stop_reason or "cancelled", give_up_s=1.0)
        raise
    await _record(ctx, xid, "end", "ok")
    ref = f"chaos/{payload.get('workflow')}/v{payload.get('version')}/{item}"
    pad = int(inp.get("ref_bytes") or 0) - len(ref)
    if pad > 0:
        ref += "#" + "r" * pad
    meta = {"attempt": ctx.attempt, "worker": ctx.worker, "pid": os.getpid(), "exec": xid}
    return {"ref": ref, "kind": "json", "meta": meta}
