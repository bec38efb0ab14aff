"""Outside results of deferred attempts, for the client and the web app: find the task
(by its id, or by the provider's id through the external key), end its wait through
``resolve.lua``, and wake the workflow driver for a workflow's task.

What each answer means (:class:`Resolution`): ``code`` APPLIED (the result ended the
wait), REPEATED (the same result again: nothing written), REFUSED (the task is not waiting:
finished, timed out past its longest wait, cancelled, superseded by a regenerate) and
LEASE_LOST (a result for an attempt or outside job that is not the current one): both
recorded in the task's history; NOT_FOUND (no task, nothing written).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import NamedTuple

from .codec import encode_payload
from .costs import Charges
from .model import is_terminal
from .store import Code, Store
from .store.deferred import DEFAULT_PROVIDER, check_external

__all__ = ["Resolution", "resolve_external"]


class Resolution(NamedTuple):
    """How an outside result was answered: the reply code, the task and its state."""

    code: Code
    task_id: str
    state: str


async def resolve_external(
    store: Store,
    *,
    event: str,
    task_id: str | None = None,
    external_id: str = "",
    provider: str = DEFAULT_PROVIDER,
    attempt: int | None = None,
    result: object = None,
    error: str = "",
    error_type: str = "ExternalError",
    retryable: bool = True,
    via: str = "api",
    source: str = "api",
    charges: Mapping[str, float] | None = None,
) -> Resolution:
    """COMPLETE (with ``result``) or FAIL (with ``error``) the wait of a DEFERRED task,
    named by ``task_id`` (and ``attempt``: a callback token's) or by ``external_id`` of
    ``provider``; ``charges`` (unit -> amount) are what the outside job cost, added to the
    attempt's costs (:mod:`rsjobs.costs`). Raises :class:`rsjobs.ConfigError` for a
    malformed id, :class:`rsjobs.ChargeError` for a bad charge and
    :class:`rsjobs.PayloadError` for a result over the payload limit (nothing written)."""
    if event not in ("COMPLETE", "FAIL"):
        raise ValueError(event)
    bill = Charges()
    for unit, amount in (charges or {}).items():
        bill.add(amount, unit)
    if external_id:
        check_external(external_id, provider)
    body = "null"
    if event == "COMPLETE":
        body = encode_payload(result, store.settings.payload_limit, "result").decode()
    else:
        body = error[:2000] or "the outside job failed"
    if task_id is None:
        # the outside job's key lives on its task's shard: look on each (sharded)
        found = None
        for s in await store.each():
            found = await s.deferred.lookup(provider, external_id)
            if found is not None:
                break
        if found is None:
            return Resolution(Code.NOT_FOUND, "", "")
        task_id = found.task_id
        if attempt is None:
            attempt = found.attempt
    deferred = (await store.at(task_id)).deferred
    ref = await deferred.ref(task_id)
    if ref is None:
        return Resolution(Code.NOT_FOUND, task_id, "")
    reply = await deferred.resolve(
        source,
        task_id,
        ref,
        event,
        attempt=attempt,
        external_id=external_id,
        body=body,
        error_type=error_type if event == "FAIL" else "",
        retryable=retryable,
        via=via,
        charges=bill.text(),
    )
    if reply.code is Code.APPLIED and ref.wf and is_terminal(reply.state):
        # the workflow accounts for its task now (the driver would, at its next pass)
        from .workflows.spawn import redrive

        with contextlib.suppress(Exception):
            await redrive(store, ref.wf, source)
    return Resolution(reply.code, task_id, reply.state)
