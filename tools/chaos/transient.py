"""Errors after which the same call may get another answer: the harness retries them.

rsjobs' own policy (:data:`rsjobs.transient.TRANSIENT`: a restart, a broken connection, a
failover's READONLY...), the HTTP client's transport errors, and, in durable mode, a write
Redis applied but could not confirm on a replica in time (:class:`rsjobs.NotReplicated`):
its outcome is unknown, exactly like a reply lost in a restart, and repeating it is safe.
"""

from __future__ import annotations

import httpx

from rsjobs.errors import NotReplicated
from rsjobs.store.transient import TRANSIENT as RSJOBS_TRANSIENT

__all__ = ["TRANSIENT"]

TRANSIENT: tuple[type[BaseException], ...] = (
    *RSJOBS_TRANSIENT,
    httpx.TransportError,
    NotReplicated,
)
