"""Pages of the namespace's workflows, newest first (``GET /workflows``,
``Client.list_workflows``, ``rsjobs workflows list``), read from the index the workflow
scripts keep (``workflows``: every workflow id by creation time, written by
``wf_start.lua`` in start order: a start in the newest entry's millisecond is indexed
1 ms after it, so newest first is the order of starts, never that of random ids; the
driver drops the ids of workflows that expired after the retention period), never from a
scan of the keyspace.

A page walks the index from its cursor and checks each id against its workflow's hash and
the filters (state, definition name, owner); it looks at a bounded number of ids
(:data:`SCAN_MIN`, or 10 per workflow asked for), so a very selective filter may give a
short page with a cursor to go on. The cursor is the last id looked at and its creation
time, sealed as a task list's is (:mod:`rsjobs.store.seal`: opaque, authenticated, bound
to the filters and owner): a page after it starts where that one stopped.
"""

from __future__ import annotations

import re

import msgspec

from ..errors import ConfigError
from ..names import is_name, is_owner
from ..store import Store
from ..store.cursor import fingerprint
from ..store.seal import check_form, open_cursor, seal_cursor
from .model import WfStatus, is_terminal

__all__ = ["MAX_PAGE", "SCAN_MIN", "StageState", "WorkflowPage", "WorkflowSummary", "page"]

#: the largest page
MAX_PAGE = 200
#: a page looks at no more than this many index entries, or 10 per workflow asked for
SCAN_MIN = 1000
_BATCH = 200
_CURSOR = re.compile(r"([0-9]{1,15})\.([0-9a-f]{32})")
_STATES = frozenset(s.value for s in WfStatus)
_FIELDS = ("id", "def", "status", "version", "owner", "created_at", "updated_at", "stage")


class StageState(msgspec.Struct, frozen=True, kw_only=True):
    """One stage of a listed workflow: ``SUCCEEDED`` (done), the workflow's status for its
    current stage (``RUNNING``, ``WAITING_CONFIRMATION``, ``PARTIALLY_FAILED``, ``FAILED``,
    ``CANCELLED``; ``SUCCEEDED`` once ready to publish or published), ``PENDING`` for a
    later stage, ``SKIPPED`` for a later stage of a workflow that ended before it."""

    name: str
    state: str


class WorkflowSummary(msgspec.Struct, frozen=True, kw_only=True):
    """A workflow as a list shows it. Times are Redis TIME in ms."""

    id: str
    #: its definition's name
    name: str
    state: str
    version: int
    owner: str = ""
    created_at: int
    updated_at: int
    stages: list[StageState]


class WorkflowPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page of workflows, newest first; ``cursor`` asks for the next (None: the last)."""

    workflows: list[WorkflowSummary]
    cursor: str | None = None


class _Stage(msgspec.Struct):
    name: str = ""


class _Plan(msgspec.Struct):
    stages: list[_Stage] = msgspec.field(default_factory=list)


_plan = msgspec.json.Decoder(_Plan)


def _stage_states(status: str, current: int, names: list[str]) -> list[StageState]:
    done_all = status in ("READY_TO_PUBLISH", "PUBLISHED")
    out = []
    for i, name in enumerate(names):
        if i < current or done_all:
            state = "SUCCEEDED"
        elif i == current:
            state = status
        else:
            state = "SKIPPED" if is_terminal(status) else "PENDING"
        out.append(StageState(name=name, state=state))
    return out


def _int(v: str | None) -> int:
    return int(v) if v is not None and v.isdigit() else 0


def check(
    *, state: str | None, name: str | None, owner: str | None, cursor: str | None, limit: int
) -> tuple[int, str] | None:
    """Raise :class:`rsjobs.ConfigError` for a bad filter; the decoded cursor."""
    if state is not None and state not in _STATES:
        raise ConfigError(f"state: one of {', '.join(sorted(_STATES))}")
    if name is not None and not is_name(name):
        raise ConfigError("name: a definition name (1-64 letters, digits, '_', '.', '-')")
    if owner is not None and not is_owner(owner):
        raise ConfigError("owner: 1-128 letters, digits, '_', '.', '@', '-'")
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE:
        raise ConfigError(f"limit must be an integer between 1 and {MAX_PAGE}")
    if cursor is None:
        return None
    m = _CURSOR.fullmatch(cursor) if isinstance(cursor, str) else None
    if m is None:
        raise ConfigError("invalid cursor: pass the cursor a page of workflows returned")
    return int(m[1]), m[2]


async def page(
    store: Store,
    *,
    state: str | None = None,
    name: str | None = None,
    owner: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> WorkflowPage:
    """One page of workflows after ``cursor``, newest first, in ``state``, of definition
    ``name`` and of ``owner`` (None: any). Raises :class:`rsjobs.ConfigError` for a bad
    filter, limit or cursor.

    A sharded namespace's page merges its shards' by (creation time, id), the cursor's
    order in every shard: nothing past the point where a shard that has more stopped
    looking is handed out (it has not looked past it). Not one atomic view."""
    context = "workflows:" + fingerprint([state, name, owner])
    if cursor is not None:
        check(state=state, name=name, owner=owner, cursor=None, limit=limit)
        check_form(cursor)
        cursor = open_cursor(await store.index.cursor_key(create=False), context, cursor)
    before = check(state=state, name=name, owner=owner, cursor=cursor, limit=limit)
    stores = await store.each()
    parts = [await _part(s, before, state, name, owner, limit) for s in stores]
    if len(parts) == 1:
        picked, last, exhausted = parts[0]
    else:
        floors = [p[1] for p in parts if not p[2] and p[1] is not None]
        floor = max(floors) if floors else None
        merged = sorted((x for p in parts for x in p[0]), key=lambda x: x[0], reverse=True)
        picked = [x for x in merged if floor is None or x[0] >= floor][:limit]
        if len(picked) == limit and (len(merged) > limit or floor is not None):
            last, exhausted = picked[-1][0], False
        else:
            last, exhausted = floor, floor is None
    out = []
    for (_, wf_id, row), plan in zip(picked, await _plans(store, picked), strict=True):
        f = dict(zip(_FIELDS, row, strict=True))
        try:
            names = [s.name for s in _plan.decode(plan or "{}").stages]
        except msgspec.DecodeError:
            names = []  # one unreadable plan must not take the page down
        status = f["status"] or ""
        out.append(
            WorkflowSummary(
                id=wf_id,
                name=f["def"] or "",
                state=status,
                version=_int(f["version"]),
                owner=f["owner"] or "",
                created_at=_int(f["created_at"]),
                updated_at=_int(f["updated_at"]),
                stages=_stage_states(status, _int(f["stage"]), names),
            )
        )
    if exhausted or last is None:
        return WorkflowPage(workflows=out, cursor=None)
    key = await store.index.cursor_key(create=True)
    assert key is not None
    return WorkflowPage(workflows=out, cursor=seal_cursor(key, context, f"{last[0]}.{last[1]}"))


#: a workflow a page picked: its index key (creation time, id), its id, its fields
_Picked = tuple[tuple[int, str], str, list[str | None]]


async def _part(
    store: Store,
    before: tuple[int, str] | None,
    state: str | None,
    name: str | None,
    owner: str | None,
    limit: int,
) -> tuple[list[_Picked], tuple[int, str] | None, bool]:
    """One shard's page: the workflows picked, the last index key looked at, and whether
    the index has nothing after it."""
    scan = max(SCAN_MIN, 10 * limit)
    wfs = store.workflows
    picked: list[_Picked] = []
    looked = 0
    last: tuple[int, str] | None = None
    exhausted = False
    while len(picked) < limit and looked < scan:
        want = min(_BATCH, scan - looked)
        batch = await wfs.index_before(before, want)
        rows = await wfs.list_fields([i for _, i in batch], _FIELDS) if batch else []
        used = 0
        for item, row in zip(batch, rows, strict=True):
            looked, used = looked + 1, used + 1
            last = before = item
            f = dict(zip(_FIELDS, row, strict=True))
            if f["status"] is None or f["id"] != item[1]:
                continue  # expired (the driver drops its id later), or not a workflow
            if (state and f["status"] != state) or (name and f["def"] != name):
                continue
            if owner is not None and (f["owner"] or "") != owner:
                continue
            picked.append((item, item[1], row))
            if len(picked) == limit:
                break
        if len(batch) < want and used == len(batch):
            exhausted = True  # the index has nothing after the last id looked at
            break
    return picked, last, exhausted


async def _plans(store: Store, picked: list[_Picked]) -> list[str | None]:
    """The plan of each picked workflow, read on its shard."""
    out: list[str | None] = [None] * len(picked)
    for s in await store.each():
        mine = [i for i, (_, wf_id, _) in enumerate(picked) if await s.at(wf_id) is s]
        if mine:
            rows = await s.workflows.list_fields([picked[i][1] for i in mine], ("plan",))
            for i, (plan,) in zip(mine, rows, strict=True):
                out[i] = plan
    return out
