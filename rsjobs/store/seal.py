"""Sealed cursors: what a list hands out as its cursor is opaque and authenticated.

A list's cursor (:mod:`.cursor`, :mod:`.merged`) names where a page stopped: a time, an
index entry, a task id. Handed out as it is, a client could read it and craft one. So
what leaves the store is *sealed* with the namespace's cursor key (``Keys.cursor_key``:
32 random bytes, set once with ``SET NX`` by the first page that hands out a cursor, read
by every process of the namespace; deleting it invalidates every cursor handed out):

- the context (the list's query fingerprint, which names its filters and owner) is bound
  in, so a cursor given with other filters, or by another owner, does not open;
- deterministic authenticated encryption in the SIV construction, from HMAC-SHA256 alone
  (no cipher library needed): ``iv = HMAC(k_mac, context || plain)[:16]``, ``ct = plain
  XOR HMAC-SHA256-CTR(k_enc, iv)``, the text is ``base64url(version || iv || ct)``;
  opening recomputes the iv from the decrypted text and compares in constant time. The
  same page asked twice hands out the same cursor; a cursor decodes to nothing readable
  and any change to it is refused.

:func:`open_cursor` raises :class:`rsjobs.ConfigError` (the web app answers 400
``invalid_cursor``) for anything that is not a cursor this namespace sealed for that
context.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

from ..errors import ConfigError

__all__ = ["KEY_BYTES", "MAX_SEALED", "check_form", "new_key", "open_cursor", "seal_cursor"]

#: the size of a namespace's cursor key
KEY_BYTES = 32
#: the first byte of a sealed cursor (its format)
_VERSION = b"\x01"
_IV = 16
#: the longest sealed text accepted (a merged cursor of 64 shards of 1,200 bytes each)
MAX_SEALED = 110_000

BAD = "invalid cursor: pass the cursor a page of this list returned"
OTHER = (
    "invalid cursor: not a cursor of this list (made for other filters or another owner,"
    " altered, or handed out before the namespace's cursor key changed)"
)


def new_key() -> str:
    """A fresh cursor key, as the hex text ``Keys.cursor_key`` holds."""
    return secrets.token_hex(KEY_BYTES)


def _subkeys(key: bytes) -> tuple[bytes, bytes]:
    enc = hmac.new(key, b"rsjobs cursor enc", hashlib.sha256).digest()
    mac = hmac.new(key, b"rsjobs cursor mac", hashlib.sha256).digest()
    return enc, mac


def _iv(mac: bytes, context: str, plain: bytes) -> bytes:
    ctx = context.encode()
    msg = len(ctx).to_bytes(4, "big") + ctx + plain
    return hmac.new(mac, msg, hashlib.sha256).digest()[:_IV]


def _xor(enc: bytes, iv: bytes, data: bytes) -> bytes:
    """``data`` XOR the keystream HMAC(enc, iv || counter), counter from 0."""
    out = bytearray(len(data))
    for block in range(0, len(data), 32):
        pad = hmac.new(enc, iv + (block // 32).to_bytes(8, "big"), hashlib.sha256).digest()
        for j, b in enumerate(data[block : block + 32]):
            out[block + j] = b ^ pad[j]
    return bytes(out)


def seal_cursor(key: bytes, context: str, plain: str) -> str:
    """The sealed text of the cursor ``plain`` for ``context``."""
    enc, mac = _subkeys(key)
    raw = plain.encode()
    iv = _iv(mac, context, raw)
    sealed = _VERSION + iv + _xor(enc, iv, raw)
    return base64.urlsafe_b64encode(sealed).decode().rstrip("=")


def _unwrap(text: object) -> bytes:
    """The bytes of a sealed text (not yet opened); ConfigError when it cannot be one."""
    if not isinstance(text, str) or not 0 < len(text) <= MAX_SEALED or not text.isascii():
        raise ConfigError(BAD)
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ConfigError(BAD) from None
    if len(raw) <= 1 + _IV or raw[:1] != _VERSION:
        raise ConfigError(BAD)
    return raw


def check_form(text: object) -> None:
    """Raise ConfigError when ``text`` cannot be a sealed cursor at all (before any read)."""
    _unwrap(text)


def open_cursor(key: bytes | None, context: str, text: object) -> str:
    """The cursor sealed as ``text`` for ``context`` (``key``: the namespace's cursor key,
    None when it has none yet: then no cursor was ever handed out). Raises ConfigError."""
    raw = _unwrap(text)
    if key is None:
        raise ConfigError(OTHER)
    enc, mac = _subkeys(key)
    iv, ct = raw[1 : 1 + _IV], raw[1 + _IV :]
    plain = _xor(enc, iv, ct)
    if not hmac.compare_digest(iv, _iv(mac, context, plain)):
        raise ConfigError(OTHER)
    try:
        return plain.decode()
    except UnicodeDecodeError:  # (authentic, so never: the store sealed text)
        raise ConfigError(BAD) from None
