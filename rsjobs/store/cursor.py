"""The cursor of a task list (:mod:`rsjobs.store.index`): where the last page stopped.

A list is the merge, newest first, of the indexes its query reads (its *sources*, each
named by an ident: ``q:<queue>``, ``s``, ``p``, ``w``, ``d:<STATE>``, ``t``), ordered by the key
``(ms, ident, position)``: the time the list orders a task by, then the source, then the
task's position in that source (a stream entry id, a zset member). A cursor is the key of
the last task a page handed out (or looked at, when the page stopped at its scan bound),
plus which index drove the query and a fingerprint of the query, so that a cursor given
with another query is refused rather than read as something else. It is opaque text
(URL-safe base64 of a JSON array) and holds no secret: it names a time and an entry.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any, NamedTuple

import msgspec

from ..errors import ConfigError

__all__ = ["Cursor", "decode_cursor", "encode_cursor", "fingerprint"]

_encode = msgspec.json.Encoder()
_decode = msgspec.json.Decoder(tuple[str, str, int, str, str])
#: the longest cursor text accepted (its longest position, a tags member of an owner of
#: 200 characters of 4 bytes, is about 850 bytes: 1,200 once in base64)
MAX_CURSOR = 4096


class Cursor(NamedTuple):
    #: the query's fingerprint (see :func:`fingerprint`)
    query: str
    #: which index drives the list: ``s`` (the state indexes) or ``t<n>`` (tag n)
    driver: str
    #: the merge key of the last task
    ms: int
    ident: str
    position: str


def fingerprint(parts: Any) -> str:
    """A short digest of a normalized query (anything msgspec encodes)."""
    return hashlib.sha256(_encode.encode(parts)).hexdigest()[:12]


def encode_cursor(c: Cursor) -> str:
    raw = _encode.encode(list(c))
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(text: str) -> Cursor:
    """The cursor a page handed out; :class:`rsjobs.ConfigError` for anything else."""
    bad = ConfigError("invalid cursor: pass the cursor a page of this list returned")
    if not isinstance(text, str) or not 0 < len(text) <= MAX_CURSOR or not text.isascii():
        raise bad
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        query, driver, ms, ident, position = _decode.decode(raw)
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise bad from None
    if not 0 <= ms < 10**15 or not ident:
        raise bad
    return Cursor(query, driver, ms, ident, position)
