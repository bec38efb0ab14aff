"""Task lists on a real Redis (``Client.list_tasks``, read from the list indexes): every
state is listed from its index and only while true, pages cover a list exactly once and
newest first (tasks of one millisecond included), filters combine, a small owner's list is
read from its tag, a page is bounded when little matches, and bad cursors are refused."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator

import pytest
import redis as sync_redis

from rsjobs import Client, ConfigError, TaskSummary
from rsjobs.labels import encode_labels
from rsjobs.queries import list_query
from rsjobs.store import layout
from rsjobs.store.cursor import decode_cursor
from rsjobs.store.index import SCAN_MIN
from rsjobs.store.seal import open_cursor
from tests.support.lua import LuaHarness

pytestmark = pytest.mark.integration

_ids = (f"{n:032x}" for n in itertools.count(1))


@pytest.fixture
def h(redis_url: str) -> Iterator[LuaHarness]:
    r = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    yield LuaHarness(redis=r)
    r.close()


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Client]:
    c = Client.from_url(redis_url, namespace="t")  # the harness's namespace
    # marked before the harness writes (it writes through the scripts, not a store, which
    # would refuse a namespace holding data and no marker as one of an earlier layout)
    await c.store.require_layout()
    yield c
    await c.close()


def enqueue(
    h: LuaHarness,
    n: int,
    *,
    queue: str = "q",
    owner: str | None = None,
    labels: dict[str, str] | None = None,
    delay_ms: int = 0,
    type: str = "img",
) -> list[str]:
    """n tasks in one script call (they share a millisecond, mostly)."""
    ids = [next(_ids) for _ in range(n)]
    tasks = []
    for tid in ids:
        t = h.new_task(
            tid, queue=queue, owner=owner, labels=encode_labels(labels), delay_ms=delay_ms
        )
        tasks.append((h.tk(tid, queue), t._replace(type=type)))
    h.run(layout.enqueue(h.c, "api", tasks))
    h.r.sadd(h.k.queues, queue)
    return ids


def start_all(h: LuaHarness, queue: str = "q") -> dict[str, str]:
    """Deliver and start every waiting task of the queue; task id -> its lease."""
    h.group(queue)
    leases = {}
    for entry, fields in h.r.xreadgroup("workers", "w1", {h.k.queue(queue): ">"})[0][1]:
        tid = fields["id"]
        leases[tid] = h.start(tid, entry, queue=queue)[5]
    return leases


def finish_all(h: LuaHarness, leases: dict[str, str], event: str, queue: str = "q") -> None:
    for tid, lease in leases.items():
        h.finish(tid, event, lease, queue=queue, retryable=False)


async def every_page(client: Client, limit: int, **filters: object) -> list[TaskSummary]:
    out: list[TaskSummary] = []
    cursor = None
    for _ in range(10_000):
        page = await client.list_tasks(limit=limit, cursor=cursor, **filters)  # type: ignore[arg-type]
        out += page.items
        cursor = page.cursor
        if cursor is None:
            return out
    raise AssertionError("the pages never ended")


def by_state(items: list[TaskSummary]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for s in items:
        out.setdefault(s.state, set()).add(s.id)
    return out


async def make_every_state(h: LuaHarness) -> dict[str, set[str]]:
    """Two tasks in each state, in queues q and r."""
    want: dict[str, set[str]] = {}
    for queue in ("q", "r"):
        ok = enqueue(h, 1, queue=queue)
        failed = enqueue(h, 1, queue=queue)
        running = enqueue(h, 1, queue=queue)
        leases = start_all(h, queue)
        finish_all(h, {ok[0]: leases[ok[0]]}, "COMPLETE", queue)
        finish_all(h, {failed[0]: leases[failed[0]]}, "FAIL", queue)
        (cancelled,) = enqueue(h, 1, queue=queue)
        h.control(cancelled, "CANCEL", queue=queue)
        (paused,) = enqueue(h, 1, queue=queue)
        h.control(paused, "PAUSE", queue=queue)
        (expired,) = enqueue(h, 1, queue=queue, delay_ms=60_000)
        h.r.hset(h.k.task(expired), "expires_at", 1)  # past its queue-wait deadline
        h.promote()  # EXPIRE at PROMOTE
        (scheduled,) = enqueue(h, 1, queue=queue, delay_ms=60_000)
        (pending,) = enqueue(h, 1, queue=queue)
        for state, tid in [
            ("SUCCEEDED", ok[0]), ("FAILED", failed[0]), ("RUNNING", running[0]),
            ("CANCELLED", cancelled), ("PAUSED", paused), ("TIMED_OUT", expired),
            ("SCHEDULED", scheduled), ("PENDING", pending),
        ]:  # fmt: skip
            want.setdefault(state, set()).add(tid)
    return want


async def test_every_state_is_listed_from_its_index(h: LuaHarness, client: Client) -> None:
    want = await make_every_state(h)
    assert len(want) == 8 and all(len(v) == 2 for v in want.values())
    assert by_state(await every_page(client, 50)) == want
    for state, ids in want.items():
        assert by_state(await every_page(client, 50, state=state)) == {state: ids}
    in_r = await every_page(client, 3, queue="r")
    assert {s.queue for s in in_r} == {"r"} and len(in_r) == 8
    two = await every_page(client, 50, state=["FAILED", "PAUSED"], queue="q")
    assert {(s.state, s.queue) for s in two} == {("FAILED", "q"), ("PAUSED", "q")}


async def test_an_entry_no_longer_true_is_skipped(h: LuaHarness, client: Client) -> None:
    a, b, c = enqueue(h, 3)
    leases = start_all(h)
    assert by_state(await every_page(client, 10)) == {"RUNNING": {a, b, c}}
    h.finish(a, "COMPLETE", leases[a])
    h.finish(b, "REQUEUE", leases[b])  # back to PENDING: a new entry, the old one is gone
    h.r.delete(h.k.task(c))  # as if expired: its stream entry (and nothing else) is left
    assert by_state(await every_page(client, 10)) == {"SUCCEEDED": {a}, "PENDING": {b}}
    h.r.delete(h.k.task(a))
    assert await every_page(client, 10, state="SUCCEEDED") == []


@pytest.mark.parametrize("limit", [1, 7, 50])
async def test_pages_cover_a_list_once_newest_first(
    h: LuaHarness, client: Client, limit: int
) -> None:
    ids: set[str] = set()
    for queue in ("q", "r", "s"):
        ids |= set(enqueue(h, 30, queue=queue))  # 30 tasks of about one millisecond
        leases = start_all(h, queue)
        finish_all(h, dict(itertools.islice(leases.items(), 20)), "COMPLETE", queue)
        ids |= set(enqueue(h, 10, queue=queue, delay_ms=5000))
    for filters in (
        {},
        {"state": "SUCCEEDED"},
        {"queue": "r"},
        {"state": ["RUNNING", "SCHEDULED"]},
    ):
        items = await every_page(client, limit, **filters)
        got = [s.id for s in items]
        assert len(got) == len(set(got)), "a task was listed twice"
        if not filters:
            assert set(got) == ids
        times = [s.listed_at for s in items]
        assert times == sorted(times, reverse=True), "not newest first"
    assert len(await every_page(client, limit, state="SUCCEEDED")) == 60
    assert len(await every_page(client, limit, queue="r")) == 40


async def test_filters_combine(h: LuaHarness, client: Client) -> None:
    mine = enqueue(h, 3, owner="alice", labels={"user": "u_9", "character": "c1"})
    enqueue(h, 2, owner="alice", labels={"user": "u_1"})
    enqueue(h, 4, owner="bob", labels={"user": "u_9"})
    other_type = enqueue(h, 2, owner="alice", type="video", labels={"user": "u_9"})
    assert len(await every_page(client, 2, owner="alice")) == 7
    got = await every_page(client, 2, owner="alice", label="user=u_9", type="img")
    assert {s.id for s in got} == set(mine)
    assert got[0].labels == {"character": "c1", "user": "u_9"} and got[0].owner == "alice"
    both = await every_page(client, 2, label=["user=u_9", "character=c1"])
    assert {s.id for s in both} == set(mine)
    assert len(await every_page(client, 50, label={"user": "u_9"})) == 9
    assert {s.id for s in await every_page(client, 50, type="video")} == set(other_type)
    # time bounds are on the time the list orders by
    items = await every_page(client, 50)
    t = sorted({s.listed_at for s in items})
    mid = t[len(t) // 2]
    later = await every_page(client, 3, since=mid)
    assert later and all(s.listed_at >= mid for s in later)
    earlier = await every_page(client, 3, until=mid)
    assert earlier and all(s.listed_at <= mid for s in earlier)
    assert len(later) + len(earlier) - sum(s.listed_at == mid for s in items) == len(items)


async def test_a_small_owner_is_read_from_its_tag(h: LuaHarness, client: Client) -> None:
    enqueue(h, 300, owner="bob")
    alice = enqueue(h, 2, owner="alice") + enqueue(h, 1, owner="alice")
    enqueue(h, 300)
    page = await client.list_tasks(owner="alice", limit=1)
    assert page.cursor is not None
    key = await client.store.index.cursor_key(create=False)
    context = "tasks:" + list_query(owner="alice").fingerprint()
    assert decode_cursor(open_cursor(key, context, page.cursor)).driver == "t0"
    items = await every_page(client, 1, owner="alice")
    assert [s.id for s in items] == sorted(alice, key=lambda t: alice.index(t), reverse=True)
    created = [s.created_at for s in items]
    assert created == sorted(created, reverse=True)  # by creation time, newest first
    # a big owner beside a small state: still its own range (never an index that holds
    # other owners' tasks), every entry looked at within one page's bound
    page = await client.list_tasks(owner="bob", state="SCHEDULED", limit=1)
    assert page.items == [] and page.cursor is None


async def test_a_page_is_bounded_when_little_matches(h: LuaHarness, client: Client) -> None:
    for _ in range(5):
        enqueue(h, 250)
    page = await client.list_tasks(type="nothing", limit=10)
    assert page.items == [] and page.cursor is not None  # stopped after SCAN_MIN entries
    assert SCAN_MIN < 1250
    page = await client.list_tasks(type="nothing", limit=10, cursor=page.cursor)
    assert page.items == [] and page.cursor is None


async def test_bad_cursors_are_refused(h: LuaHarness, client: Client) -> None:
    enqueue(h, 5)
    page = await client.list_tasks(limit=2)
    assert page.cursor is not None
    with pytest.raises(ConfigError, match="other filters"):
        await client.list_tasks(limit=2, cursor=page.cursor, state="PENDING")
    for bad in ("nonsense", "W10", "x" * 5000, page.cursor[:-4]):
        with pytest.raises(ConfigError, match="invalid cursor"):
            await client.list_tasks(limit=2, cursor=bad)


@pytest.mark.parametrize(
    ("filters", "says"),
    [
        ({"state": "DONE"}, "unknown state"),
        ({"queue": "no spaces"}, "invalid queue"),
        ({"label": "novalue"}, "key=value"),
        ({"label": "bad key=v"}, "label key"),
        ({"since": -1}, "since"),
        ({"since": 10, "until": 5}, "since must not be after until"),
        ({"limit": 0}, "limit"),
        ({"limit": 501}, "limit"),
        ({"type": ""}, "type must be"),
        ({"owner": 5}, "owner must be"),
        ({"cursor": 5}, "cursor must be"),
    ],
)
async def test_bad_filters_are_refused(
    client: Client, filters: dict[str, object], says: str
) -> None:
    with pytest.raises(ConfigError, match=says):
        await client.list_tasks(**filters)  # type: ignore[arg-type]


async def test_labels_are_kept_shown_and_checked_before_writing(client: Client) -> None:
    tid = await client.enqueue("img", queue="gpu", labels={"user": "u_9", "character": "c"})
    info = await client.get(tid)
    assert info.labels == {"character": "c", "user": "u_9"}
    before = await client.redis.dbsize()
    for bad in (
        {"": "x"},
        {"k": ""},
        {"k": "x" * 65},
        {"k": "tab\there"},
        {"sp ace": "v"},
        {f"k{i}": "v" for i in range(9)},
    ):
        with pytest.raises(ConfigError):
            await client.enqueue("img", labels=bad)
    assert await client.redis.dbsize() == before


@pytest.mark.parametrize("limit", [1, 2, 3, 5])
async def test_a_millisecond_shared_by_several_indexes_is_paged_exactly(
    h: LuaHarness, client: Client, limit: int
) -> None:
    """Entries of three indexes at the same times (written here as the scripts would):
    every page boundary inside such a millisecond resumes each index where it should."""
    k, r = h.k, h.r
    want = set()
    for n, (state, ms) in enumerate(
        itertools.product(("SUCCEEDED", "FAILED", "PAUSED"), (999, 1000, 1000, 1000, 1001))
    ):
        tid = f"{n + 1:032x}"
        r.hset(k.task(tid), mapping={"id": tid, "s": state, "q": "q", "t": "img", "c": 1})
        if state == "PAUSED":
            r.zadd(k.paused_tasks, {f"q:{tid}": ms})
        else:
            r.xadd(k.done_stream(state), {"q": tid}, id=f"{ms}-{n}")
        want.add(tid)
    items = await every_page(client, limit)
    got = [s.id for s in items]
    assert len(got) == len(set(got)) and set(got) == want
    assert [s.listed_at for s in items] == sorted((s.listed_at for s in items), reverse=True)


async def test_a_rare_queue_behind_many_entries_of_another_is_reached(
    h: LuaHarness, client: Client
) -> None:
    """Entries of other queues that a list drops without reading a hash count towards the
    page's bound, and the cursor moves past them: the pages go on to the rare queue's."""
    rare = enqueue(h, 3, queue="b")
    finish_all(h, start_all(h, "b"), "COMPLETE", "b")
    for _ in range(6):
        enqueue(h, 250, queue="a")
        finish_all(h, start_all(h, "a"), "COMPLETE", "a")
    first = await client.list_tasks(state="SUCCEEDED", queue="b", limit=10)
    assert first.items == [] and first.cursor is not None  # 1,500 entries of a come first
    items = await every_page(client, 10, state="SUCCEEDED", queue="b")
    assert {s.id for s in items} == set(rare)
    # scheduled tasks of another queue are dropped the same way
    later = enqueue(h, 2, queue="b", delay_ms=1000)
    enqueue(h, 1200, queue="a", delay_ms=2000)
    assert {s.id for s in await every_page(client, 5, state="SCHEDULED", queue="b")} == set(later)


async def test_an_owner_of_any_name_is_paged(h: LuaHarness, client: Client) -> None:
    owner = "\U0001d11e" * 200  # the longest owner Client.enqueue takes: 800 bytes
    mine = enqueue(h, 5, owner=owner)
    enqueue(h, 50)
    assert {s.id for s in await every_page(client, 2, owner=owner)} == set(mine)
