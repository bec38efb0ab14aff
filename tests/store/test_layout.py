"""Every script's header and its packer agree on the layout of KEYS and ARGV, and the
script's own check (``layout(...)`` in its first lines) counts what its header names.

The header is read as its format says (``fsm.lua``): ``ARGV[n]  name`` lines for the
script's own values, ``per <item>:`` followed by ``    name`` lines for each item's values
or keys (or ``per <item>: the task keys (see fsm.lua)``), ``  name  <type>`` lines for the
script's own keys, ``the workflow keys (see wf.lua)`` for the seven workflow keys, and
``ARGV: ... the workflow's (see wf.lua)`` for the workflow scripts' two common values.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any, NamedTuple

import pytest

from rsjobs.store import layout
from rsjobs.store.keys import Keys, TaskKeys, WorkflowKeys
from rsjobs.store.layout import LAYOUTS, WF_COMMON, Common, Layout
from rsjobs.store.scripts import SCRIPT_NAMES

_TYPES = r"(?:hash|stream|zset|set|string)"
_WF_LUA = (resources.files("rsjobs") / "wf.lua").read_text(encoding="utf-8")


class Header(NamedTuple):
    layout: Layout
    #: the numbers of the script's layout(...) call: nargs, per_arg, per_key, tail, exact
    check: tuple[int, ...]


def _section(text: str, name: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{name}:"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" "))
    return lines[start:end]


def _item(line: str) -> str:
    """The item name of a ``per <item>: ...`` line (without a parenthetical)."""
    head = line.strip().removeprefix("per ").split(":", 1)[0]
    return head.split(" (", 1)[0]


def parse_header(script: str) -> Header:
    src = (resources.files("rsjobs") / "scripts" / f"{script}.lua").read_text(encoding="utf-8")
    header = src[: src.index("]]")]
    item, item_keys, tail = "", [], []
    in_item = False
    for line in _section(header, "KEYS")[1:]:
        if re.match(r"^  per [^:]+: the task keys \(see fsm\.lua", line):
            item, in_item = _item(line), False
            item_keys = list(TaskKeys._fields)
        elif re.match(r"^  per [^:]+:\s*$", line):
            item, in_item = _item(line), True
        elif re.match(r"^  the workflow keys \(see wf\.lua\)", line):
            tail += WorkflowKeys._fields
            in_item = False
        elif m := re.match(rf"^    (\w+) +{_TYPES}  ", line):
            assert in_item, f"{script}: item key outside a per-item group: {line!r}"
            item_keys.append(m[1])
        elif m := re.match(rf"^  (\w+) +{_TYPES}  ", line):
            tail.append(m[1])
            in_item = False
    argv = _section(header, "ARGV")
    args: list[str] = list(WF_COMMON) if "the workflow's (see wf.lua)" in argv[0] else []
    item_args: list[str] = []
    arg_item = ""
    in_item = False
    for line in argv[1:]:
        if m := re.match(r"^  ARGV\[(\d+)\] +(\w+)  ", line):
            assert int(m[1]) == 5 + len(args), f"{script}: {line!r} is not the next ARGV"
            args.append(m[2])
        elif re.match(r"^  per [^:]+:", line):
            arg_item, in_item = _item(line), True
        elif (m := re.match(r"^    (\w+)  ", line)) and in_item:
            item_args.append(m[1])
    if item_args:
        assert arg_item == item, f"{script}: ARGV per {arg_item!r}, KEYS per {item!r}"
    count = None
    for words, n in (("(one", 1), ("(two", 2)):
        if re.search(rf"^  per [^:]+ \{words}", header, re.M):
            count = n
    lay = Layout(script, tuple(args), item, tuple(item_args), tuple(item_keys), tuple(tail), count)
    body = src[src.index("]]") :]
    m = re.search(r"\blayout\((\w+), (\w+), (\w+), (\w+)(?:, (\d+))?\)", body)
    assert m is not None, f"{script}.lua does not check its layout"
    # the script's (and wf.lua's) numeric locals its call may name: PER, SPEC, WF_NKEYS...
    names: dict[str, int] = {}
    for source in (_WF_LUA, body):
        for lhs, rhs in re.findall(r"^local ([\w, ]+) = ([\w +,]+)$", source, re.M):
            for name, expr in zip(lhs.split(", "), rhs.split(", "), strict=False):
                try:
                    names[name] = int(eval(expr, {}, dict(names)))  # e.g. "1 + SPEC"
                except (NameError, SyntaxError):
                    continue
    check = [int(g) if g.isdigit() else names[g] for g in m.groups() if g is not None]
    return Header(lay, tuple(check))


@pytest.mark.parametrize("script", SCRIPT_NAMES)
def test_the_header_and_the_packer_name_the_same_keys_and_argv(script: str) -> None:
    header = parse_header(script)
    assert header.layout == LAYOUTS[script]


@pytest.mark.parametrize("script", SCRIPT_NAMES)
def test_the_script_checks_the_layout_its_header_names(script: str) -> None:
    header = parse_header(script)
    lay = header.layout
    expected = [len(lay.args), len(lay.item_args), len(lay.item_keys), len(lay.tail_keys)]
    if lay.exact is not None:
        expected.append(lay.exact)
    assert list(header.check) == expected


def test_every_script_has_a_layout() -> None:
    assert set(LAYOUTS) == set(SCRIPT_NAMES)


# -- the packers place what their layout names --------------------------------------------


def _named(kind: type[Any]) -> Any:
    """An instance of a NamedTuple whose every value is its field's name."""
    return kind(*kind._fields)


def _calls() -> dict[str, layout.Packed]:
    """One call of every packer, every value its field's name, two items where a batch
    is taken."""
    k = Keys("t")
    c = Common.of(k, 1000, 0)
    tk = TaskKeys(*TaskKeys._fields)
    wk = WorkflowKeys(*WorkflowKeys._fields)
    L = layout
    return {
        "enqueue": L.enqueue(c, "src", [(tk, _named(L.NewTask))] * 2),
        "after": L.after(c, k, "src", tk, _named(L.NewTask), ["id"] * 2),
        "successors": L.successors(c, k, "src", [(tk, _named(L.SuccessorItem))] * 2),
        "start": L.start(c, k, "src", _named(L.StartArgs), [(tk, _named(L.Entry))] * 2),
        "take": L.take(c, k, "src", _named(L.TakeArgs), ["queue"] * 2),
        "finish": L.finish(c, k, "src", [(tk, _named(L.Ending))] * 2),
        "heartbeat": L.heartbeat(c, "src", _named(L.BeatArgs), [(tk, _named(L.BeatItem))] * 2),
        "control": L.control(c, k, "src", tk, _named(L.ControlArgs)),
        "retry": L.retry(c, "src", tk, tk, _named(L.RetryArgs)),
        "queue": L.queue(c, k, "src", _named(L.QueueArgs)),
        "queue_add": L.queue_add(c, k, "src", _named(L.QueueAddArgs)),
        "queue_delete": L.queue_delete(c, k, "src", "queue", dry=True),
        "promote": L.promote(c, "src", [(tk, _named(L.Member))] * 2),
        "release": L.release(c, "src", [(tk, _named(L.Entry))] * 2),
        "defer": L.defer(c, k, "src", tk, "external", _named(L.DeferArgs)),
        "resolve": L.resolve(c, k, "src", tk, "external", _named(L.ResolveArgs)),
        "poll": L.poll(c, k, "src", _named(L.PollArgs), [(tk, _named(L.Member))] * 2),
        "reclaim": L.reclaim(c, k, "src", _named(L.ReclaimArgs), [(tk, _named(L.Entry))] * 2),
        "recount": L.recount(c, k, "src", "queue", [(tk, _named(L.Entry))] * 2),
        "deadline": L.deadline(
            c, "src", _named(L.DeadlineArgs), [(tk, _named(L.DeadlineItem))] * 2
        ),
        "workers": L.workers(c, k, "src", _named(L.WorkersArgs), ["q1", "q2"]),
        "link": L.link(c, "src", tk, tk),
        "quarantine": L.quarantine(c, k, "src", tk, _named(L.QuarantineArgs)),
        "marker": L.marker(c, k, "src", "current"),
        "shards": L.shards(c, k, "src", "wanted"),
        "migrate": L.migrate(c, "src", _named(L.MigrateArgs), [_named(L.Layout1Task)] * 2),
        "trim": L.trim(c, "src", _named(L.TrimArgs)),
        "summaries": L.summaries(c, "src", _named(L.SummaryArgs), [("task", _named(L.Expect))] * 2),
        "series": L.series(c, "src", _named(L.SeriesArgs), [("series", _named(L.SeriesQueue))] * 2),
        "hooks_due": L.hooks_due(c, k, "src", _named(L.HooksDueArgs)),
        "hooks_forget": L.hooks_forget(c, k, "src", "group", ["name"] * 2),
        "schedule": L.schedule(c, k, "src", _named(L.ScheduleArgs), tk, _named(L.NewTask)),
        "wf_start": L.wf_start(c, "src", 10, wk, _named(L.WfStartArgs)),
        "wf_spawn": L.wf_spawn(
            c, "src", 10, wk, _named(L.WfSpawnArgs), [(tk, _named(L.WfTask))] * 2
        ),
        "wf_finish": L.wf_finish(c, "src", 10, wk, tk, _named(L.Ending)),
        "wf_gate": L.wf_gate(c, "src", 10, wk, _named(L.WfGateArgs)),
        "wf_retry": L.wf_retry(
            c, "src", 10, wk, _named(L.WfRetryArgs), [(tk, tk, _named(L.WfRetryItem))] * 2
        ),
        "wf_regenerate": L.wf_regenerate(
            c, "src", 10, wk, _named(L.WfRegenerateArgs), [(tk, _named(L.RegenerateTask))] * 2
        ),
        "wf_cancel": L.wf_cancel(
            c, "src", 10, wk, _named(L.WfCancelArgs), [(tk, _named(L.OpenTask))] * 2
        ),
        "wf_sync": L.wf_sync(
            c, "src", 10, wk, _named(L.WfSyncArgs), [(tk, _named(L.OpenTask))] * 2
        ),
        "wf_abort": L.wf_abort(
            c, "src", 10, wk, _named(L.WfAbortArgs), [(tk, _named(L.OpenTask))] * 2
        ),
        "wf_read": L.wf_read(c, "src", 10, wk, _named(L.WfReadArgs)),
    }


@pytest.mark.parametrize("script", SCRIPT_NAMES)
def test_each_packer_places_the_values_its_layout_names(script: str) -> None:
    """The packer, called with every value equal to its field's name, puts the names where
    its layout (and so the header) says: a packer that moves or drops a value fails."""
    k = Keys("t")
    call = _calls()[script]
    lay = LAYOUTS[script]
    assert call.script == script
    n = lay.exact or (10 if script == "queue_delete" else 2)
    common = len(k.common())
    assert call.keys[:common] == list(k.common())
    item_keys = list(call.keys[common : len(call.keys) - len(lay.tail_keys)])
    if script == "workers":
        assert item_keys == [k.queue("q1"), k.queue("q2")]
    elif script == "after":
        # (a predecessor's key is its hash: its id is the item's value)
        assert item_keys == [k.task("id")] * n
    elif script == "take":
        # a queue's keys: its two zsets and its level streams, built from its name
        one = [
            k.parked("queue"),
            k.throttled("queue"),
            k.claims("queue"),
            *k.queue_streams("queue"),
        ]
        assert len(one) == len(lay.item_keys)
        assert item_keys == one * n
    elif script == "queue_delete":
        assert item_keys == list(k.queue_streams("queue"))
    elif script == "wf_retry":
        names = [n.removeprefix("failed_") for n in lay.item_keys]
        assert item_keys == names * n
    else:
        assert item_keys == list(lay.item_keys) * n
    tail = call.keys[len(call.keys) - len(lay.tail_keys) :] if lay.tail_keys else []
    if lay.tail_keys == WorkflowKeys._fields:
        assert tail == list(WorkflowKeys._fields)
    elif script == "recount":
        assert tail == list(k.queue_streams("queue"))
    elif script == "queue_add":
        assert tail == [k.queues, k.queue_owners]
    elif script == "queue_delete":
        assert tail == [k.queues, k.queue_owners, k.paused, k.workers, k.series("queue"),
                        k.parked("queue"), k.throttled("queue"), k.claims("queue")]  # fmt: skip
    elif script == "start":
        # (waiting and throttled: the call's queue's, its StartArgs.queue)
        assert tail == [
            k.paused,
            k.limits,
            k.rates,
            k.parked("queue"),
            k.throttled("queue"),
            k.claims("queue"),
        ]
    else:
        # (a deferred task's external key, and a successor's own task keys, are the
        # packer's arguments: named as themselves)
        own_keys = ("external", *TaskKeys._fields)
        assert tail == [name if name in own_keys else getattr(k, name) for name in lay.tail_keys]
    assert call.argv[:4] == ["src", "1000", "0", "workers"]
    own = list(lay.args)
    if own[:2] == list(WF_COMMON):
        assert call.argv[4:6] == [k.control, 10]
        own = own[2:]
        rest = call.argv[6:]
    else:
        rest = call.argv[4:]
    if script == "queue_delete":  # (dry, as the call above asked)
        own = ["queue", "1"]
    assert rest == own + list(lay.item_args) * (n if lay.item_args else 0)
