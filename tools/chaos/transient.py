"""Errors after which the same call may get another answer: the harness retries them.

rsjobs' own policy (:data:`rsjobs.transient.TRANSIENT`: a restart, a broken connection, a
failover's READONLY...), the HTTP client's transport errors, and, in durable mode, a write
Redis applied but could not confirm on a replica in time (:class:`rsjobs.NotReplicated`):
its outcome is unknown, exactly like a reply lost in a restart, and repeating it is safe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from rsjobs.errors import NotReplicated
from rsjobs.store.transient import TRANSIENT as RSJOBS_TRANSIENT

__all__ = ["TRANSIENT", "answer"]

TRANSIENT: tuple[type[BaseException], ...] = (
    *RSJOBS_TRANSIENT,
    httpx.TransportError,
    NotReplicated,
)


async def answer(call: Callable[[], Awaitable[Any]], within_s: float = 30.0) -> tuple[bool, Any]:
    """(True, what ``call()`` returned or the exception it raised), or (False, None) when
    only transient errors and HTTP 503s came back within ``within_s``: the question is what
    an input gets, not what an outage does."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within_s
    while True:
        try:
            got = await call()
        except TRANSIENT:
            got = None
        except Exception as exc:
            return True, exc
        if got is not None and not (isinstance(got, httpx.Response) and got.status_code == 503):
            return True, got
        if loop.time() > end:
            return False, None
        await asyncio.sleep(0.3)
