"""Handlers used by the tests (importable by worker child processes as tests.support.apps:tasks)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from rsjobs import Context, NonRetryable, Registry

tasks = Registry()

#: the gates the "gated" handler waits on, by name: a test of an in-process worker opens
#: one when the work it stands for should end (no timer decides it)
GATES: dict[str, asyncio.Event] = {}


@tasks.handler("noop")
async def noop(ctx: Context, payload: Any) -> Any:
    return payload


@tasks.handler("sleep")
async def sleep(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    """Sleep payload["s"] seconds in steps, reporting progress; returns who ran it."""
    total = float(payload.get("s", 1.0))
    steps = int(payload.get("steps", 10))
    for i in range(steps):
        await ctx.progress(100 * i / steps, f"step {i + 1}/{steps}")
        await asyncio.sleep(total / steps)
    return {"worker": ctx.worker, "attempt": ctx.attempt, "pid": os.getpid()}


@tasks.handler("sync_sleep")
def sync_sleep(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    """A sync handler in a thread that honours cancellation by polling."""
    end = time.monotonic() + float(payload.get("s", 1.0))
    while time.monotonic() < end:
        if ctx.cancelled.wait(0.02):
            return {"stopped": True}
    return {"worker": ctx.worker, "attempt": ctx.attempt}


@tasks.handler("fail")
async def fail(ctx: Context, payload: dict[str, Any]) -> None:
    """Fails until attempt payload["until"] (exclusive), then succeeds."""
    if ctx.attempt < int(payload.get("until", 10**9)):
        raise RuntimeError(f"planned failure on attempt {ctx.attempt}")


@tasks.handler("fatal")
async def fatal(ctx: Context, payload: Any) -> None:
    raise NonRetryable("bad input, retrying cannot help")


@tasks.handler("value_error", non_retryable=(ValueError,))
async def value_error(ctx: Context, payload: Any) -> None:
    raise ValueError("invalid prompt")


@tasks.handler("sync_stubborn")
def sync_stubborn(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    """A sync handler that ignores cancellation: sleeps payload["s"] seconds, whatever."""
    time.sleep(float(payload.get("s", 1.0)))
    return {"worker": ctx.worker, "attempt": ctx.attempt, "slept": payload.get("s")}


def _open_input(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


@tasks.handler("needs_file")
async def needs_file(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    """Fails (FileNotFoundError, from a nested call) until payload["path"] exists: an
    operator fixes the cause, then retries the task."""
    return {"read": _open_input(str(payload["path"])), "attempt": ctx.attempt}


@tasks.handler("charge")
async def charge(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    """Charges payload["charges"] ({unit: amount}) to its attempt, then tries each of
    payload["bad"] ([amount, unit] pairs: every one must raise ChargeError at once and
    record nothing); sleeps payload["first_s"] seconds on its first attempt, and fails on
    the attempts before payload["until"]. Returns the ChargeErrors' messages."""
    from rsjobs import ChargeError

    for unit, amount in dict(payload.get("charges") or {}).items():
        ctx.charge(amount, unit=unit)
    refused = []
    for amount, unit in payload.get("bad") or []:
        try:  # (a text is a float's: "nan", "inf", "-1")
            ctx.charge(float(amount) if isinstance(amount, str) else amount, unit=unit)
        except ChargeError as exc:
            refused.append(str(exc))
    if ctx.attempt == 1:
        await asyncio.sleep(float(payload.get("first_s", 0)))
    if ctx.attempt < int(payload.get("until", 0)):
        raise RuntimeError(f"planned failure on attempt {ctx.attempt}")
    return {"refused": refused, "attempt": ctx.attempt}


@tasks.handler("hold")
async def hold(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    """Sleep payload["s"] seconds on its first attempt only (a later attempt, after the
    reaper took the first back, returns at once)."""
    if ctx.attempt == 1:
        await asyncio.sleep(float(payload.get("s", 1.0)))
    return {"attempt": ctx.attempt}


@tasks.handler("gated")
async def gated(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    """Waits until the test opens ``GATES[payload["gate"]]`` (in-process workers only)."""
    await GATES.setdefault(str(payload["gate"]), asyncio.Event()).wait()
    return {"attempt": ctx.attempt}
