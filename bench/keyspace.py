"""What each kind of key costs: every key of a Redis, grouped by the pattern of its name,
with its type and ``MEMORY USAGE``.

A key's pattern is its name with everything that looks like an id replaced by ``<id>``:
``rsjobs:{bench}:task:3f..9a:history`` becomes ``rsjobs:{bench}:task:<id>:history``,
``bull:bench:17`` becomes ``bull:bench:<id>``. So
the per-task keys of any system fall into a few groups, whatever its id format, and a
new key layout shows up as new groups without any change here.

``MEMORY USAGE <key> SAMPLES 0`` counts every element of the value, the key name and
the key's entry in the keyspace; it does not count the keyspace's bucket arrays (8
bytes per slot, a power of two at least the number of keys) or the entry of a key with
a TTL in the expires table. For hashes, sets, lists, zsets and strings it reads the
allocator's sizes and is close; for a stream it *estimates* the radix tree as about 30
words per node (Redis's own comment calls it "a very rough approximation"), so a small
stream of one node, such as a task's history, is over-counted by about 250 bytes.

``release`` gives the exact figure instead: it deletes the keys of one pattern at a
time and measures what ``used_memory`` gives back (destructive; for the end of a run).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from bench import redis_stats

# An id: a run of digits, or of 8+ hex digits (uuids with their dashes), standing alone
# or after a separator (``job-17``), never glued to letters (a queue named ``gpu2``).
_ID = re.compile(r"(?<![A-Za-z0-9])(?:[0-9a-fA-F]{8,}(?:-[0-9a-fA-F]{4,})*|\d+)(?![A-Za-z0-9])")

# Keys per SCAN call and per pipeline of MEMORY USAGE / TYPE calls.
_BATCH = 500


def pattern(key: str) -> str:
    """The key's name with its ids replaced by ``<id>``."""
    return _ID.sub("<id>", key)


@dataclass(frozen=True)
class KeyGroup:
    """The keys of one pattern: how many, their Redis type, and their memory in bytes."""

    pattern: str
    type: str
    keys: int
    bytes: int

    def as_dict(self) -> dict[str, Any]:
        return {"pattern": self.pattern, "type": self.type, "keys": self.keys, "bytes": self.bytes}


def _text(value: Any) -> str:
    return value.decode(errors="backslashreplace") if isinstance(value, bytes) else str(value)


async def groups(client: Redis) -> dict[str, KeyGroup]:
    """Every key of the current database, grouped by pattern (one SCAN pass, so a key
    written or deleted meanwhile may be missed or counted once; callers take it when
    nothing else is writing)."""
    counts: dict[str, list[Any]] = {}  # pattern -> [type, keys, bytes]
    cursor: Any = 0
    while True:
        cursor, keys = await client.scan(cursor=cursor, count=_BATCH)
        if keys:
            async with client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.type(key)
                    pipe.execute_command("MEMORY", "USAGE", key, "SAMPLES", "0")
                replies = await pipe.execute()
            for i, key in enumerate(keys):
                kind, size = _text(replies[2 * i]), replies[2 * i + 1]
                if size is None or kind == "none":  # gone since SCAN returned it
                    continue
                row = counts.setdefault(pattern(_text(key)), [kind, 0, 0])
                row[1] += 1
                row[2] += int(size)
        if int(cursor) == 0:
            break
    return {p: KeyGroup(p, t, n, b) for p, (t, n, b) in counts.items()}


def growth(before: dict[str, KeyGroup], after: dict[str, KeyGroup]) -> list[KeyGroup]:
    """What each pattern gained from ``before`` to ``after`` (keys and bytes, either may
    be negative), largest first; patterns that did not change are left out."""
    out: list[KeyGroup] = []
    for p in set(before) | set(after):
        b = before.get(p, KeyGroup(p, "", 0, 0))
        a = after.get(p, KeyGroup(p, b.type, 0, 0))
        if a.keys != b.keys or a.bytes != b.bytes:
            out.append(KeyGroup(p, a.type or b.type, a.keys - b.keys, a.bytes - b.bytes))
    return sorted(out, key=lambda g: (-abs(g.bytes), g.pattern))


@dataclass(frozen=True)
class Released:
    """What deleting every key of one pattern gave back to the allocator."""

    pattern: str
    keys: int
    freed_bytes: int


async def release(client: Redis, patterns: list[str]) -> list[Released]:
    """Delete the keys of each pattern in turn (in the given order) and measure, with
    settled snapshots around each, how much stored memory that freed: the key, its
    value, its keyspace entry and its expires entry. The keyspace's bucket arrays are
    not freed by this (Redis shrinks them later, and only below 10% fill)."""
    names: dict[str, list[Any]] = {p: [] for p in patterns}
    async for key in client.scan_iter(count=_BATCH):
        p = pattern(_text(key))
        if p in names:
            names[p].append(key)
    out: list[Released] = []
    for p in patterns:
        keys = names[p]
        before = await redis_stats.settled(client)
        for i in range(0, len(keys), _BATCH):
            # DEL, not UNLINK: the memory is freed before the reply, so it can be measured
            await client.delete(*keys[i : i + _BATCH])
        after = await redis_stats.settled(client)
        out.append(Released(p, len(keys), before.stored_memory - after.stored_memory))
    return out
