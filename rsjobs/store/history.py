"""A task's history as its hash keeps it, read back as entries.

The scripts write entry ``n`` of a task's history as the hash field ``h<n>`` and count
them in ``hn`` (``record`` in ``fsm.lua``); each value is one line of text::

    <EVENT> <state after> <source> <attempt> <ms after c>[ !][ <name>=<value>...][|<msg>]

(``!`` marks a refusal; tokens are percent-escaped for ``%``, space, ``|``, CR and LF; the
message is the rest of the line, as written). An entry's id is its number, ``"1"``,
``"2"``... (the SSE event id too). Entries read back as the field mappings readers have
always had: ``ev``, ``from``, ``to``, ``src``, ``att``, ``ts`` (Redis TIME, ms), ``msg``,
``rej=1`` and the extra fields; ``from`` is the state after the entry before (``''`` for
the first), since every change of state is an entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import unquote

from ..errors import CorruptData
from ..model import TERMINAL, TRANSITIONS
from .marker import check_task

__all__ = [
    "COUNT",
    "ELIDED",
    "HEAD",
    "KEPT_MAX",
    "TAIL",
    "Row",
    "elided_range",
    "entries",
    "fields",
    "last_traceback",
    "one",
    "position",
    "span",
]

#: the hash field counting the entries
COUNT = "hn"
#: the first entries and the last entries a history keeps (HISTORY_HEAD, HISTORY_TAIL in
#: ``fsm.lua``): the ones between are elided, counted in the field :data:`ELIDED`
HEAD, TAIL = 16, 96
#: the most entries a task's hash holds, whatever its clients send
KEPT_MAX = HEAD + TAIL
#: the hash field accounting for the elided entries (see ``elide_entry`` in ``fsm.lua``)
ELIDED = "hx"


def elided_range(hn: int) -> range:
    """The numbers of the entries elided from a history of ``hn`` entries."""
    return range(HEAD + 1, max(hn - TAIL, HEAD) + 1)


def _elided_row(
    task_id: str, hx: str | None, created: int, before: str, first: int
) -> dict[str, str]:
    """The one entry that stands for the elided entries from ``first`` on: event
    ``ELIDED``, from the state before them to the state after them, the attempt and time
    of the last, and per event how many there were (``counts``: ``EVENT=n,...``, a
    refused one as ``EVENT!=n``, its repeats included)."""
    line, _, counts = (hx or "").partition("|")
    tokens = line.split(" ")
    if (
        len(tokens) != 4
        or not tokens[0].isdigit()
        or not tokens[2].isdigit()
        or not tokens[3].lstrip("-").isdigit()
    ):
        raise CorruptData("task", task_id, f"its elided entries do not read: {(hx or '')[:80]!r}")
    n = tokens[0]
    pairs = (p.partition("=") for p in counts.split(","))
    shown = ", ".join(f"{name} {c}" for name, _, c in pairs if c)
    return {
        "ev": "ELIDED",
        "from": before,
        "to": tokens[1],
        "src": "",
        "att": tokens[2],
        "ts": str(created + int(tokens[3])),
        "msg": f"{n} entries elided ({shown})",
        "elided": n,
        "first": str(first),
        "counts": counts,
    }


Row = tuple[str, dict[str, str]]


def fields(n: int) -> list[str]:
    """The hash fields of the first ``n`` entries (at least the first)."""
    return [f"h{i}" for i in range(1, max(n, 1) + 1)]


def position(entry_id: str) -> int:
    """The entry number of ``entry_id`` (``""``, ``"-"``, ``"0"`` and ``"0-0"``: before
    the first entry; ``"0-<n>"`` is ``n``). Raises ValueError when it is not an entry
    id."""
    if entry_id in ("", "-"):
        return 0
    if entry_id.startswith("0-"):  # the form a stream id takes (Last-Event-ID "0-0")
        entry_id = entry_id[2:]
    if not (entry_id.isascii() and entry_id.isdigit()) or len(entry_id) > 18:
        raise ValueError(f"invalid history entry id {entry_id!r}")
    return int(entry_id)


def _implied() -> dict[str, str]:
    """The state each event leads to when the table allows it only one (``IMPLIED`` in
    ``fsm.lua``): an entry of such an event leaves its state token empty."""
    targets: dict[str, set[str]] = {}
    for events in TRANSITIONS.values():
        for event, to in events.items():
            targets.setdefault(event, set()).update(to)
    return {ev: next(iter(ts)) for ev, ts in targets.items() if len(ts) == 1}


_IMPLIED = _implied()

#: who sends an event as a rule (``USUAL_SOURCE`` in ``fsm.lua``): an entry of it from
#: that source leaves its source token empty
USUAL_SOURCE = {
    "ENQUEUE": "api",
    "START": "worker",
    "COMPLETE": "worker",
    "FAIL": "worker",
    "PROGRESS": "worker",
    "REQUEUE": "worker",
    "DEFER": "worker",
}

#: extra fields stored under a shorter name: the START entry's worker, a FAIL entry's
#: exception type and traceback, a DEFER entry's outside job and wait, the charges of an
#: attempt's end (an entry over 64
#: bytes would turn the task hash from a listpack into a hashtable, four times its size)
_EXTRA_NAMES = {
    "w": "worker",
    "et": "error_type",
    "tb": "traceback",
    "x": "external_id",
    "xp": "provider",
    "xw": "wait_ms",
    "xo": "poll_ms",
    # the charges sent with an attempt's end or its DEFER (rsjobs.costs)
    "ch": "charges",
}


def _parse(task_id: str, n: int, value: str, created: int, before: str) -> dict[str, str]:
    head, sep, msg = value.partition("|")
    tokens = head.split(" ")
    if len(tokens) < 5 or not tokens[3].isdigit() or not tokens[4].lstrip("-").isdigit():
        raise CorruptData("task", task_id, f"history entry {n} does not read: {value[:80]!r}")
    ev, to, src = (unquote(t) for t in tokens[:3])
    if not to:
        to = _IMPLIED.get(ev, "")
    if not src:
        src = USUAL_SOURCE.get(ev, "")
    f = {"ev": ev, "from": before, "to": to, "src": src, "att": tokens[3]}
    f["ts"] = str(created + int(tokens[4]))
    if sep and msg:
        f["msg"] = msg
    for tok in tokens[5:]:
        if tok == "!":
            f["rej"] = "1"
        else:
            name, _, v = tok.partition("=")
            name = unquote(name)
            f[_EXTRA_NAMES.get(name, name)] = unquote(v)
    return f


def one(task_id: str, n: int, value: str, created: int) -> dict[str, str]:
    """History entry ``n`` of a task created at ``created`` (ms), read alone: its fields
    but ``from`` (the state before it is the entry before's). Raises
    :class:`rsjobs.CorruptData` when it does not read."""
    f = _parse(task_id, n, value, created, "")
    del f["from"]
    return f


def entries(h: Mapping[str, str], task_id: str = "", after: int = 0) -> list[Row]:
    """The history entries after entry number ``after`` of the task hash ``h`` (text
    fields, as :func:`rsjobs.store.record.text_fields` gives them), oldest first. Raises
    :class:`rsjobs.CorruptData` when an entry does not read, :class:`rsjobs.NotMigrated`
    when the hash is still in layout 1 (its history in a stream of its own)."""
    check_task(h, task_id)
    raw = h.get(COUNT) or "0"
    created_raw = h.get("c") or "0"
    if not raw.isdigit() or not created_raw.isdigit():
        raise CorruptData("task", task_id, "its history count or creation time is not a number")
    created = int(created_raw)
    rows: list[Row] = []
    state = ""
    hn = int(raw)
    gap = elided_range(hn)
    first = 0  # the first elided entry of the run that ends at gap[-1]
    for n in range(1, hn + 1):
        value = h.get(f"h{n}")
        if value is None and n in gap:
            # (a history written before the ceiling keeps the entries it had: only the
            # absent ones, the last of the gap, were elided since)
            first = first or n
            if n == gap[-1]:  # one entry for them all, numbered as the last of them
                f = _elided_row(task_id, h.get(ELIDED), created, state, first)
                state = f["to"]
                if n > after:
                    rows.append((str(n), f))
            continue
        if value is None:
            raise CorruptData("task", task_id, f"history entry {n} is missing")
        f = _parse(task_id, n, value, created, state)
        state = f["to"]
        if n > after:
            rows.append((str(n), f))
    return rows


def last_traceback(h: Mapping[str, str]) -> str:
    """The traceback of the task's last failed attempt ('' when that attempt left none:
    it timed out, its worker was lost, or it failed without an exception), read from the
    end of the task hash ``h``'s history without parsing the rest."""
    raw = h.get(COUNT) or "0"
    if not raw.isdigit():
        return ""
    for n in range(int(raw), 0, -1):
        tokens = (h.get(f"h{n}") or "").partition("|")[0].split(" ")
        if tokens[0] not in _FAILED_ENDS or "!" in tokens[5:]:
            continue  # not the end of a failed attempt, or a refused late one
        if tokens[0] == "FAIL":
            for tok in tokens[5:]:
                if tok.startswith("tb="):
                    return unquote(tok[3:])
        return ""
    return ""


#: the events that end an attempt that failed
_FAILED_ENDS = frozenset({"FAIL", "TIMEOUT", "RECLAIM", "DEADLETTER"})


def _token(t: str) -> str:
    return unquote(t) if "%" in t else t


def span(h: Mapping[str, str], task_id: str = "") -> tuple[int, int, str]:
    """A finished task's last START time and worker, and the time it reached its terminal
    state, from its history: what :func:`entries` gives, read without building every
    entry (a list reads them for each of its tasks). Refusals are skipped. Raises
    :class:`rsjobs.CorruptData` when an entry does not read."""
    raw, created_raw = h.get(COUNT) or "0", h.get("c") or "0"
    if not raw.isdigit() or not created_raw.isdigit():
        raise CorruptData("task", task_id, "its history count or creation time is not a number")
    created = int(created_raw)
    started = finished = 0
    worker, state = "", ""
    hn = int(raw)
    gap = elided_range(hn)
    for n in range(1, hn + 1):
        value = h.get(f"h{n}")
        if value is None and n in gap:
            # (elided: an attempt's START among them is followed by later entries of it)
            if n == gap[-1]:  # (a list reads no hx: the state after them is then unknown)
                hx = h.get(ELIDED)
                state = _elided_row(task_id, hx, created, state, gap[0])["to"] if hx else ""
            continue
        if value is None:
            raise CorruptData("task", task_id, f"history entry {n} is missing")
        tokens = value.partition("|")[0].split(" ")
        if len(tokens) < 5 or not tokens[3].isdigit() or not tokens[4].lstrip("-").isdigit():
            raise CorruptData("task", task_id, f"history entry {n} does not read: {value[:80]!r}")
        ev = _token(tokens[0])
        to = _token(tokens[1]) or _IMPLIED.get(ev, "")
        if "!" not in tokens[5:]:
            ts = created + int(tokens[4])
            if ev == "START":
                started, worker = ts, ""
                for tok in tokens[5:]:
                    name, _, v = tok.partition("=")
                    if _EXTRA_NAMES.get(_token(name)) == "worker":
                        worker = _token(v)
            if to in TERMINAL and state not in TERMINAL:
                finished = ts
        state = to
    return started, finished, worker
