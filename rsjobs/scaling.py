"""The autoscaling signal: how many workers a queue wants, from its backlog.

For a queue: its waiting (PENDING) and running tasks, how long its oldest waiting entry has
waited, the mean run time of its attempts that succeeded (the costs hash), and the workers
registered now that serve it (their slots: ``--concurrency``). The slots it wants:

* every running task keeps its slot;
* with a target wait ``W`` and a mean run time ``D``, each further slot starts
  ``floor(W / D) + 1`` waiting tasks within ``W`` (one at once, one more every ``D``), so
  the waiting ones want ``ceil(pending / (floor(W / D) + 1))`` slots; with no target wait
  (0) or no run time known yet, one slot each;

and the workers it wants are those slots over the slots per worker (the mean concurrency
of the live workers that serve the queue; ``slots_per_worker`` when given, 1 when none
runs). Nothing waiting and nothing running: 0, so that a pool can scale to zero. Served
as ``GET /queues/{queue}/scale`` (for KEDA's metrics-api scaler) and as the gauge
``rsjobs_queue_workers_wanted{queue}`` (target wait 0) on every ``/metrics``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

import msgspec

from .errors import ConfigError, UnknownQueue
from .names import is_name

__all__ = [
    "ScaleSignal",
    "per_worker",
    "scale_signal",
    "serving",
    "slots_wanted",
    "workers_wanted",
]


class ScaleSignal(msgspec.Struct, frozen=True, kw_only=True):
    """One queue's autoscaling figures (``GET /queues/{queue}/scale``)."""

    queue: str
    pending: int
    running: int
    #: how long the oldest entry no worker has read yet has waited (ms; 0: none waits)
    oldest_wait_ms: int
    #: the mean run time of its attempts that succeeded (ms; 0: none yet)
    mean_run_ms: int
    target_wait_ms: int
    #: live workers serving the queue now, and their slots
    workers: int
    slots: int
    slots_per_worker: int
    wanted_slots: int
    wanted_workers: int


def slots_wanted(pending: int, running: int, mean_run_ms: int, target_wait_ms: int) -> int:
    """The slots that run the ``running`` tasks and start each of the ``pending`` ones
    within ``target_wait_ms`` (see the module docstring)."""
    pending, running = max(0, pending), max(0, running)
    if pending == 0:
        return running
    per_slot = 1
    if target_wait_ms > 0 and mean_run_ms > 0:
        per_slot = target_wait_ms // mean_run_ms + 1
    return running + math.ceil(pending / per_slot)


def workers_wanted(slots: int, per_worker: int) -> int:
    return math.ceil(max(0, slots) / max(1, per_worker))


def serving(registrations: Iterable[str]) -> dict[str, tuple[int, int]]:
    """Per queue, the live workers serving it and their slots in all, from the workers'
    registrations (JSON with ``queues`` and ``concurrency``; an unreadable one is none)."""
    out: dict[str, tuple[int, int]] = {}
    for raw in registrations:
        try:
            reg = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(reg, dict):
            continue
        queues, slots = reg.get("queues"), reg.get("concurrency")
        if not isinstance(queues, list) or not isinstance(slots, int):
            continue  # (not a registration a worker wrote)
        for q in {q for q in queues if isinstance(q, str)}:
            workers, total = out.get(q, (0, 0))
            out[q] = (workers + 1, total + slots)
    return out


def per_worker(workers: int, slots: int) -> int:
    """The slots of a worker: their mean over the workers (1 when none serves)."""
    return max(1, round(slots / workers)) if workers else 1


async def _mean_run_ms(store: Any, queue: str) -> int:
    """The mean run time of the queue's attempts that succeeded (two fields of the costs
    hash, not the whole of it)."""
    attempts, run_ms = f"queue|{queue}|attempts|ok", f"queue|{queue}|run_ms|ok"
    sums = await store.costs.sums([attempts, run_ms])
    return sums[run_ms] // sums[attempts] if sums[attempts] > 0 else 0


async def scale_signal(
    store: Any, queue: str, *, target_wait_ms: int = 0, slots_per_worker: int | None = None
) -> ScaleSignal:
    """The figures of ``queue`` now (``store``: a :class:`rsjobs.store.Store`). Raises
    :class:`rsjobs.ConfigError` for a bad queue name, a negative target wait or slots per
    worker below 1, :class:`rsjobs.UnknownQueue` for a queue the namespace never had."""
    if not is_name(queue):
        raise ConfigError("queue: 1-64 letters, digits, '_', '.', '-'")
    if target_wait_ms < 0 or (slots_per_worker is not None and slots_per_worker < 1):
        raise ConfigError("target_wait_ms must be >= 0 and slots_per_worker >= 1")
    if not await store.series.known(queue):
        raise UnknownQueue(queue)
    o = await store.tasks.overview()
    pending = max(0, o.counters.get(f"{queue}:PENDING", 0))
    running = max(0, o.counters.get(f"{queue}:RUNNING", 0))
    since = (await store.index.oldest_pending([queue])).get(queue, 0)
    now = await store.reaper.now_ms()
    workers, slots = serving(await store.reaper.registrations()).get(queue, (0, 0))
    per = slots_per_worker or per_worker(workers, slots)
    mean = await _mean_run_ms(store, queue)
    wanted = slots_wanted(pending, running, mean, target_wait_ms)
    return ScaleSignal(
        queue=queue,
        pending=pending,
        running=running,
        oldest_wait_ms=max(0, now - since) if since else 0,
        mean_run_ms=mean,
        target_wait_ms=target_wait_ms,
        workers=workers,
        slots=slots,
        slots_per_worker=per,
        wanted_slots=wanted,
        wanted_workers=workers_wanted(wanted, per),
    )
