"""The cluster client without a cluster: which key a command is about, slots, redirects,
cluster URLs, and how :class:`ClusterRedis` routes, follows and refuses to repeat
(fake nodes stand in for the masters)."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

import pytest
from redis import exceptions as rx
from redis.crc import key_slot

from rsjobs import ConfigError, RedisUnavailable, SlotMigrating
from rsjobs.store import cluster as cluster_mod
from rsjobs.store.cluster import ClusterRedis, command_key, redirect_of, slot_of
from rsjobs.store.connection import connect, moved_hint, parse_url
from rsjobs.store.lane import NotSent, classify

A, B = ("10.0.0.1", 7000), ("10.0.0.2", 7001)
KEY = "rsjobs:{t}:task:1"
SLOT = slot_of(KEY)


@pytest.mark.parametrize(
    "args, key",
    [
        (("HGETALL", KEY), KEY),
        (("EVALSHA", "sha", 3, KEY, "k2", "k3", "argv"), KEY),
        (("EVALSHA", "sha", 0, "argv"), None),
        (("XREADGROUP", "GROUP", "g", "c", "COUNT", 5, "BLOCK", 10, "STREAMS", KEY, ">"), KEY),
        (("XREAD", "COUNT", 1, "STREAMS", KEY, "0-0"), KEY),
        (("XGROUP CREATE", KEY, "g", "0"), KEY),
        (("XGROUP", "CREATE", KEY, "g", "0"), KEY),
        (("XINFO STREAM", KEY), KEY),
        (("MEMORY USAGE", KEY), KEY),
        (("OBJECT", "ENCODING", KEY), KEY),
        (("PING",), None),
        (("INFO", "cluster"), None),
        (("WAIT", 1, 100), None),
        (("SCRIPT LOAD", "return 1"), None),
        (("SCAN", 0, "MATCH", "rsjobs:{t}:*", "COUNT", 10), "rsjobs:{t}:*"),
        (("SCAN", 0, "MATCH", "rsjobs:{t*}:x"), None),
        (("SCAN", 0), None),
    ],
)
def test_command_key(args: tuple[Any, ...], key: str | None) -> None:
    assert command_key(args) == key


def test_slots_follow_the_hash_tag() -> None:
    assert slot_of("rsjobs:{images}:task:x") == key_slot(b"images")
    assert slot_of("rsjobs:{images}:queue:a") == slot_of("rsjobs:{images}:workers")
    assert slot_of("plain") == key_slot(b"plain")
    assert slot_of("a{}b") == key_slot(b"a{}b")  # an empty tag is no tag
    assert slot_of(b"rsjobs:{images}:x") == key_slot(b"images")


@pytest.mark.parametrize(
    "exc, expected",
    [
        (rx.MovedError("3999 127.0.0.1:6381"), ("MOVED", 3999, ("127.0.0.1", 6381))),
        (rx.ResponseError("MOVED 3999 127.0.0.1:6381"), ("MOVED", 3999, ("127.0.0.1", 6381))),
        (rx.AskError("12 h:1"), ("ASK", 12, ("h", 1))),
        (rx.ResponseError("ASK 12 h:1"), ("ASK", 12, ("h", 1))),
        (rx.TryAgainError("Multiple keys"), ("TRYAGAIN", -1, None)),
        (rx.ResponseError("CLUSTERDOWN The cluster is down"), ("CLUSTERDOWN", -1, None)),
        (classify("MASTERDOWN Link down"), ("MASTERDOWN", -1, None)),
        (rx.ResponseError("WRONGTYPE x"), None),
        (rx.ConnectionError("reset"), None),
    ],
)
def test_redirects_read_both_redis_py_styles(exc: BaseException, expected: Any) -> None:
    assert redirect_of(exc) == expected


def test_cluster_urls() -> None:
    t = parse_url("redis+cluster://u:p%40ss@10.0.0.1:7000,10.0.0.2,[::1]:7002")
    assert t.topology == "cluster" and not t.tls
    assert t.nodes == (("10.0.0.1", 7000), ("10.0.0.2", 6379), ("::1", 7002))
    assert (t.username, t.password) == ("u", "p@ss")
    assert "p@ss" not in t.describe() and "10.0.0.2:6379" in t.describe()
    assert parse_url("rediss+cluster://h:1/0").tls
    for bad in ("redis+cluster://h:1/3", "redis+cluster://h:1?x=1", "redis+cluster://h:0",
                "redis+cluster://"):  # fmt: skip
        with pytest.raises(ConfigError):
            parse_url(bad)


async def test_connect_builds_cluster_clients() -> None:
    c = connect("redis+cluster://127.0.0.1:1,127.0.0.1:2", socket_timeout=2.0)
    assert isinstance(c, ClusterRedis) and c.seeds == (("127.0.0.1", 1), ("127.0.0.1", 2))
    node = c.node_client(("127.0.0.1", 1))
    assert node.lane is not None and node.connection_pool.connection_kwargs["socket_timeout"] == 2
    await c.aclose()
    # a plain URL nobody answers is taken for a standalone server (and asked again later)
    s = connect("redis://127.0.0.1:1/0", connect_timeout=0.5)
    assert not isinstance(s, ClusterRedis)
    await s.aclose()
    forced = connect("redis://127.0.0.1:1/0", cluster=True)
    assert isinstance(forced, ClusterRedis) and forced.seeds == (("127.0.0.1", 1),)
    await forced.aclose()
    with pytest.raises(ConfigError, match="database 0"):
        connect("redis://127.0.0.1:1/2", cluster=True)


def test_moved_hint() -> None:
    moved = rx.ResponseError("MOVED 3999 10.0.0.2:7001")
    hint = moved_hint(moved, "redis://:secret@10.0.0.1:7000/0")
    assert hint is not None and "secret" not in hint
    assert hint.endswith("connect with redis+cluster://10.0.0.1:7000")
    assert "10.0.0.2:7001" in hint
    assert moved_hint(moved, "redis+cluster://10.0.0.1:7000") is None
    assert moved_hint(rx.ResponseError("WRONGTYPE x"), "redis://h:1/0") is None


# -- routing, with fake masters ------------------------------------------------------------


class FakeLane:
    def __init__(self, node: FakeNode) -> None:
        self.node = node

    async def call(self, *args: Any) -> Any:
        return self.node.answer("lane", args)

    async def call_asking(self, *args: Any) -> Any:
        return self.node.answer("asking", args)

    async def aclose(self) -> None:
        return None


class FakeNode:
    """A master: answers from ``replies`` (an exception is raised), else "OK"."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self.replies: deque[Any] = deque()
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.lane = FakeLane(self)

    def answer(self, how: str, args: tuple[Any, ...]) -> Any:
        self.calls.append((how, args))
        reply = self.replies.popleft() if self.replies else "OK"
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        return self.answer("pool", args)

    async def aclose(self) -> None:
        return None


class FakeCluster(ClusterRedis):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__([A], decode_responses=True)
        self.fakes = {A: FakeNode(A), B: FakeNode(B)}
        self.owner = A  # who CLUSTER SLOTS says serves every slot
        self.reads = 0

    def node_client(self, address: tuple[str, int]) -> Any:
        return self.fakes[address]

    async def _cluster_slots(self, address: tuple[str, int]) -> Any:
        self.reads += 1
        return [[0, 16383, [self.owner[0], self.owner[1], "id"]]]


@pytest.fixture
async def fc() -> Any:
    c = FakeCluster()
    yield c
    await c.aclose()


async def test_scripts_go_over_the_owners_lane(fc: FakeCluster) -> None:
    assert await fc.execute_command("EVALSHA", "sha", 1, KEY, "a") == "OK"
    assert await fc.execute_command("HGET", KEY, "f") == "OK"
    assert fc.fakes[A].calls == [("lane", ("EVALSHA", "sha", 1, KEY, "a")),
                                 ("pool", ("HGET", KEY, "f"))]  # fmt: skip
    assert fc.reads == 1  # the slot table, once


@pytest.mark.parametrize("classed", [True, False])
async def test_redirects_are_followed_within_a_bound(fc: FakeCluster, classed: bool) -> None:
    await fc.execute_command("PING")  # the slot table says A
    moved = f"MOVED {SLOT} {B[0]}:{B[1]}"
    fc.fakes[A].replies.append(classify(moved) if classed else rx.ResponseError(moved))
    fc.owner = B  # the cluster failed over
    await fc.execute_command("EVALSHA", "sha", 1, KEY)
    assert len(fc.fakes[A].calls) == 2 and len(fc.fakes[B].calls) == 1
    # MAX_HOPS redirects in a row are followed (a stale table's MOVED, then the new
    # master's ASK); one more goes to the caller (the policy calls it passing)
    hops = cluster_mod.MAX_HOPS
    fc.fakes[B].replies.extend([classify(moved)] * (hops + 1))
    with pytest.raises(rx.MovedError):
        await fc.execute_command("EVALSHA", "sha", 1, KEY)
    assert len(fc.fakes[B].calls) == 1 + hops + 1


async def test_ask_sends_asking_to_the_importing_node(fc: FakeCluster) -> None:
    fc.fakes[A].replies.append(classify(f"ASK {SLOT} {B[0]}:{B[1]}"))
    await fc.execute_command("EVALSHA", "sha", 1, KEY)
    assert fc.fakes[B].calls == [("asking", ("EVALSHA", "sha", 1, KEY))]
    assert fc.reads == 1  # an ASK leaves the slot to its master: no table read


async def test_tryagain_is_tried_again_with_backoff(fc: FakeCluster) -> None:
    """A script whose keys a migration split: the source says ASK, the importing node
    TRYAGAIN, until the keys are on one node; then it runs there."""
    ask = classify(f"ASK {SLOT} {B[0]}:{B[1]}")
    fc.fakes[A].replies.extend([ask, ask, ask])
    fc.fakes[B].replies.extend([classify("TRYAGAIN Multiple keys"), rx.TryAgainError("x")])
    assert await fc.execute_command("EVALSHA", "sha", 2, KEY, KEY + "x") == "OK"
    assert [how for how, _ in fc.fakes[B].calls] == ["asking"] * 3
    assert len(fc.fakes[A].calls) == 3


async def test_tryagain_ends_in_a_typed_error_within_its_bound(
    fc: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cluster_mod, "TRYAGAIN_WAIT", 0.3)
    fc.fakes[A].replies.extend([rx.TryAgainError("Multiple keys")] * 1000)
    t0 = time.monotonic()
    with pytest.raises(SlotMigrating) as caught:
        await fc.execute_command("EVALSHA", "sha", 2, KEY, KEY + "x")
    assert 0.1 < time.monotonic() - t0 < 0.6
    assert caught.value.slot == SLOT and "TRYAGAIN" in str(caught.value)
    assert isinstance(caught.value, RedisUnavailable)  # passing, as the policy says
    assert 3 < len(fc.fakes[A].calls) < 20  # backed off, not a busy loop


async def test_a_refused_connection_is_sent_once_more_after_a_table_read(
    fc: FakeCluster,
) -> None:
    """A master that failed while the client was idle refuses the connection: nothing
    was sent, so the command goes once more, to the master the slot table names then."""
    await fc.execute_command("PING")
    fc.fakes[A].replies.append(NotSent("error connecting to Redis at 10.0.0.1:7000"))
    fc.owner = B
    assert await fc.execute_command("EVALSHA", "sha", 1, KEY) == "OK"
    assert fc.reads == 2 and len(fc.fakes[B].calls) == 1
    # refused twice: the caller hears of it (one more try only)
    fc.fakes[B].replies.extend([NotSent("refused"), NotSent("refused")])
    with pytest.raises(NotSent):
        await fc.execute_command("EVALSHA", "sha", 1, KEY)
    assert len(fc.fakes[B].calls) == 3


async def test_a_lost_connection_is_never_repeated(fc: FakeCluster) -> None:
    """The script may have run: it goes to the caller, sent once; the slot table is read
    again before the next command, which finds the new master."""
    await fc.execute_command("PING")
    fc.fakes[A].replies.append(rx.ConnectionError("Connection closed by server."))
    with pytest.raises(rx.ConnectionError):
        await fc.execute_command("EVALSHA", "sha", 1, KEY)
    assert len(fc.fakes[A].calls) == 2 and fc.reads == 1
    fc.owner = B
    await asyncio.sleep(cluster_mod.REFRESH_GAP)
    await fc.execute_command("EVALSHA", "sha", 1, KEY)
    assert fc.reads == 2 and len(fc.fakes[B].calls) == 1


async def test_clusterdown_is_retried_within_a_bound(
    fc: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cluster_mod, "CLUSTER_DOWN_WAIT", 0.5)
    down = rx.ResponseError("CLUSTERDOWN The cluster is down")
    fc.fakes[A].replies.extend([down, down])
    assert await fc.execute_command("HGET", KEY, "f") == "OK"
    assert len(fc.fakes[A].calls) == 3
    fc.fakes[A].replies.extend([down] * 100)
    t0 = time.monotonic()
    with pytest.raises(rx.ResponseError, match="CLUSTERDOWN"):
        await fc.execute_command("HGET", KEY, "f")
    assert 0.4 < time.monotonic() - t0 < 2.0


async def test_pipelines_run_on_one_master(fc: FakeCluster) -> None:
    with pytest.raises(rx.ClusterCrossSlotError):
        async with fc.pipeline(transaction=True) as pipe:
            pipe.get("rsjobs:{a}:x")
            pipe.get("rsjobs:{b}:x")
            await pipe.execute()


async def test_a_failover_reset_keeps_the_connections(fc: FakeCluster) -> None:
    """After a failover reply the processes reset their connections: a cluster client
    only reads its slot table again (its connections are each one node's; dropping them
    would lose the replies in flight on the masters that did not fail)."""
    from rsjobs.store.connection import reset_connections

    await fc.execute_command("PING")
    fc.owner = B
    await reset_connections(fc)
    await asyncio.sleep(cluster_mod.REFRESH_GAP)
    await fc.execute_command("HGET", KEY, "f")
    assert fc.reads == 2 and fc.fakes[B].calls == [("pool", ("HGET", KEY, "f"))]


async def test_one_nodes_word_on_the_slots_is_not_enough() -> None:
    """A replica that lost a failover race may say it serves the namespace's slot while
    every master says its old master does (Redis 7 let one do so in a chaos run: it took
    writes and threw them away when the old master came back). The slot table is what two
    nodes agree on, masters asked first: the writes go nowhere rather than to it."""
    C = ("10.0.0.3", 7002)

    class Split(FakeCluster):
        def __init__(self) -> None:
            super().__init__()
            self.fakes[C] = FakeNode(C)
            self.says: dict[tuple[str, int], tuple[str, int]] = {}
            self.dead: set[tuple[str, int]] = set()

        async def _cluster_slots(self, address: tuple[str, int]) -> Any:
            if address in self.dead:
                raise rx.ConnectionError("refused")
            self.reads += 1
            owner = self.says.get(address, self.owner)
            replica = [[B[0], B[1], "b"]] if owner == A else []
            return [[0, SLOT, [owner[0], owner[1], "o"], *replica],
                    [SLOT + 1, 16383, [C[0], C[1], "c"]]]  # fmt: skip

    c = Split()
    try:
        await c.execute_command("HGET", KEY, "f")
        assert c.fakes[A].calls  # every node said A
        c.dead.add(A)
        c.says[B] = B  # the rogue replica
        c.fakes[A].replies.append(rx.ConnectionError("Connection closed by server."))
        with pytest.raises(rx.ConnectionError):
            await c.execute_command("HGET", KEY, "f")
        await asyncio.sleep(cluster_mod.REFRESH_GAP)
        await c.execute_command("HGET", KEY, "g")
        assert c.fakes[B].calls == [] and c.fakes[A].calls[-1] == ("pool", ("HGET", KEY, "g"))
        # once the masters agree that B serves it, B it is
        c.owner = B
        c.mark_stale()
        await asyncio.sleep(cluster_mod.REFRESH_GAP)
        await c.execute_command("HGET", KEY, "h")
        assert c.fakes[B].calls == [("pool", ("HGET", KEY, "h"))]
    finally:
        await c.aclose()


async def test_time_is_read_from_the_namespaces_master(fc: FakeCluster) -> None:
    """TIME has no key: the store names one (redis-py's ``keys=`` option), so that on a
    cluster it is the clock of the node whose scripts stamp the namespace's times."""
    C = ("10.0.0.3", 7002)
    fc.fakes[C] = FakeNode(C)

    async def two_masters(address: tuple[str, int]) -> Any:
        fc.reads += 1
        return [[0, SLOT - 1, [C[0], C[1], "c"]], [SLOT, 16383, [A[0], A[1], "a"]]]

    fc._cluster_slots = two_masters  # type: ignore[method-assign]
    fc.fakes[A].replies.append([1_700_000_000, 5000])
    assert await fc.execute_command("TIME", keys=[KEY]) == [1_700_000_000, 5000]
    assert fc.fakes[A].calls == [("pool", ("TIME",))] and fc.fakes[C].calls == []
    await fc.execute_command("TIME")  # without a key: the first master
    assert fc.fakes[C].calls == [("pool", ("TIME",))]


async def test_a_wait_after_a_redirected_write_goes_with_it(fc: FakeCluster) -> None:
    """Durable mode's EVALSHA then WAIT: when the write is redirected (the master failed
    over), the WAIT is sent again with it to the new master. Left on the old node (a
    replica now) it would answer "WAIT cannot be used with replica instances" about a
    write that went elsewhere."""
    await fc.execute_command("PING")  # the slot table says A
    sent: list[tuple[tuple[str, int], list[tuple[Any, ...]]]] = []

    async def run_on(node: Any, stack: Any, transaction: bool, asking: bool) -> Any:
        sent.append((node.address, [args for args, _ in stack]))
        if node.address == A:
            moved = classify(f"MOVED {SLOT} {B[0]}:{B[1]}")
            return [moved, rx.ResponseError("WAIT cannot be used with replica instances")], None
        return ["reply", 1][-len(stack) :], None

    fc._run_on = run_on  # type: ignore[method-assign]
    fc.owner = B  # the cluster failed over
    async with fc.pipeline(transaction=False) as pipe:
        pipe.execute_command("EVALSHA", "sha", 1, KEY)
        pipe.execute_command("WAIT", 1, 100)
        assert await pipe.execute() == ["reply", 1]
    assert sent == [
        (A, [("EVALSHA", "sha", 1, KEY), ("WAIT", 1, 100)]),
        (B, [("EVALSHA", "sha", 1, KEY), ("WAIT", 1, 100)]),
    ]
