"""Callback tokens: how an outside service proves that its result is for one attempt.

A handler that defers its attempt (:meth:`rsjobs.Context.defer`) hands the provider a
callback URL (:meth:`rsjobs.Context.callback_url`) whose last segment is a token: the
namespace, task id, queue and attempt, and an expiry, signed with HMAC-SHA256 under the
secret the worker and the web app share (``RSJOBS_CALLBACK_SECRET``). The web app's
``POST /callbacks/{token}`` verifies it before it reads anything; the attempt it names is
the fence (``resolve.lua`` refuses a result for an attempt that is over). A workflow's
regenerate cancels the old version's tasks, so their tokens are refused there too.

Providers that cannot carry a URL sign each request instead, on ``POST
/callbacks/external/{provider}/{external_id}``, under the same secret
(:func:`body_signature`, the scheme of :mod:`rsjobs.signing`)::

    X-Rsjobs-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret,
                        "<t>.<provider>/<external_id>.<body>")>

The signature binds the body to one outside job and one moment: a body signed for one
job is refused for another, and one older (or newer) than the tolerance (five minutes by
default) is refused. The old ``sha256=<hex HMAC of the body>`` form, which bound the body
to nothing, is refused with a reason.

No Redis here: the worker and the web app import this alone.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time
from collections.abc import Callable
from typing import NamedTuple

import msgspec

from . import signing
from .errors import BadSignature, ConfigError

__all__ = [
    "SECRET_ENV",
    "SIGNATURE_HEADER",
    "TOKEN_TTL_MS",
    "Claims",
    "body_signature",
    "check_body_signature",
    "secret_from_env",
    "sign",
    "signed_context",
    "verify",
]

#: the environment variable both the worker and the web app read the secret from
SECRET_ENV = "RSJOBS_CALLBACK_SECRET"
#: how long a token is good for when the handler does not say (a week: past its longest
#: wait a task refuses the result anyway, recorded; an expired token is a 401)
TOKEN_TTL_MS = 7 * 24 * 3600 * 1000
#: the header a provider signs an external callback in (HTTP headers are case-blind)
SIGNATURE_HEADER = "X-Rsjobs-Signature"
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


def signed_context(provider: str, external_id: str) -> str:
    """What an external callback's signature binds besides its body and time."""
    return f"{provider}/{external_id}"


def body_signature(
    secret: str | bytes,
    provider: str,
    external_id: str,
    body: bytes,
    timestamp: int | None = None,
) -> str:
    """The ``X-Rsjobs-Signature`` value of a callback ``body`` for ``external_id`` of
    ``provider``, sent at ``timestamp`` (unix s; default now): ``t=<t>,v1=<hex HMAC-SHA256
    of "<t>.<provider>/<external_id>.<body>">``. (The provider is a name, without '/',
    so the context splits one way only.)"""
    stamp = int(time.time()) if timestamp is None else timestamp
    return signing.signature(_key(secret), body, stamp, signed_context(provider, external_id))


def check_body_signature(
    secret: str | bytes,
    provider: str,
    external_id: str,
    body: bytes,
    header: str | None,
    *,
    tolerance_s: int = signing.DEFAULT_TOLERANCE_S,
    clock: Callable[[], float] = time.time,
) -> None:
    """Raise :class:`rsjobs.BadSignature` (with the reason) unless ``header`` signs
    ``body`` for ``external_id`` of ``provider`` within ``tolerance_s`` of ``clock()``."""
    key = _key(secret)
    if not header or not header.strip():
        raise BadSignature(f"missing {SIGNATURE_HEADER} header")
    if header.strip().startswith("sha256="):
        raise BadSignature(
            f"{SIGNATURE_HEADER}: the sha256=<hex> form signs the body only and is refused; "
            'sign t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<provider>/'
            '<external_id>.<body>")>'
        )
    try:
        signing.check(
            key,
            body,
            header,
            signed_context(provider, external_id),
            tolerance_s=tolerance_s,
            clock=clock,
        )
    except BadSignature as exc:
        raise BadSignature(f"{SIGNATURE_HEADER}: {exc}") from None
