"""The README's operator commands (plain ``redis-cli``) run as documented on a real Redis,
and answer what they say they answer: the history of a task read from its hash, and the
list indexes (the newest failures, an owner's newest tasks, the paused ones)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import redis as sync_redis

from rsjobs import Client
from tests.examples.readme import parse, section
from tests.support.lua import LuaHarness

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"


def _operator_commands() -> list[str]:
    text = section(README.read_text(encoding="utf-8"), "Redis layout (for operators)")
    (block,) = [b for b in parse(text) if "redis-cli HSCAN" in b.code]
    return [line for line in block.code.splitlines() if line.startswith("redis-cli ")]


def _raw_lines(reply: object) -> list[str]:
    """A reply as ``redis-cli --raw`` prints it: one line per value, arrays (and maps, key
    then value) flattened."""
    if isinstance(reply, dict):
        return [line for kv in reply.items() for item in kv for line in _raw_lines(item)]
    if isinstance(reply, list | tuple):
        return [line for item in reply for line in _raw_lines(item)]
    return [] if reply is None else [str(reply)]


def _run(url: str, line: str, cli: str | None) -> list[str]:
    """One documented command, as a shell runs it (quotes and comment included): with
    ``redis-cli`` (``cli``) when the machine has one, else split by the shell's rules
    (``shlex``: quotes, the trailing comment) and sent as the same arguments (the embedded
    server ships no ``redis-cli``): this test never skips for want of it."""
    if cli is not None:
        cmd = line.replace("redis-cli ", f"{shlex.quote(cli)} -u {url} --raw ", 1)
        run = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=30)
        assert run.returncode == 0, (line, run.stderr)
        out = run.stdout.splitlines()
    else:
        args = shlex.split(line, comments=True)
        assert args[0] == "redis-cli", line
        with sync_redis.Redis.from_url(url, decode_responses=True) as r:
            r.response_callbacks.clear()  # the reply as the server sent it
            out = _raw_lines(r.execute_command(*args[1:]))
    assert not any(o.startswith("ERR") for o in out), (line, out)
    return out


@pytest.mark.parametrize("cli", [shutil.which("redis-cli"), None], ids=["redis-cli", "split"])
async def test_the_documented_redis_cli_commands_answer_as_documented(
    redis_url: str, cli: str | None
) -> None:
    async with Client.from_url(redis_url, namespace="default") as c:
        tid = await c.enqueue("render", {"frame": 1}, queue="gpu")
        await c.store.work.ensure_groups([c.keys.queue("gpu")])
        assert await c.cancel(tid, "not needed") == "CANCELLED"
        for _ in range(3):
            await c.cancel(tid, "again")  # one refusal entry, repeated twice
        hist = await c.history(tid)
        mine = await c.enqueue("render", queue="cpu", owner="alice")
        held = await c.enqueue("render", queue="cpu")
        await c.pause(held)
    r = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    h = LuaHarness("default", redis=r)  # a task that fails, as a worker would fail it
    failed = "f" * 32
    h.enqueue(failed, queue="gpu", max_attempts=1)
    ((entry, _),) = r.xreadgroup("workers", "w1", {c.keys.queue("gpu"): ">"})[0][1]
    h.finish(failed, "FAIL", h.start(failed, entry, queue="gpu")[5], queue="gpu")
    r.close()
    (refusal,) = [e for e in hist if e.rejected]
    commands = _operator_commands()
    assert [c.split()[1] for c in commands] == [
        "HGETALL", "HSCAN", "HGET", "XPENDING", "HGETALL", "XREVRANGE", "ZRANGE", "ZRANGE"
    ]  # fmt: skip
    out = {}
    for line in commands:
        line = line.replace("<id>", tid).replace("<entry id>", refusal.id)
        key = line.split()[1] + (":stats" if ":stats" in line else "")
        key += ":paused" if ":paused" in line else ""
        out[key] = _run(redis_url, line, cli)
    # the task and its history
    assert tid in out["HGETALL"] and "h1" in out["HGETALL"]
    # why is it where it is: the history entries, each field h<n> then its line
    cursor, *scanned = out["HSCAN"]
    assert cursor == "0"  # all of it in one call
    pairs = dict(zip(scanned[::2], scanned[1::2], strict=True))
    assert sorted(pairs) == [f"h{n}" for n in range(1, len(hist) + 1)]
    assert [pairs[f"h{n}"].split(" ")[0] for n in range(1, len(hist) + 1)] == [
        e.event for e in hist
    ]
    assert pairs[f"h{refusal.id}"].split("|")[0].endswith(" !")  # the refusal, marked
    # how often a refusal repeated
    assert out["HGET"] == [str(refusal.repeats)] and refusal.repeats == 2
    # deliveries in flight (none: the task was cancelled before any worker read it)
    assert out["XPENDING"][0] == "0"
    # counts per queue and state
    stats = out["HGETALL:stats"]
    assert "gpu:CANCELLED" in stats[::2]
    # the newest failures (entry id, then queue and task id), alice's newest, the paused
    assert out["XREVRANGE"][1:] == ["gpu", failed]
    (member,) = out["ZRANGE"]
    assert member.startswith("o5:alice|") and member.endswith(f"|{mine}")
    assert out["ZRANGE:paused"][0] == f"cpu:{held}"
