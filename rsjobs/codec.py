"""Payload and result encoding: JSON through msgspec, encoders built once.

JSON keeps task hashes readable with ``redis-cli HGETALL``; msgspec makes it cheap.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .errors import PayloadError

__all__ = ["DEFAULT_PAYLOAD_LIMIT", "decode", "encode", "encode_payload"]

#: Default upper bound (bytes) of an encoded payload or result.
DEFAULT_PAYLOAD_LIMIT = 1 << 20

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


def encode(value: Any) -> bytes:
    """Encode ``value`` as JSON or raise :class:`PayloadError`."""
    try:
        return _encoder.encode(value)
    except (TypeError, msgspec.EncodeError, OverflowError) as exc:
        raise PayloadError(f"cannot encode {type(value).__name__} as JSON: {exc}") from exc


def encode_payload(value: Any, limit: int = DEFAULT_PAYLOAD_LIMIT, what: str = "payload") -> bytes:
    """Encode ``value`` and check it against ``limit`` bytes."""
    data = encode(value)
    if len(data) > limit:
        raise PayloadError(f"{what} is {len(data)} bytes, over the limit of {limit} bytes")
    return data


def decode(data: bytes | str | None) -> Any:
    """Decode JSON written by :func:`encode`; ``None`` and empty stay ``None``."""
    if not data:
        return None
    return _decoder.decode(data)
