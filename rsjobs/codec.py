"""Payload and result encoding: JSON through msgspec, encoders built once.

JSON keeps task hashes readable with ``redis-cli HGETALL``; msgspec makes it cheap.

Nesting is bounded (:data:`MAX_DEPTH` levels): msgspec recurses once per level on the C
stack and raises ``RecursionError`` near Python's recursion limit, at a depth that depends
on how deep the caller's own stack is. A payload accepted at one depth could then fail to
decode where it is read (the web app, a worker); a fixed bound well below the limit makes
every accepted payload readable everywhere.
"""

from __future__ import annotations

import re
from itertools import accumulate
from typing import Any

import msgspec

from .errors import PayloadError

__all__ = ["DEFAULT_PAYLOAD_LIMIT", "MAX_DEPTH", "decode", "encode", "encode_payload", "too_deep"]

#: Default upper bound (bytes) of an encoded payload or result.
DEFAULT_PAYLOAD_LIMIT = 1 << 20
#: Deepest nesting of arrays and objects in a payload or result.
MAX_DEPTH = 128

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()

# JSON string literals (escapes included), whose brackets are text, not structure
_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def too_deep(data: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the arrays and objects of the JSON text ``data`` nest deeper than ``limit``.

    Cheap for ordinary documents: with at most ``limit`` opening brackets it cannot be.
    Otherwise string literals are removed and the brackets left are summed in C
    (``bytes.translate``, ``accumulate``).
    """
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    brackets = _STRINGS.sub(b"", data).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > limit


def encode(value: Any) -> bytes:
    """Encode ``value`` as JSON or raise :class:`PayloadError`."""
    try:
        return _encoder.encode(value)
    except (TypeError, msgspec.EncodeError, OverflowError) as exc:
        raise PayloadError(f"cannot encode {type(value).__name__} as JSON: {exc}") from exc
    except RecursionError:
        raise PayloadError(
            f"cannot encode {type(value).__name__} as JSON: nested too deeply "
            f"(at most {MAX_DEPTH} levels)"
        ) from None


def encode_payload(value: Any, limit: int = DEFAULT_PAYLOAD_LIMIT, what: str = "payload") -> bytes:
    """Encode ``value`` and check it against ``limit`` bytes and :data:`MAX_DEPTH` levels."""
    data = encode(value)
    if len(data) > limit:
        raise PayloadError(f"{what} is {len(data)} bytes, over the limit of {limit} bytes")
    if too_deep(data):
        raise PayloadError(f"{what} is nested more than {MAX_DEPTH} levels deep")
    return data


def decode(data: bytes | str | None) -> Any:
    """Decode JSON written by :func:`encode`; ``None`` and empty stay ``None``."""
    if not data:
        return None
    try:
        return _decoder.decode(data)
    except RecursionError:
        raise PayloadError(f"cannot decode JSON nested more than {MAX_DEPTH} levels") from None
