"""A Redis Cluster client: every command goes to the master that owns its key's slot, over
a plain client per master (with its pipelined script connection), and nothing is retried
that may have run.

:func:`rsjobs.connect` makes a :class:`ClusterRedis` for ``redis+cluster://`` URLs, and for
a plain ``redis://`` URL of a node that says ``cluster_enabled:1``. It is a redis-py
``Redis`` to its callers (the store calls it as it calls a standalone client) and routes
each command itself:

* **Where.** A command goes to the master serving the slot of its first key (its hash
  tag: every key of a namespace has the same one, ``{namespace}``), found in a slot table
  read with ``CLUSTER SLOTS`` (what two nodes agree on, masters asked first: one node's
  word is not enough, see :meth:`ClusterRedis._read_slots`). Which node serves a
  namespace is a property of its key, never a global "the master": a namespace split
  into shards (one hash tag each) needs nothing else here. Keyless commands go to the
  first master, or to the master of the key given as redis-py's ``keys=[...]`` option
  (the store reads ``TIME`` from the namespace's master so); ``FLUSHALL``, ``FLUSHDB``,
  ``SCRIPT`` / ``FUNCTION`` ``LOAD`` / ``FLUSH`` go to every master; ``SCAN`` goes where
  its ``MATCH`` pattern's hash tag lives.
* **How.** Each master has a :class:`~rsjobs.store.lane.LaneRedis` (made with the URL's
  settings: bounded timeouts, no handshake, no redis-py retry). Scripts (``EVALSHA`` /
  ``EVAL``, ``FCALL`` and the read-only ``FCALL_RO``, sent to the master too) travel
  over its lane, the pipelined connection of the hot path; everything else through its
  pool. Pipelines (``MULTI`` ones included) run on one connection of the master that owns
  their keys, so a ``MULTI`` is as atomic as on a standalone server, and durable mode's
  ``EVALSHA`` + ``WAIT`` counts that connection's writes. Pub/sub subscribes on a
  connection to the channel's master (any node would do: a ``PUBLISH`` reaches every node
  of the cluster); when that connection fails the caller subscribes again and lands on
  whichever node serves the slot then.
* **Redirects.** ``MOVED`` / ``ASK`` / ``TRYAGAIN`` / ``CLUSTERDOWN`` mean the command
  did not run, so it is sent again: after a ``MOVED`` to the slot's master once the slot
  table is read again; after an ``ASK`` (a slot being migrated, the key already moved) to
  the importing node, preceded by ``ASKING``; after a ``TRYAGAIN`` (a multi-key command,
  e.g. a script, whose keys the migration split between two nodes) after a pause
  doubling from :data:`TRYAGAIN_PAUSE`, for up to :data:`TRYAGAIN_WAIT` seconds, then
  :class:`rsjobs.SlotMigrating`; after a ``CLUSTERDOWN`` (a master failed and no replica
  has taken over yet) for up to :data:`CLUSTER_DOWN_WAIT` seconds. Pipelines follow them
  too (a plain pipeline sends again only its commands that were redirected). More than
  :data:`MAX_HOPS` ``MOVED`` / ``ASK`` in a row, and every other error, go to the caller:
  the store's policy (:mod:`rsjobs.store.transient`) treats them as passing.
* **Never twice.** A lost connection or a reply timeout is never retried here: the command
  may have run (a repeated ``start.lua`` could start work nobody runs). The slot table is
  marked stale instead, and the caller's next command reads it again first (at most once
  per :data:`REFRESH_GAP` seconds), so callers find a new master as soon as the cluster
  has one. A connection that could not be opened (refused: the master failed while the
  client was idle) sent nothing: the command is sent once more, after the slot table is
  read again (:class:`~rsjobs.store.lane.NotSent`).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from redis import exceptions as rx
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline, PubSub
from redis.asyncio.connection import ConnectionPool
from redis.crc import key_slot

from ..errors import SlotMigrating
from .lane import LaneRedis, NotSent

__all__ = [
    "CLUSTER_DOWN_WAIT",
    "MAX_HOPS",
    "REFRESH_GAP",
    "TRYAGAIN_WAIT",
    "ClusterRedis",
    "command_key",
    "redirect_of",
    "slot_of",
]

SLOTS = 16384
#: how long a command answered ``CLUSTERDOWN`` is tried again (seconds)
CLUSTER_DOWN_WAIT = 2.0
#: the slot table is read at most this often (seconds) while callers keep failing
REFRESH_GAP = 0.1
#: how long a command answered ``TRYAGAIN`` (a multi-key command whose keys a slot
#: migration split between two nodes) is tried again before :class:`SlotMigrating`
TRYAGAIN_WAIT = 1.5
#: the first pause after a ``TRYAGAIN``, doubled after each one up to TRYAGAIN_PAUSE_MAX
TRYAGAIN_PAUSE = 0.01
TRYAGAIN_PAUSE_MAX = 0.2
#: ``MOVED`` / ``ASK`` followed in a row (a stale table's MOVED, then the new master's ASK)
MAX_HOPS = 2
#: the longest one node may take to answer CLUSTER SLOTS before the next one is asked
SLOTS_TIMEOUT = 2.0
#: a slot table is taken once this many nodes said the same (or the most common of
#: SLOTS_ASKED answers)
SLOTS_QUORUM = 2
SLOTS_ASKED = 3

Address = tuple[str, int]
#: a slot table: (first slot, last slot, master, replicas) per range
Slots = list[tuple[int, int, Address, tuple[Address, ...]]]

# -- which key a command is about ----------------------------------------------------------

#: commands with no key (their first argument is something else): the first master
_KEYLESS = frozenset({
    "ACL", "ASKING", "AUTH", "BGREWRITEAOF", "BGSAVE", "CLIENT", "CLUSTER", "COMMAND",
    "CONFIG", "DBSIZE", "DEBUG", "DISCARD", "ECHO", "EXEC", "FAILOVER", "FLUSHALL",
    "FLUSHDB", "FUNCTION", "HELLO", "INFO", "KEYS", "LASTSAVE", "LATENCY", "LOLWUT",
    "MEMORY", "MODULE", "MONITOR", "MULTI", "PING", "PSYNC", "PUBSUB", "QUIT", "RANDOMKEY",
    "READONLY", "READWRITE", "REPLICAOF", "RESET", "ROLE", "SAVE", "SCAN", "SCRIPT",
    "SELECT", "SHUTDOWN", "SLAVEOF", "SLOWLOG", "SWAPDB", "SYNC", "TIME", "UNWATCH",
    "WAIT", "WAITAOF",
})  # fmt: skip
#: commands whose first key follows a key count (``EVALSHA sha 2 k1 k2 ...``)
_NUMKEYS_AT = {
    "EVAL": 2,
    "EVALSHA": 2,
    "EVAL_RO": 2,
    "EVALSHA_RO": 2,
    "FCALL": 2,
    "FCALL_RO": 2,
    "ZUNION": 1,
    "ZINTER": 1,
    "ZDIFF": 1,
    "SINTERCARD": 1,
    "ZINTERCARD": 1,
    "LMPOP": 1,
    "ZMPOP": 1,
    "BLMPOP": 2,
    "BZMPOP": 2,
}
#: commands sent to every master (the first one's reply is returned)
_EVERY_MASTER = frozenset(
    {"FLUSHALL", "FLUSHDB", "SCRIPT FLUSH", "SCRIPT LOAD", "FUNCTION LOAD", "FUNCTION FLUSH"}
)
#: the transition scripts' commands: over the master's lane
_SCRIPTS = frozenset({"FCALL", "FCALL_RO", "EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO"})


def _word(arg: Any) -> str:
    return (arg.decode() if isinstance(arg, bytes) else str(arg)).upper()


def command_key(args: Sequence[Any]) -> Any | None:
    """The first key of a command (redis-py's argument tuple: ``("XGROUP CREATE", key,
    ...)`` or ``("EVALSHA", sha, 2, k1, ...)``), or None for a keyless one."""
    if not args:
        return None
    name = _word(args[0])
    head = name.split(" ", 1)[0]
    if name == "SCAN" or head == "SCAN":
        return _scan_tag(args)
    if name in ("MEMORY USAGE", "XINFO STREAM", "XINFO GROUPS", "XINFO CONSUMERS"):
        return args[1] if len(args) > 1 else None
    if head in ("XGROUP", "XINFO", "OBJECT", "MEMORY") and " " not in name:
        return args[2] if len(args) > 2 else None  # ("XGROUP", "CREATE", key, ...)
    if head in _KEYLESS:
        return None
    at = _NUMKEYS_AT.get(name)
    if at is not None:
        if len(args) <= at + 1 or int(args[at]) < 1:
            return None
        return args[at + 1]
    if name in ("XREAD", "XREADGROUP"):
        for i, a in enumerate(args):
            if i and isinstance(a, str | bytes) and _word(a) == "STREAMS":
                return args[i + 1] if i + 1 < len(args) else None
        return None
    if name == "MIGRATE":
        return args[3] if len(args) > 3 else None
    return args[1] if len(args) > 1 else None


def _scan_tag(args: Sequence[Any]) -> Any | None:
    """The ``MATCH`` pattern of a SCAN when its hash tag is a plain one (no glob in it):
    every key it can match lives in that tag's slot."""
    for i, a in enumerate(args[:-1]):
        if isinstance(a, str | bytes) and _word(a) == "MATCH":
            pattern = args[i + 1]
            text = pattern.decode() if isinstance(pattern, bytes) else str(pattern)
            start = text.find("{")
            end = text.find("}", start + 1)
            if start >= 0 and end > start + 1 and not set(text[: end + 1]) & set("*?[\\"):
                return text
    return None


_TAG_SLOTS: dict[str, int] = {}


def slot_of(key: Any) -> int:
    """The cluster slot of ``key`` (its hash tag's when it has one; cached per tag)."""
    text = key.decode("utf-8", "surrogateescape") if isinstance(key, bytes) else str(key)
    start = text.find("{")
    if start >= 0:
        end = text.find("}", start + 1)
        if end > start + 1:
            tag = text[start + 1 : end]
            slot = _TAG_SLOTS.get(tag)
            if slot is None:
                slot = key_slot(tag.encode("utf-8", "surrogateescape"))
                if len(_TAG_SLOTS) < 10_000:
                    _TAG_SLOTS[tag] = slot
            return slot
    return int(key_slot(text.encode("utf-8", "surrogateescape")))


# -- redirects -----------------------------------------------------------------------------

_REDIRECTS = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN")


def redirect_of(exc: BaseException) -> tuple[str, int, Address | None] | None:
    """``(code, slot, (host, port))`` of a ``MOVED`` / ``ASK`` error, ``(code, -1, None)``
    of a ``TRYAGAIN`` / ``CLUSTERDOWN`` / ``MASTERDOWN`` one, None for any other. redis-py
    8 gives these replies classes of their own, 5.2 plain ``ResponseError``s with the
    code in the message: both are read."""
    if not isinstance(exc, rx.ResponseError):
        return None
    text = str(exc)
    code = ""
    for cls, word in (
        (rx.MovedError, "MOVED"),
        (rx.AskError, "ASK"),
        (rx.TryAgainError, "TRYAGAIN"),
        (rx.MasterDownError, "MASTERDOWN"),
        (rx.ClusterDownError, "CLUSTERDOWN"),
    ):
        if isinstance(exc, cls):
            code = word
            break
    else:
        first, _, rest = text.partition(" ")
        if first not in _REDIRECTS:
            return None
        code, text = first, rest
    if code not in ("MOVED", "ASK"):
        return code, -1, None
    parts = text.split()
    try:
        slot = int(parts[-2])
        host, _, port = parts[-1].rpartition(":")
        return code, slot, (host.strip("[]"), int(port))
    except (IndexError, ValueError):
        return code, -1, None


_LOST = (rx.ConnectionError, rx.TimeoutError, OSError)


def _redirected(reply: Any) -> bool:
    """Whether a pipeline's reply is a redirect (its command did not run)."""
    return isinstance(reply, rx.ResponseError) and redirect_of(reply) is not None


class _Redirects:
    """What one command (or pipeline) met so far, against the bounds of the retries."""

    __slots__ = ("again_since", "down_until", "hops", "pause", "resent")

    def __init__(self) -> None:
        #: MOVED / ASK in a row
        self.hops = 0
        #: until when CLUSTERDOWN is tried again (0: not met)
        self.down_until = 0.0
        #: when the first TRYAGAIN came (0: not met), and the next pause
        self.again_since = 0.0
        self.pause = TRYAGAIN_PAUSE
        #: sent again once after a refused connection
        self.resent = False


def _failover_reply(exc: BaseException) -> bool:
    """A reply that says the node changed role (the slot table is stale)."""
    if isinstance(exc, rx.ReadOnlyError):
        return True
    return isinstance(exc, rx.ResponseError) and str(exc).split(" ", 1)[0] in (
        "READONLY",
        "UNBLOCKED",
        "LOADING",
    )


class _NodePool(ConnectionPool):  # type: ignore[misc]  # redis-py is untyped here
    """A node's pool: a connection it cannot open (refused, reset while connecting, or
    found closed and not reopened) is :class:`NotSent`, as the lane's is: no command went
    out on it."""

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().get_connection(*args, **kwargs)
        except rx.AuthenticationError:
            raise
        except (rx.ConnectionError, OSError) as exc:
            raise NotSent(str(exc)) from exc


# -- the client ----------------------------------------------------------------------------


class ClusterRedis(Redis):  # type: ignore[misc]  # redis-py is untyped here
    """The cluster client :func:`rsjobs.connect` makes; see the module docstring.

    ``seeds``: nodes to read the slot table from first (any node of the cluster will do);
    ``node_kwargs``: what each master's client is made with (redis-py ``Redis`` keyword
    arguments). ``lane`` is None: scripts take the lane of their master.
    """

    lane = None

    def __init__(self, seeds: Sequence[Address], **node_kwargs: Any) -> None:
        if not seeds:
            raise ValueError("a cluster client needs at least one seed node")
        host, port = seeds[0]
        # the base client's pool (never used for a command) keeps redis-py's machinery
        # (encoders, response callbacks, pipelines' bookkeeping) in working order
        super().__init__(host=host, port=port, **node_kwargs)
        self.seeds: tuple[Address, ...] = tuple(seeds)
        self.node_kwargs = dict(node_kwargs)
        self._nodes: dict[Address, LaneRedis] = {}
        #: the master of each slot (None: not known yet)
        self._slots: list[Address | None] = [None] * SLOTS
        #: (first, last, master, replicas) as CLUSTER SLOTS last said
        self.table: Slots = []
        self._stale = True
        self._refreshed_at = 0.0
        self._refresh: asyncio.Task[None] | None = None
        #: the node a MOVED / ASK named: asked for the slot table first
        self._prefer: Address | None = None
        #: slot table reads so far (for tests and logs)
        self.refreshes = 0

    def __repr__(self) -> str:
        seeds = ",".join(f"{h}:{p}" for h, p in self.seeds)
        return f"<ClusterRedis seeds={seeds}>"

    # -- nodes and slots -------------------------------------------------------------------

    def node_client(self, address: Address) -> LaneRedis:
        """The client of one node (made on first use, closed with this client)."""
        client = self._nodes.get(address)
        if client is None:
            # made from a URL, as connect() makes a standalone client: its pool then holds
            # only the settings given, which the lane can reproduce (the constructor would
            # add redis-py's defaults of every other setting, and no lane)
            kwargs = dict(self.node_kwargs)
            scheme = "rediss" if kwargs.pop("ssl", False) else "redis"
            host = f"[{address[0]}]" if ":" in address[0] else address[0]
            pool = _NodePool.from_url(f"{scheme}://{host}:{address[1]}/0", **kwargs)
            client = LaneRedis.from_pool(pool)
            self._nodes[address] = client
        return client

    @property
    def masters(self) -> list[Address]:
        """The masters, in slot order, as the slot table last said."""
        seen: list[Address] = []
        for _, _, master, _ in self.table:
            if master not in seen:
                seen.append(master)
        return seen

    def mark_stale(self) -> None:
        """The slot table may be wrong (a connection failed, a node changed role): the
        next command reads it again first."""
        self._stale = True

    async def node_for(self, key: Any) -> LaneRedis:
        """The client of the master that owns ``key``'s slot (reading the slot table first
        when it is stale)."""
        return self.node_client(await self._owner(slot_of(key)))

    async def _owner(self, slot: int | None) -> Address:
        if self._stale or (slot is not None and self._slots[slot] is None):
            await self.refresh()
        address = self._slots[slot] if slot is not None else None
        if address is None:
            masters = self.masters
            if slot is not None or not masters:
                raise rx.ConnectionError(
                    f"no master serves slot {slot} in the cluster of {self._seed_text()}"
                )
            address = masters[0]
        return address

    def _seed_text(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.seeds)

    async def refresh(self, *, force: bool = False) -> None:
        """Read the slot table (``CLUSTER SLOTS``) from the first node that answers: the
        node a ``MOVED`` named, the known masters, their replicas, then the seeds.
        Concurrent callers share one read; while the table is stale it is read at most
        once per :data:`REFRESH_GAP` seconds (unless ``force``)."""
        loop = asyncio.get_running_loop()
        running = self._refresh
        if running is not None and not running.done() and running.get_loop() is loop:
            await asyncio.wait([running])  # its outcome is the reader's to raise
            return
        recent = time.monotonic() - self._refreshed_at < REFRESH_GAP
        if not force and self.table and (not self._stale or recent):
            return
        task = loop.create_task(self._read_slots(), name="rsjobs-cluster-slots")
        # its outcome is retrieved even when every caller waiting on it was cancelled
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        self._refresh = task
        try:
            await asyncio.shield(task)
        finally:
            self._refreshed_at = time.monotonic()

    async def _read_slots(self) -> None:
        """The slot table two nodes agree on (masters asked first: :data:`SLOTS_QUORUM`,
        or the most common of :data:`SLOTS_ASKED` answers; one answer when only one node
        answers). One node's word is not enough: a node that lost a failover race may
        still say it serves a slot that the other masters gave to another, and accept
        writes it will throw away once it learns better."""
        candidates: list[Address] = [self._prefer] if self._prefer is not None else []
        candidates += [master for _, _, master, _ in self.table]
        candidates += [r for _, _, _, replicas in self.table for r in replicas]
        candidates += self.seeds
        errors: list[str] = []
        views: list[tuple[tuple[tuple[int, int, Address], ...], Slots]] = []
        for address in dict.fromkeys(candidates):
            try:
                reply = await self._cluster_slots(address)
            except (rx.RedisError, OSError) as exc:
                errors.append(f"{address[0]}:{address[1]}: {type(exc).__name__}: {exc}")
                continue
            table = _parse_slots(reply, address)
            if not table:
                errors.append(f"{address[0]}:{address[1]}: no slots assigned")
                continue
            owners = tuple((first, last, master) for first, last, master, _ in table)
            views.append((owners, table))
            if sum(1 for o, _ in views if o == owners) >= SLOTS_QUORUM:
                break
            if len(views) >= SLOTS_ASKED:
                break
        if not views:
            raise rx.ConnectionError(
                "no node of the cluster answered CLUSTER SLOTS: " + "; ".join(errors[-4:])
            )
        votes = Counter(owners for owners, _ in views)
        most = max(votes.values())
        table = next(t for owners, t in views if votes[owners] == most)
        slots: list[Address | None] = [None] * SLOTS
        for first, last, master, _ in table:
            slots[first : last + 1] = [master] * (last - first + 1)
        self.table, self._slots = table, slots
        self._stale = False
        self._prefer = None
        self.refreshes += 1

    async def _cluster_slots(self, address: Address) -> Any:
        """CLUSTER SLOTS of one node, bounded by the connect timeout and at most
        :data:`SLOTS_TIMEOUT` (a frozen node must not hold every caller long: the next
        candidate is asked). Over the node's lane when it has one: a lane's late reply is
        dropped in order, its connection closed when overdue, so giving up leaves no
        socket behind."""
        node = self.node_client(address)
        bound = min(float(self.node_kwargs.get("socket_connect_timeout") or 5.0), SLOTS_TIMEOUT)
        if node.lane is not None:
            async with asyncio.timeout(bound):
                return await node.lane.call("CLUSTER", "SLOTS")
        return await node.execute_command("CLUSTER", "SLOTS")

    # -- commands --------------------------------------------------------------------------

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        name = args[0]
        if type(name) is not str or not name.isupper():
            name = _word(name)
        script = name in _SCRIPTS
        if script:  # the hot path: EVALSHA sha numkeys key...
            slot = slot_of(args[3]) if len(args) > 3 and args[2] else None
        else:
            if name in _EVERY_MASTER or (name in ("SCRIPT", "FUNCTION") and len(args) > 1 and
                                         _word(args[1]) in ("FLUSH", "LOAD")):  # fmt: skip
                return await self._every_master(*args, **options)
            if name in ("DBSIZE", "KEYS"):
                return await self._gathered(name, *args, **options)
            key = command_key(args)
            if key is None and options.get("keys"):
                key = options["keys"][0]  # a keyless command asked of a key's node (TIME)
            slot = slot_of(key) if key is not None else None
        return await self._command(args, options, slot, script, _Redirects(), None)

    async def _command(
        self,
        args: tuple[Any, ...],
        options: dict[str, Any],
        slot: int | None,
        script: bool,
        state: _Redirects,
        asking: Address | None,
    ) -> Any:
        """Send one command to the master of ``slot`` (or, after ``ASKING``, to the node
        ``asking`` names) and follow what it answers (see the module docstring)."""
        while True:
            address = self._slots[slot] if slot is not None and not self._stale else None
            if asking is not None:
                address = asking
            elif address is None:
                address = await self._owner(slot)
            node = self._nodes.get(address) or self.node_client(address)
            try:
                if asking is not None:
                    return await self._asking(node, args, options)
                if script and node.lane is not None:
                    return await node.lane.call(*args)
                return await node.execute_command(*args, **options)
            except NotSent as exc:
                await self._resend_after_refusal(exc, state)
                asking = None
            except _LOST:
                self.mark_stale()
                raise
            except rx.ResponseError as exc:
                redirect = redirect_of(exc)
                if redirect is None:
                    if _failover_reply(exc):
                        self.mark_stale()
                    raise
                asking = await self._follow(exc, redirect, state, slot)

    async def _resend_after_refusal(self, exc: NotSent, state: _Redirects) -> None:
        """After a connection was refused (nothing was sent: a master that failed while
        this client was idle): the slot table read again, for the one more try a command
        gets so; the refusal goes to the caller the second time."""
        self.mark_stale()
        if state.resent:
            raise exc
        state.resent = True
        await self.refresh(force=True)

    async def _follow(
        self,
        exc: rx.ResponseError,
        redirect: tuple[str, int, Address | None],
        state: _Redirects,
        slot: int | None,
    ) -> Address | None:
        """What to do after a redirect (the command did not run): the node to send it to
        with ``ASKING`` for an ``ASK``, else None (the slot's master, once the slot table
        is read again after a ``MOVED``), after a pause for ``TRYAGAIN`` / ``CLUSTERDOWN``.
        Raises ``exc`` once its bound is spent: :data:`MAX_HOPS` ``MOVED`` / ``ASK`` in a
        row, :data:`CLUSTER_DOWN_WAIT` of ``CLUSTERDOWN``; :class:`SlotMigrating` after
        :data:`TRYAGAIN_WAIT` of ``TRYAGAIN``."""
        code, rslot, target = redirect
        now = time.monotonic()
        if code in ("CLUSTERDOWN", "MASTERDOWN"):
            self.mark_stale()
            state.down_until = state.down_until or now + CLUSTER_DOWN_WAIT
            if now >= state.down_until:
                raise exc
            await asyncio.sleep(REFRESH_GAP)
            return None
        if code == "TRYAGAIN":
            # a multi-key command whose keys a migration split between two nodes: it runs
            # once every key is on one node (the migration of the slot moved on or ended)
            state.again_since = state.again_since or now
            if now + state.pause - state.again_since > TRYAGAIN_WAIT:
                raise SlotMigrating(-1 if slot is None else slot, now - state.again_since) from exc
            await asyncio.sleep(state.pause)
            state.pause = min(state.pause * 2, TRYAGAIN_PAUSE_MAX)
            state.hops = 0
            return None
        state.hops += 1
        if state.hops > MAX_HOPS or target is None:
            raise exc
        self._prefer = target
        if code == "ASK":
            return target  # the slot is still its master's: the table stays as it is
        self.mark_stale()
        if 0 <= rslot < SLOTS:
            self._slots[rslot] = target  # until the table is read again
        return None

    async def _asking(self, node: LaneRedis, args: tuple[Any, ...], options: Any) -> Any:
        if node.lane is not None:
            return await node.lane.call_asking(*args)
        async with node.pipeline(transaction=False) as pipe:
            pipe.execute_command("ASKING")
            pipe.execute_command(*args, **options)
            _, reply = await pipe.execute(raise_on_error=False)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def _every_master(self, *args: Any, **options: Any) -> Any:
        await self._owner(None)
        replies = [
            await self.node_client(m).execute_command(*args, **options) for m in self.masters
        ]
        return replies[0]

    async def _gathered(self, name: str, *args: Any, **options: Any) -> Any:
        await self._owner(None)
        replies = [
            await self.node_client(m).execute_command(*args, **options) for m in self.masters
        ]
        if name == "DBSIZE":
            return sum(int(r) for r in replies)
        return [k for r in replies for k in r]

    # -- pipelines and pub/sub -------------------------------------------------------------

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        """A pipeline that runs on one connection of the master owning its keys (every
        key of one pipeline must hash to one slot, as in a MULTI on a cluster)."""
        return ClusterPipeline(self, transaction)

    async def run_pipeline(
        self,
        stack: list[tuple[tuple[Any, ...], dict[str, Any]]],
        transaction: bool,
        raise_on_error: bool,
    ) -> list[Any]:
        """Run a pipeline's queued commands on one connection of the master that owns
        their keys (see :class:`ClusterPipeline`), following redirects as single commands
        do: a ``MULTI`` refused as a whole is sent again as a whole (after ``ASKING`` to
        the node an ``ASK`` names), and of a plain pipeline, the commands answered with a
        redirect (they did not run; the others did, and are not sent again) are sent
        again together, each after an ``ASKING`` for an ``ASK``, with the keyless commands
        that followed the first of them (a ``WAIT`` after a write is about that write)."""
        keys = [command_key(args) for args, _ in stack]
        slots = {slot_of(k) for k in keys if k is not None}
        if len(slots) > 1:  # Redis would refuse a MULTI, and answer MOVED to a pipeline
            raise rx.ClusterCrossSlotError("Keys in request don't hash to the same slot")
        slot = slots.pop() if slots else None
        state = _Redirects()
        asking: Address | None = None
        replies: list[Any] = [None] * len(stack)
        pending = list(range(len(stack)))
        while True:
            node = self.node_client(asking or await self._owner(slot))
            try:
                got, refused = await self._run_on(
                    node, [stack[i] for i in pending], transaction, asking is not None
                )
            except NotSent as exc:
                await self._resend_after_refusal(exc, state)
                asking = None
                continue
            except _LOST:
                self.mark_stale()
                raise
            if refused is None:
                for i, reply in zip(pending, got, strict=True):
                    replies[i] = reply
            errors = [r for r in got if isinstance(r, BaseException)]
            if any(_failover_reply(e) for e in [*errors, *([refused] if refused else [])]):
                self.mark_stale()
            if refused is not None:  # a MULTI refused as a whole: nothing of it ran
                redirect = redirect_of(refused)
                if redirect is None or not isinstance(refused, rx.ResponseError):
                    raise refused
                asking = await self._follow(refused, redirect, state, slot)
                continue
            moved = [i for i in pending if _redirected(replies[i])]
            if not moved:
                break
            # a keyless command after a redirected one goes with it: it is about the
            # connection's own writes (WAIT counts them), which now go to the other node
            moved = [i for i in pending if i in moved or (keys[i] is None and i > moved[0])]
            first = replies[moved[0]]
            redirect = redirect_of(first)
            assert redirect is not None
            try:
                asking = await self._follow(first, redirect, state, slot)
            except (rx.RedisError, SlotMigrating) as final:  # its bound spent
                for i in moved:
                    replies[i] = final
                break
            pending = moved
        if raise_on_error:
            for reply in replies:
                if isinstance(reply, BaseException):
                    raise reply
        return replies

    async def _run_on(
        self,
        node: LaneRedis,
        stack: list[tuple[tuple[Any, ...], dict[str, Any]]],
        transaction: bool,
        asking: bool,
    ) -> tuple[list[Any], BaseException | None]:
        """Run ``stack`` as one pipeline on one connection of ``node`` (``asking``: after
        ``ASKING``, once before a ``MULTI``, which keeps it to its ``EXEC``, or before each
        command of a plain pipeline); its replies, or the error refusing a ``MULTI``."""
        pipe = node.pipeline(transaction=transaction)
        if asking and not transaction:
            pipe.command_stack = [c for item in stack for c in ((("ASKING",), {}), item)]
        else:
            pipe.command_stack = list(stack)
        if asking and transaction:
            conn = await node.connection_pool.get_connection()
            pipe.connection = conn  # released by the pipeline's reset
            try:
                await conn.send_command("ASKING")
                await conn.read_response()
            except BaseException:
                await pipe.reset()
                raise
        try:
            replies: list[Any] = await pipe.execute(raise_on_error=False)
        except rx.ResponseError as exc:  # MULTI: a queued command was refused
            return [], exc
        if asking and not transaction:
            replies = replies[1::2]
        return replies, None

    def pubsub(self, **kwargs: Any) -> PubSub:
        """Pub/sub on the master that owns the first channel's slot (see the module
        docstring)."""
        return ClusterPubSub(self, **kwargs)

    # -- connections -----------------------------------------------------------------------

    async def reset(self) -> None:
        """Drop every connection (pools and lanes) and read the slot table again on the
        next command."""
        self.mark_stale()
        for node in list(self._nodes.values()):
            await node.connection_pool.disconnect()
            if node.lane is not None:
                await node.lane.aclose()

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        nodes, self._nodes = list(self._nodes.values()), {}
        for node in nodes:
            await node.aclose()
        await super().aclose(close_connection_pool)

    def nodes(self) -> Iterable[tuple[Address, LaneRedis]]:
        """The node clients made so far."""
        return list(self._nodes.items())


def _parse_slots(reply: Any, asked: Address) -> Slots:
    """CLUSTER SLOTS as (first, last, master, replicas), sorted; a node's empty host is
    the address it was asked at (Redis leaves it empty when it does not know its own)."""

    def address(node: Any) -> Address:
        host = node[0].decode() if isinstance(node[0], bytes) else str(node[0])
        if not host or host == "?":
            host = asked[0]
        return host, int(node[1])

    out = []
    for row in reply or ():
        first, last, master, *replicas = row
        out.append((int(first), int(last), address(master), tuple(address(r) for r in replicas)))
    return sorted(out)


class ClusterPipeline(Pipeline):  # type: ignore[misc]  # redis-py is untyped here
    """A pipeline of a :class:`ClusterRedis`: commands are queued as redis-py's are, and
    run on the master that owns their keys (:meth:`ClusterRedis.run_pipeline`).
    ``WATCH`` is not supported (nothing in rsjobs uses it)."""

    def __init__(self, cluster: ClusterRedis, transaction: bool) -> None:
        super().__init__(cluster.connection_pool, cluster.response_callbacks, transaction, None)
        self.cluster = cluster

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        stack = self.command_stack
        if not stack:
            return []
        try:
            return await self.cluster.run_pipeline(
                list(stack), self.is_transaction or self.explicit_transaction, raise_on_error
            )
        finally:
            await self.reset()

    async def watch(self, *names: Any) -> Any:
        raise rx.RedisError("WATCH is not supported by rsjobs's cluster pipelines")


class ClusterPubSub(PubSub):  # type: ignore[misc]  # redis-py is untyped here
    """Pub/sub of a :class:`ClusterRedis`: its connection goes to the master of the first
    channel it subscribes to; a failed connection marks the slot table stale, so that
    the caller's next subscription finds the node serving the slot then."""

    def __init__(self, cluster: ClusterRedis, **kwargs: Any) -> None:
        super().__init__(cluster.connection_pool, **kwargs)
        self.cluster = cluster

    async def subscribe(self, *args: Any, **kwargs: Any) -> Any:
        if self.connection is None:
            channels = [*args, *kwargs]
            if channels:
                first = channels[0][0] if isinstance(channels[0], list | tuple) else channels[0]
                node = await self.cluster.node_for(first)
                self.connection_pool = node.connection_pool
        try:
            return await super().subscribe(*args, **kwargs)
        except _LOST:
            self.cluster.mark_stale()
            raise

    async def parse_response(self, block: bool = True, timeout: float = 0) -> Any:
        try:
            return await super().parse_response(block, timeout)
        except _LOST:
            self.cluster.mark_stale()
            raise
