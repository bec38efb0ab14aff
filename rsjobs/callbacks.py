"""Callback tokens: how an outside service proves that its result is for one attempt.

A handler that defers its attempt (:meth:`rsjobs.Context.defer`) hands the provider a
callback URL (:meth:`rsjobs.Context.callback_url`) whose last segment is a token: the
namespace, task id, queue and attempt, and an expiry, signed with HMAC-SHA256 under the
secret the worker and the web app share (``RSJOBS_CALLBACK_SECRET``). The web app's
``POST /callbacks/{token}`` verifies it before it reads anything; the attempt it names is
the fence (``resolve.lua`` refuses a result for an attempt that is over). A workflow's
regenerate cancels the old version's tasks, so their tokens are refused there too.

Providers that cannot carry a URL sign the body instead: ``X-Rsjobs-Signature:
sha256=<hex HMAC of the body>`` on ``POST /callbacks/external/{provider}/{external_id}``,
under the same secret (:func:`body_signature`).

No Redis here: the worker and the web app import this alone.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time
from typing import NamedTuple

import msgspec

from .errors import BadSignature, ConfigError

__all__ = [
    "SECRET_ENV",
    "TOKEN_TTL_MS",
    "Claims",
    "body_signature",
    "check_body_signature",
    "secret_from_env",
    "sign",
    "verify",
]

#: the environment variable both the worker and the web app read the secret from
SECRET_ENV = "RSJOBS_CALLBACK_SECRET"
#: how long a token is good for when the handler does not say (a week: past its longest
#: wait a task refuses the result anyway, recorded; an expired token is a 401)
TOKEN_TTL_MS = 7 * 24 * 3600 * 1000
#: the shortest secret taken (bytes)
SECRET_MIN = 16


class Claims(NamedTuple):
    """What a token names."""

    namespace: str
    task_id: str
    queue: str
    attempt: int
    #: Unix time (ms) after which the token is refused
    expires_at: int


class _Wire(msgspec.Struct, frozen=True, array_like=True):
    namespace: str
    task_id: str
    queue: str
    attempt: int
    expires_at: int


_encode = msgspec.msgpack.Encoder()
_decode = msgspec.msgpack.Decoder(_Wire)


def _key(secret: str | bytes) -> bytes:
    key = secret.encode() if isinstance(secret, str) else secret
    if len(key) < SECRET_MIN:
        raise ConfigError(f"the callback secret must be at least {SECRET_MIN} bytes")
    return key


def secret_from_env() -> str | None:
    """The callback secret of this process's environment (None when unset)."""
    return os.environ.get(SECRET_ENV) or None


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(secret: str | bytes, claims: Claims) -> str:
    """The token of ``claims``: URL-safe, ``<claims>.<mac>``."""
    body = _b64(_encode.encode(_Wire(*claims)))
    mac = hmac.new(_key(secret), body.encode(), hashlib.sha256).digest()
    return f"{body}.{_b64(mac)}"


def verify(secret: str | bytes, token: str, now_ms: int | None = None) -> Claims:
    """The claims of a token signed with ``secret`` and not expired; raises
    :class:`rsjobs.BadSignature` for anything else (malformed, altered, expired)."""
    key = _key(secret)
    body, dot, mac = token.partition(".")
    if not dot or not body or not mac or len(token) > 1024:
        raise BadSignature("malformed callback token")
    want = hmac.new(key, body.encode(), hashlib.sha256).digest()
    try:
        got = _unb64(mac)
    except ValueError:
        raise BadSignature("malformed callback token") from None
    # (the canonical spelling only: the last character of unpadded base64 has spare bits,
    # and a token has one spelling)
    if not hmac.compare_digest(want, got) or _b64(got) != mac:
        raise BadSignature("callback token signature does not verify")
    try:
        w = _decode.decode(_unb64(body))
        claims = Claims(w.namespace, w.task_id, w.queue, w.attempt, w.expires_at)
    except (ValueError, msgspec.DecodeError):
        raise BadSignature("malformed callback token") from None
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if claims.expires_at < now:
        raise BadSignature("callback token expired")
    return claims


def body_signature(secret: str | bytes, body: bytes) -> str:
    """The ``X-Rsjobs-Signature`` value of a body: ``sha256=<hex HMAC>``."""
    return "sha256=" + hmac.new(_key(secret), body, hashlib.sha256).hexdigest()


def check_body_signature(secret: str | bytes, body: bytes, header: str | None) -> None:
    """Raise :class:`rsjobs.BadSignature` unless ``header`` signs ``body``."""
    if not header:
        raise BadSignature("missing X-Rsjobs-Signature header")
    if not hmac.compare_digest(body_signature(secret, body), header.strip()):
        raise BadSignature("X-Rsjobs-Signature does not verify")
