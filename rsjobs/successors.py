"""Successor tasks: a task submitted with ``after=[id, ...]`` waits (WAITING) until its
predecessors succeeded, then runs with their results (``ctx.predecessors``); when one
fails, times out or is cancelled it is cancelled with that reason, or, with
``after_policy="always"``, it runs once every predecessor finished, however it ended.
See ``docs/successors.md``.

This module holds the rules a request is checked by before anything is written, and the
reading of what a successor's hash keeps (``after.lua`` writes it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from .errors import ConfigError, PayloadError

__all__ = [
    "AFTER_MAX",
    "POLICIES",
    "SUCCESSORS_MAX",
    "check_after",
    "decode_predecessors",
    "parse_after",
]

#: the most predecessors a task may wait for (``AFTER_MAX`` in fsm.lua)
AFTER_MAX = 32
#: the most successors a task may have (``SUCCESSORS_MAX`` in fsm.lua)
SUCCESSORS_MAX = 1000
#: what a successor waits for: every predecessor SUCCEEDED (the default), or finished
POLICIES = ("succeeded", "always")

_ID_CHARS = frozenset("0123456789abcdef")


def check_after(after: Sequence[str] | None, policy: str) -> list[str] | None:
    """``after`` as a list (None: no predecessors), checked: 1 to :data:`AFTER_MAX`
    distinct task ids (32 lowercase hex); ``policy`` one of :data:`POLICIES`. Raises
    :class:`rsjobs.ConfigError`."""
    if policy not in POLICIES:
        raise ConfigError(f"after_policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    if after is None:
        return None
    if isinstance(after, str) or not isinstance(after, Sequence):
        raise ConfigError("after must be a list of task ids")
    ids = list(after)
    if not 1 <= len(ids) <= AFTER_MAX:
        raise ConfigError(f"after must name 1 to {AFTER_MAX} predecessors, not {len(ids)}")
    for tid in ids:
        if not isinstance(tid, str) or len(tid) != 32 or not set(tid) <= _ID_CHARS:
            raise ConfigError(
                f"after: invalid task id {tid!r}: expected 32 lowercase hex characters"
            )
    if len(set(ids)) != len(ids):
        twice = next(t for t in ids if ids.count(t) > 1)
        raise ConfigError(f"after names {twice} twice")
    return ids


def parse_after(raw: str) -> list[tuple[str, str]]:
    """A successor's ``after`` field: (predecessor id, its state: '' while awaited) each,
    in the order the successor named them."""
    out: list[tuple[str, str]] = []
    for item in raw.split(",") if raw else ():
        tid, _, state = item.partition(":")
        out.append((tid, state))
    return out


_results = msgspec.json.Decoder(dict[str, Any])


def decode_predecessors(raw: str) -> dict[str, Any]:
    """The results of a successor's predecessors that SUCCEEDED (its ``predecessors``
    field, a JSON object: id -> result). Raises :class:`rsjobs.PayloadError` when it does
    not decode (not written by rsjobs)."""
    if not raw:
        return {}
    try:
        return _results.decode(raw)
    except msgspec.DecodeError as exc:
        raise PayloadError(f"the predecessors' results do not decode: {exc}") from None
