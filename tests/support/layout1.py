"""Writing data of layout 1, as the release before the hash-kept history wrote it: its
scripts (``tests/store/fixtures/layout1/``, see the NOTE there) run for the calls that
this release's packers make.

The two releases take the same ARGV; their KEYS differ by a ``scratch`` stream after the
common KEYS and each task's history stream after its hash. :func:`old_keys` inserts
them, so a packed call of this release becomes one of layout 1. :func:`writing_layout1`
makes every :class:`~rsjobs.store.scripts.Scripts` in the process run the old scripts
(clients, stores, workflow clients: everything that writes through a script), and
:func:`run_sync` runs one packed call on a synchronous client (fakeredis in the Lua tier).

Readers of this release cannot read what these write until it is migrated; the tests
read it the way layout 1 was read (:func:`old_history`, :func:`old_info`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any
from unittest import mock

import msgspec
from redis.exceptions import RedisError

from rsjobs.schemas import HistoryEntry, TaskInfo
from rsjobs.store.keys import Keys
from rsjobs.store.layout import LAYOUTS, Packed
from rsjobs.store.marker import LayoutState
from rsjobs.store.record import TASK_FIELDS, TaskRecord
from rsjobs.store.scripts import Scripts
from rsjobs.store.transient import translate

FIXTURES = Path(__file__).resolve().parent.parent / "store" / "fixtures" / "layout1"


@cache
def source(name: str) -> str:
    """The full text of script ``name`` of layout 1 (as that release composed it)."""
    fsm = (FIXTURES / "fsm.lua").read_text(encoding="utf-8")
    body = (FIXTURES / "scripts" / f"{name}.lua").read_text(encoding="utf-8")
    if name.startswith("wf_"):
        fsm += "\n" + (FIXTURES / "wf.lua").read_text(encoding="utf-8")
    return f"{fsm}\nlocal function main()\n{body}\nend\nreturn finish_call(main)\n"


#: what this release's calls carry that layout 1's scripts do not take: tail KEYS, and
#: per-item ARGV names (dropped by :func:`old_call`)
_NEWER_TAIL_KEYS = {
    "start": ("paused", "limits", "rates", "parked", "throttled", "claims"),
    "finish": ("limits", "wake"),
    "control": ("waiting",),
}
_NEWER_ITEM_ARGV = {"finish": ("traceback", "charges"), "wf_finish": ("traceback", "charges")}
#: the script's own ARGV names added since (dropped too)
_NEWER_ARGV = {"start": ("queue",)}
#: the common KEYS this release passes, of which layout 1's scripts take the first four
#: (events, stats, scheduled, deadlines: not the list indexes)
_NCOMMON = len(Keys().common())
_OLD_NCOMMON = 4


def old_call(call: Packed) -> Packed:
    """``call`` without what was added to its script after layout 1 (its queue-pause key,
    a failure's traceback; the list indexes among the common KEYS are left out by
    :func:`old_keys`): the old scripts check their KEYS and ARGV counts."""
    lay = LAYOUTS[call.script]
    keys, argv = list(call.keys), list(call.argv)
    drop_tail = _NEWER_TAIL_KEYS.get(call.script, ())
    drop_argv = _NEWER_ITEM_ARGV.get(call.script, ())
    drop_own = _NEWER_ARGV.get(call.script, ())
    if drop_own:
        at = {4 + lay.args.index(name) for name in drop_own}
        argv = [v for n, v in enumerate(argv) if n not in at]
        lay = lay._replace(args=tuple(a for a in lay.args if a not in drop_own))
    if drop_argv:
        per = len(lay.item_args)
        at = {lay.item_args.index(name) for name in drop_argv}
        nitems = (len(keys) - _NCOMMON - len(lay.tail_keys)) // len(lay.item_keys)
        head = len(argv) - per * nitems
        kept = argv[:head]
        for j in range(nitems):
            item = argv[head + j * per : head + (j + 1) * per]
            kept += [v for n, v in enumerate(item) if n not in at]
        argv = kept
    if drop_tail:
        assert lay.tail_keys[-len(drop_tail) :] == drop_tail
        keys = keys[: -len(drop_tail)]
    return Packed(call.script, keys, argv)


def old_keys(call: Packed) -> list[str]:
    """The KEYS of ``call`` as layout 1 lays them out."""
    lay = LAYOUTS[call.script]
    newer = len(_NEWER_TAIL_KEYS.get(call.script, ()))
    lay = lay._replace(tail_keys=lay.tail_keys[: len(lay.tail_keys) - newer])
    call = old_call(call)
    common, rest = call.keys[:_OLD_NCOMMON], call.keys[_NCOMMON:]
    prefix = common[0][: -len("events")]
    out = [*common, prefix + "scratch"]
    ntail = len(lay.tail_keys)
    items, tail = rest[: len(rest) - ntail], rest[len(rest) - ntail :]
    per = len(lay.item_keys)
    if not per:
        return out + items + tail
    for j in range(0, len(items), per):
        for name, key in zip(lay.item_keys, items[j : j + per], strict=True):
            out.append(key)
            if name == "task" or name.endswith("_task"):
                out.append(key + ":history")
    return out + tail


#: what later releases appended to a script's reply for one item: the values to read
#: where layout 1 answered none (START: the task's owner and trace context, which the
#: worker's span of the attempt names)
_NEWER_REPLY_TAIL = {"start": ("", "", "")}


def new_reply(call: Packed, reply: Any) -> Any:
    """Layout 1's ``reply`` to ``call`` as this release's parser reads it: an applied
    item's reply padded with what later releases added (nothing that layout 1 knew)."""
    tail = _NEWER_REPLY_TAIL.get(call.script)
    if not tail or not isinstance(reply, list):
        return reply
    return [
        [*item, *tail] if isinstance(item, list) and item and item[0] == 1 else item
        for item in reply
    ]


def run_sync(r: Any, call: Packed) -> Any:
    """Run a packed call with the script of layout 1 on a synchronous client."""
    keys = old_keys(call)
    return new_reply(call, r.eval(source(call.script), len(keys), *keys, *old_call(call).argv))


#: this release's Scripts.run, for the scripts layout 1 did not have (queue_add: that
#: release registered queue names without a script)
_RUN = Scripts.run


async def _run_layout1(self: Scripts, call: Packed, *, durable: bool = False) -> Any:
    if not (FIXTURES / "scripts" / f"{call.script}.lua").exists():
        return await _RUN(self, call, durable=durable)
    keys = old_keys(call)
    try:
        reply = await self.redis.execute_command(
            "EVAL", source(call.script), len(keys), *keys, *old_call(call).argv
        )
    except (RedisError, OSError) as exc:
        raise translate(exc, f"{call.script}.lua (layout 1)") from exc
    return new_reply(call, reply)


async def _no_check(self: Scripts) -> LayoutState:
    return LayoutState("", False)


@contextlib.contextmanager
def writing_layout1() -> Iterator[None]:
    """Within: every store of this process writes as layout 1 did (no layout check: that
    release had none)."""
    with (
        mock.patch.object(Scripts, "run", _run_layout1),
        mock.patch.object(Scripts, "require_layout", _no_check),
    ):
        yield


# -- reading it as layout 1 did ----------------------------------------------------------------


def old_info(h: Mapping[str, str]) -> TaskInfo:
    """The task as layout 1's ``Client.get`` read its hash ``h`` (its record took every
    field from the hash, under its long name: a task hash of layout 1 has them all)."""
    fields = {TASK_FIELDS.get(k, k): v for k, v in h.items() if v != ""}
    return TaskInfo.from_record(msgspec.convert(fields, TaskRecord, strict=False))


def old_history(rows: list[tuple[str, dict[str, str]]], h: Mapping[str, str]) -> list[HistoryEntry]:
    """The history as layout 1's ``Client.history`` read it: ``rows`` from XRANGE of the
    task's history stream, ``h`` the task hash (its repeat counters)."""
    tid = h.get("id", "")
    return [HistoryEntry.from_entry(i, f, tid, h) for i, f in rows]
