"""The store: the one part of rsjobs that speaks Redis about tasks, workflows, workers and
their streams. Keys (:mod:`.keys`), the connection and its topology (:mod:`.connection`,
:mod:`.lane`), the scripts and their calls (:mod:`.scripts`, packed by :mod:`.layout`,
answered in :mod:`.replies`), the stored records (:mod:`.record`), and the one place where
Redis errors become rsjobs's (:mod:`.transient`). Everything else calls a :class:`Store`:

    store = Store(rsjobs.connect(url), Settings(namespace="images"))
    info = await store.tasks.get(task_id)

The parts are attributes, each one idea: ``tasks`` (clients and the web app), ``work``
(workers), ``reaper``, ``quarantine``, ``workflows``, ``events`` (the web app's hub),
``migration`` (``rsjobs migrate``), ``index`` (task lists, and the trim of their indexes),
``series`` (per-minute queue series), ``deferred`` (attempts waiting on outside jobs:
hand-off, results, polls), ``hooks`` (the hook stream, its retries, dead letters and
webhooks: ``rsjobs hooks``), ``schedules`` (recurring tasks), ``successors`` (tasks that
wait for others: their submit and the release step), ``costs`` (the costs hash, and a
task's or workflow's costs from their histories), ``limits`` (per-owner concurrency and
rate limits of shared queues).
The namespace's layout is checked before the first script call (:mod:`.marker`); processes
check it at start with :meth:`Store.require_layout`.
"""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from ..settings import Settings
from .connection import connect, describe, reset_connections
from .costs import Costs
from .deferred import Deferred
from .events import Events
from .hooks import HookStore
from .index import Index, ListQuery
from .keys import GROUP, Keys, TaskKeys, WorkflowKeys
from .limits import Limits
from .marker import LayoutState
from .migrate import Migration, MigrationReport
from .quarantine import Quarantine, Suspect, Verdict
from .reaper import Reaping
from .record import TaskRecord, WorkflowRecord
from .replies import (
    Beat,
    Code,
    DeadlineOutcome,
    LinkCode,
    QuarantineOutcome,
    QueueReply,
    Recovery,
    RetryReply,
    Started,
    TaskReply,
    WfCode,
    WfFinishReply,
    WfReply,
    error_of,
)
from .schedules import Schedules
from .scripts import Scripts
from .series import Series
from .shards import Shards, shard_of
from .shards import load as load_shards
from .successors import ReleaseReport, Successors
from .tasks import TaskRef, Tasks
from .transient import boundary
from .work import Delivery, Work
from .workflows import HISTORY_MAXLEN, OpenSet, Workflows

__all__ = [
    "GROUP",
    "Beat",
    "Code",
    "Costs",
    "DeadlineOutcome",
    "Delivery",
    "Index",
    "Keys",
    "LayoutState",
    "LinkCode",
    "ListQuery",
    "MigrationReport",
    "OpenSet",
    "QuarantineOutcome",
    "QueueReply",
    "Recovery",
    "ReleaseReport",
    "RetryReply",
    "Series",
    "Shards",
    "Started",
    "Store",
    "Suspect",
    "TaskKeys",
    "TaskRecord",
    "TaskRef",
    "TaskReply",
    "Verdict",
    "WfCode",
    "WfFinishReply",
    "WfReply",
    "WorkflowKeys",
    "WorkflowRecord",
    "connect",
    "error_of",
]


class Store:
    """Tasks, workflows, workers and streams of one namespace, on one redis-py asyncio
    client (``decode_responses=True``: :func:`rsjobs.connect` makes one). Every method
    raises :class:`rsjobs.RedisUnavailable` when Redis cannot be reached (the redis-py
    error chained) and :class:`rsjobs.StoreError` on any other error Redis answers.

    ``wf_history_maxlen`` bounds each workflow's history; ``durable_workflows``: the
    workflow calls are writes a client acknowledges (durable mode applies to them)."""

    def __init__(
        self,
        redis: Redis,
        settings: Settings | None = None,
        *,
        wf_history_maxlen: int = HISTORY_MAXLEN,
        durable_workflows: bool = False,
        _shard: tuple[Store, int] | None = None,
    ) -> None:
        self.redis = redis
        self.settings = settings or Settings()
        self._options = (wf_history_maxlen, durable_workflows)
        #: shard 0's store (the namespace's: it knows the shards), and this one's shard
        self.root: Store = _shard[0] if _shard else self
        self.number = _shard[1] if _shard else 0
        if _shard is None:
            self.scripts = Scripts(redis, self.settings)
            self._shards: Shards | None = None
            self._stores: dict[int, Store] = {0: self}
            self._opening = asyncio.Lock()
        else:
            root = self.root
            self.scripts = Scripts(
                redis, self.settings, tag=root.shards.tags[self.number], root=root.scripts
            )
        self.scripts.store = self
        self.keys = self.scripts.keys
        self.tasks = Tasks(self.scripts)
        self.queues = self.tasks.queues
        self.work = Work(self.scripts)
        self.deferred = Deferred(self.scripts)
        self.reaper = Reaping(self.scripts)
        self.quarantine = Quarantine(self.scripts)
        self.workflows = Workflows(
            self.scripts, history_maxlen=wf_history_maxlen, durable=durable_workflows
        )
        self.events = Events(self.scripts)
        self.migration = Migration(self.scripts)
        self.index = Index(self.scripts)
        self.series = Series(self.scripts)
        self.hooks = HookStore(self.scripts)
        self.schedules = Schedules(self.scripts)
        self.successors = Successors(self.scripts)
        self.costs = Costs(self.scripts)
        self.limits = Limits(self.scripts)

    # -- shards (rsjobs.store.shards) -------------------------------------------------------

    async def open(self) -> Shards:
        """The namespace's shards, read once (created with ``Settings.shards`` when the
        namespace is new). Raises :class:`rsjobs.ConfigError` when ``Settings.shards`` is
        not the namespace's count (nothing written)."""
        root = self.root
        if root._shards is None:
            async with root._opening:
                if root._shards is None:
                    root._shards = await load_shards(root.scripts, root.settings.shards)
        return root._shards

    @property
    def shards(self) -> Shards:
        """The namespace's shards (:meth:`open` read them; before that, one shard)."""
        return self.root._shards or Shards(self.settings.namespace)

    @property
    def sharded(self) -> bool:
        """Whether the namespace has more than one shard (known once :meth:`open` ran)."""
        return self.shards.count > 1

    def shard(self, number: int) -> Store:
        """The store of shard ``number`` (0: the namespace's own): today's store of one
        namespace, on that shard's keys. Needs :meth:`open` for a shard other than 0."""
        root = self.root
        store = root._stores.get(number)
        if store is None:
            if not 0 < number < root.shards.count:
                raise ValueError(f"namespace {self.settings.namespace} has no shard {number}")
            wf_max, durable = root._options
            store = Store(
                self.redis,
                root.settings,
                wf_history_maxlen=wf_max,
                durable_workflows=durable,
                _shard=(root, number),
            )
            root._stores[number] = store
        return store

    async def at(self, an_id: str) -> Store:
        """The store of the shard of a task or workflow id (an id of the legacy form, or
        naming a shard the namespace does not have, is shard 0's)."""
        if shard_of(an_id) == 0:
            return self.root
        shards = await self.open()
        return self.shard(shards.shard_of(an_id))

    async def each(self) -> list[Store]:
        """Every shard's store, in shard order (one, the namespace's, when unsharded)."""
        shards = await self.open()
        return [self.shard(k) for k in range(shards.count)]

    async def ping(self) -> None:
        """Whether the node that serves the namespace answers: a read of one of its keys
        (``EXISTS`` of the layout marker), so that a cluster node which does not own the
        namespace's slot answers ``MOVED`` (passing: :class:`rsjobs.RedisUnavailable`)
        rather than a PING's PONG. A sharded namespace: the node of every shard (a key of
        each shard's tag)."""
        for store in await self.each():
            with boundary("EXISTS layout"):
                await self.redis.exists(store.keys.layout)

    @property
    def layout_ok(self) -> bool:
        """Whether the namespace's layout was checked and found to be this one."""
        return self.scripts.layout_ok

    async def require_layout(self) -> LayoutState:
        """Check that the namespace is in this rsjobs's layout, marking it when it holds
        no data yet (once per store; every script call checks it first too). Raises
        :class:`rsjobs.NotMigrated` when it holds data of an earlier layout: run
        ``rsjobs migrate``."""
        return await self.scripts.require_layout()

    async def reset_connections(self) -> None:
        """Drop every connection (pool and lane): after a failover the next ones are
        opened anew (under Sentinel, to the new primary)."""
        await reset_connections(self.redis)

    def describe(self, url: str | None = None) -> str:
        """One line saying what the client connects to, for start-up logs."""
        return describe(self.redis, url)

    async def close(self) -> None:
        await self.redis.aclose()
