"""Timestamped HMAC signatures, the scheme payment providers use, once for every signer.

A signature header reads ``t=<unix seconds>,v1=<hex HMAC-SHA256(secret, payload)>`` where
the payload is ``"<t>.<body>"``, or ``"<t>.<context>.<body>"`` when the signature is bound
to something besides its body (a provider callback binds ``<provider>/<external_id>``: a
body signed for one outside job is refused for another). The receiver refuses a
timestamp further than its tolerance from its clock, in either direction, so a captured
request cannot be replayed later. A header may carry several ``v1`` values (a sender
signing with the old and the new secret while the secret rotates); one that verifies is
enough. Each comparison runs in constant time (:func:`hmac.compare_digest`).

The outgoing webhooks (:mod:`rsjobs.hooks.webhooks`) and the provider callbacks
(:mod:`rsjobs.callbacks`) both sign with :func:`signature` and check with :func:`check`.
No Redis here.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Callable

from .errors import BadSignature

__all__ = ["DEFAULT_TOLERANCE_S", "MAX_V1", "check", "parse", "payload", "signature"]

#: how far (s) a signature's timestamp may be from the receiver's clock, either way
DEFAULT_TOLERANCE_S = 300
#: the most ``v1`` values one header may carry (secret rotation needs two)
MAX_V1 = 4
#: the longest header read (a timestamp and MAX_V1 hex digests fit well within)
_MAX_HEADER = 512
#: a timestamp: unix seconds, at most 12 digits (a float keeps them exact)
_STAMP = re.compile(r"[0-9]{1,12}")


def payload(timestamp: int, body: bytes, context: str = "") -> bytes:
    """What is signed: ``<t>.<body>``, or ``<t>.<context>.<body>`` with a context."""
    head = f"{timestamp}.{context}." if context else f"{timestamp}."
    return head.encode() + body


def _mac(key: bytes, timestamp: int, body: bytes, context: str) -> str:
    return hmac.new(key, payload(timestamp, body, context), hashlib.sha256).hexdigest()


def signature(key: bytes, body: bytes, timestamp: int, context: str = "") -> str:
    """The header value signing ``body`` (and ``context``) at ``timestamp`` (unix s)."""
    return f"t={timestamp},v1={_mac(key, timestamp, body, context)}"


def parse(header: str) -> tuple[int, list[str]]:
    """The timestamp and ``v1`` values of a header; :class:`BadSignature` naming what is
    wrong when it is not ``t=<digits>,v1=<hex>[,v1=<hex>...]``."""
    if len(header) > _MAX_HEADER:
        raise BadSignature("signature header too long")
    stamp: int | None = None
    v1: list[str] = []
    for part in header.split(","):
        name, eq, value = part.strip().partition("=")
        if not eq:
            raise BadSignature("malformed signature header: expected t=<unix seconds>,v1=<hex>")
        if name == "t":
            if stamp is not None or not _STAMP.fullmatch(value):
                raise BadSignature("malformed signature header: one t=<unix seconds>")
            stamp = int(value)
        elif name == "v1":
            v1.append(value)
        # other schemes (v0, a future v2) are skipped, as a receiver of this scheme does
    if stamp is None:
        raise BadSignature("signature header has no timestamp (t=<unix seconds>)")
    if not v1:
        raise BadSignature("signature header has no v1=<hex HMAC-SHA256> value")
    if len(v1) > MAX_V1:
        raise BadSignature(f"signature header has more than {MAX_V1} v1 values")
    return stamp, v1


def check(
    key: bytes,
    body: bytes,
    header: str,
    context: str = "",
    *,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
    clock: Callable[[], float] = time.time,
) -> int:
    """The timestamp of ``header`` when one of its ``v1`` values signs ``body`` (and
    ``context``) under ``key`` and the timestamp is within ``tolerance_s`` of ``clock()``;
    else :class:`BadSignature` with the reason (malformed, too old, in the future, does
    not verify)."""
    stamp, values = parse(header)
    skew = clock() - stamp
    if skew > tolerance_s:
        raise BadSignature(
            f"signature timestamp is {int(skew)} s old (more than {tolerance_s} s): "
            "sign each request when it is sent"
        )
    if -skew > tolerance_s:
        raise BadSignature(
            f"signature timestamp is {int(-skew)} s in the future (more than {tolerance_s} s)"
        )
    want = _mac(key, stamp, body, context)
    ok = False
    for value in values:
        # every value compared (no early exit), each in constant time
        ok |= hmac.compare_digest(want.encode(), value.encode("utf-8", "replace"))
    if not ok:
        raise BadSignature("signature does not verify")
    return stamp
