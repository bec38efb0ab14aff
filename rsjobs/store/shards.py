"""The shards of a namespace: their hash tags, the shard a task or workflow id names, and
where a new task goes. The one module that knows them.

A namespace has a shard count S, fixed when it is created. Each shard is a hash tag of its
own, so its keys live in one slot of a Redis Cluster (every script touches one shard), and
S shards spread a namespace over the cluster's masters.

**Tags.** Shard 0 is the namespace's own tag ``{ns}`` (the legacy one: data and ids written
before shards existed are shard 0's). Shard k >= 1 has the tag ``ns#k``, or ``ns#k.j`` with
the smallest j whose slot lies within 16384/(8S) slots of slot(ns) + k*16384/S on the slot
ring: the S shards then sit at even distances around the ring, so on masters that split the
slots evenly, S = 3 puts one shard on each of 3 masters and S = 6 two (unless the
namespace's own slot lies within that tolerance of the border of a master's range). A
namespace name cannot hold ``#``, so no shard's tag is another namespace's. The tags are
computed once, when the namespace is created, and stored with the count (never computed
again: a change of this rule must not move data).

**Metadata.** ``rsjobs:{ns}:shards`` (on the legacy tag) holds ``{"count": S, "tags":
[...]}`` as JSON. None means S = 1: a namespace of one shard has exactly the keys it had
before shards existed. The first process given ``shards=S`` (``Settings.shards``,
``--shards``, ``RSJOBS_SHARDS``) with S > 1 writes it (``scripts/shards.lua``: only while
the namespace holds no data); a process given another count than the stored one stops with
:class:`rsjobs.ConfigError` ("namespace x has 8 shards"); one given none reads it.

**Ids.** Task and workflow ids stay 32 lowercase hex characters. A uuid4's hex has ``4`` at
index 12: such an id (every id of S = 1, and every id made before shards) is shard 0's. A
sharded id has ``c`` at index 12 and its shard in two hex digits at 13..14 (so S <= 256);
the rest is random. :func:`shard_of` reads it.

**Placement** (:meth:`Shards.place`): by the owner when the task has one (all of an
owner's tasks on one shard: per-owner limits stay exact, and dedup keys, which are
owner-scoped, cannot escape); else by the dedup key (duplicates meet on one shard); else
on the shard of the predecessors (``after``: they must share one); else by ``shard_key``
(unowned tasks that must meet, e.g. a diamond of successors); else round-robin per client.
A task that a rule places elsewhere than its predecessors is refused
(:class:`rsjobs.PredecessorRefused`). A workflow's tasks live on the workflow's shard.
"""

from __future__ import annotations

import itertools
import uuid
import zlib
from collections.abc import Iterable, Sequence

import msgspec
from redis.crc import key_slot

from ..errors import ConfigError, CorruptData, PredecessorRefused
from . import layout
from .keys import Keys
from .replies import text
from .scripts import Scripts
from .transient import boundary

__all__ = [
    "MAX_SHARDS",
    "SLOTS",
    "ShardMap",
    "Shards",
    "check_count",
    "decode_map",
    "encode_map",
    "load",
    "new_id",
    "shard_of",
    "shard_tags",
    "slot_of",
]

#: the most shards a namespace may have (an id carries its shard in two hex digits)
MAX_SHARDS = 256
#: the hash slots of a Redis Cluster
SLOTS = 16384
#: an id made by uuid4 has its version here (``4``); a sharded id has ``c``
_MARK_AT = 12
_SHARDED = "c"


def check_count(count: object, what: str = "shards") -> int:
    """``count`` when it is a shard count (an integer 1..256), else :class:`ConfigError`."""
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_SHARDS:
        raise ConfigError(f"{what} must be an integer between 1 and {MAX_SHARDS}, not {count!r}")
    return count


def slot_of(tag: str) -> int:
    """The cluster slot of the keys with the hash tag ``tag`` (CRC16 mod 16384)."""
    return int(key_slot(tag.encode("utf-8")))


def _distance(a: int, b: int) -> int:
    """Distance of two slots on the slot ring."""
    d = abs(a - b) % SLOTS
    return min(d, SLOTS - d)


def _candidates(namespace: str, k: int) -> Iterable[str]:
    yield f"{namespace}#{k}"
    for j in itertools.count():
        yield f"{namespace}#{k}.{j}"


def shard_tags(namespace: str, count: int) -> tuple[str, ...]:
    """The hash tags of the ``count`` shards of ``namespace`` by this module's rule (see
    the module): shard 0's is the namespace, shard k's the first candidate whose slot is
    within ``16384 // (8 * count)`` of its place on the ring."""
    check_count(count)
    base = slot_of(namespace)
    tolerance = SLOTS // (8 * count)
    tags = [namespace]
    for k in range(1, count):
        target = (base + round(k * SLOTS / count)) % SLOTS
        for tag in _candidates(namespace, k):
            if _distance(slot_of(tag), target) <= tolerance:
                tags.append(tag)
                break
    return tuple(tags)


def shard_of(an_id: str) -> int:
    """The shard an id names (0 for an id of the legacy form, e.g. every uuid4)."""
    if len(an_id) == 32 and an_id[_MARK_AT] == _SHARDED:
        try:
            return int(an_id[_MARK_AT + 1 : _MARK_AT + 3], 16)
        except ValueError:
            return 0
    return 0


def new_id(shard: int = 0, count: int = 1) -> str:
    """A new task or workflow id on ``shard`` of a namespace of ``count`` shards: a uuid4's
    hex when the namespace has one shard (ids unchanged), else with the shard in it."""
    raw = uuid.uuid4().hex
    if count == 1:
        return raw
    return f"{raw[:_MARK_AT]}{_SHARDED}{shard:02x}{raw[_MARK_AT + 3 :]}"


class ShardMap(msgspec.Struct, frozen=True, kw_only=True):
    """The stored metadata of a namespace's shards."""

    count: int
    tags: tuple[str, ...]


_decoder = msgspec.json.Decoder(ShardMap)


def encode_map(m: ShardMap) -> str:
    return msgspec.json.encode(m).decode()


def decode_map(namespace: str, raw: str | bytes) -> ShardMap:
    """The metadata as stored; :class:`rsjobs.CorruptData` when it does not read as one of
    ``namespace`` (a count 1..256, that many distinct tags, the first the namespace)."""
    try:
        m = _decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise CorruptData("the shards of namespace", namespace, str(exc)) from None
    ok = (
        isinstance(m.count, int)
        and 1 <= m.count <= MAX_SHARDS
        and len(m.tags) == m.count
        and m.tags[0] == namespace
        and len(set(m.tags)) == m.count
        and all(
            isinstance(t, str) and t.startswith(f"{namespace}#") and "{" not in t and "}" not in t
            for t in m.tags[1:]
        )
    )
    if not ok:
        raise CorruptData("the shards of namespace", namespace, "not rsjobs's metadata")
    return m


def _hash(value: str) -> int:
    return zlib.crc32(value.encode("utf-8", "surrogateescape"))


class Shards:
    """A namespace's shards: their keys, the shard of an id, where a new task goes."""

    def __init__(self, namespace: str, tags: Sequence[str] | None = None) -> None:
        self.namespace = namespace
        self.tags: tuple[str, ...] = tuple(tags) if tags else (namespace,)
        self.count = len(self.tags)
        self._keys = [Keys(namespace, tag=t) for t in self.tags]
        # each client starts its round-robin at a random shard: many short-lived clients
        # do not all fill shard 0 first
        self._next = int(uuid.uuid4().int % self.count)

    @classmethod
    def of(cls, m: ShardMap, namespace: str) -> Shards:
        return cls(namespace, m.tags)

    def map(self) -> ShardMap:
        return ShardMap(count=self.count, tags=self.tags)

    def __repr__(self) -> str:
        return f"Shards({self.namespace!r}, count={self.count})"

    def keys(self, shard: int) -> Keys:
        """Shard ``shard``'s keys."""
        return self._keys[shard]

    def shard_of(self, an_id: str) -> int:
        """The shard of an id, within this namespace (an id naming a shard it does not
        have is taken for shard 0's: no task of this namespace has it)."""
        k = shard_of(an_id)
        return k if k < self.count else 0

    def new_id(self, shard: int) -> str:
        return new_id(shard, self.count)

    def _by(self, value: str) -> int:
        return _hash(value) % self.count

    def round_robin(self) -> int:
        k = self._next
        self._next = (k + 1) % self.count
        return k

    def place(
        self,
        *,
        owner: str | None = None,
        dedup: str | None = None,
        after: Sequence[str] | None = None,
        shard_key: str | None = None,
    ) -> int:
        """The shard of a new task: by its owner > its dedup key > its predecessors'
        shard > ``shard_key`` > round-robin (see the module). Raises
        :class:`rsjobs.PredecessorRefused` when its predecessors are not on one shard, or
        not on the shard its owner or dedup key places it on."""
        if self.count == 1:
            return 0
        rule = ""
        if owner:
            shard, rule = self._by(owner), "its owner"
        elif dedup:
            shard, rule = self._by(dedup), "its dedup key"
        elif after:
            shard = self.shard_of(after[0])
        elif shard_key:
            shard = self._by(shard_key)
        else:
            return self.round_robin()
        for p in after or ():
            at = self.shard_of(p)
            if at != shard:
                why = (
                    f"{rule} places the task on shard {shard}"
                    if rule
                    else f"another predecessor is on shard {shard}"
                )
                raise PredecessorRefused(
                    f"predecessor {p} is on shard {at} and {why}: a successor and its "
                    "predecessors must share a shard (give them an owner or a shard_key)"
                )
        return shard


async def load(scripts: Scripts, wanted: int | None) -> Shards:
    """The namespace's shards, as stored on shard 0 (``scripts``: shard 0's): created with
    ``wanted`` shards when it has no metadata and holds no data yet. Raises
    :class:`rsjobs.ConfigError` when ``wanted`` is not the namespace's count (nothing
    written), :class:`rsjobs.CorruptData` when the metadata does not read."""
    ns, k = scripts.keys.namespace, scripts.keys
    with boundary("GET shards"):
        raw = await scripts.redis.get(k.shards)
    if raw is None and wanted is not None and wanted > 1:
        m = ShardMap(count=wanted, tags=shard_tags(ns, wanted))
        call = layout.shards(scripts.common, k, "api", encode_map(m))
        found, _ = await scripts.run(call)
        raw = text(found) or None
    count = 1 if raw is None else decode_map(ns, raw).count
    if wanted is not None and wanted != count:
        has = f"{count} shard" + ("s" if count != 1 else "")
        why = " (it holds data written with one)" if count == 1 else ""
        raise ConfigError(f"namespace {ns} has {has}{why}, not {wanted}")
    return Shards(ns) if raw is None else Shards.of(decode_map(ns, raw), ns)
