"""Webhooks: signed JSON POSTs of a task's changes of state to configured URLs.

A webhook (``rsjobs webhooks add``) has a name, a URL, a secret and filters (states, task
type patterns). Each delivery is a POST of a JSON body with the header

    Rsjobs-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>

and ``Rsjobs-Delivery: <delivery id>`` (the same for every attempt: receivers deduplicate
on it). A 2xx answer is a delivery; anything else (or no answer within the timeout) is
retried with the webhook's backoff, then dead-lettered. Every attempt is logged on the
task (``rsjobs webhooks log TASK_ID``). The receiver checks the signature with
:func:`verify`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

import msgspec

from .. import signing
from ..errors import BadSignature, ConfigError
from ..names import validate_name
from ..schemas import WebhookDelivery as Delivery
from .registry import HookEvent, check_states, check_types, matches

#: a URL's host: a name or an address, no spaces or control characters
_HOST = re.compile(r"[^\s/?#@\x00-\x1f\x7f]+")

__all__ = [
    "SIGNATURE_HEADER",
    "Delivery",
    "Webhook",
    "make_webhook",
    "sign",
    "verify",
]

SIGNATURE_HEADER = "Rsjobs-Signature"
DELIVERY_HEADER = "Rsjobs-Delivery"

#: the states a webhook is sent for when it names none: the terminal ones
FINISHED = ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT")


class Webhook(msgspec.Struct, frozen=True, kw_only=True):
    """One webhook's settings (stored as JSON in ``rsjobs:{ns}:webhooks``)."""

    name: str
    url: str
    secret: str
    #: the states it is sent for ("*": all)
    on: tuple[str, ...] = FINISHED
    #: task type patterns (fnmatch); empty: every type
    types: tuple[str, ...] = ()
    max_attempts: int = 8
    backoff_base_ms: int = 1000
    backoff_max_ms: int = 600_000
    timeout_ms: int = 10_000

    @property
    def listener(self) -> str:
        return f"webhook:{self.name}"

    def wants(self, state: str, type: str) -> bool:
        return matches(self.on, self.types, state, type)


def make_webhook(
    name: str,
    url: str,
    secret: str,
    on: Iterable[str] = FINISHED,
    types: Iterable[str] = (),
    *,
    max_attempts: int = 8,
    backoff_base_ms: int = 1000,
    backoff_max_ms: int = 600_000,
    timeout_ms: int = 10_000,
) -> Webhook:
    """A checked webhook: :class:`rsjobs.ConfigError` for a bad name, URL (http or https
    with a host), secret (at least 16 characters), state, pattern or number."""
    validate_name("webhook name", name)
    try:
        u = urlsplit(url)
        host, _ = u.hostname, u.port  # (port: ValueError when it is not one)
    except (ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(f"bad webhook URL {url!r}: {exc}") from None
    if u.scheme not in ("http", "https") or not host or not _HOST.fullmatch(host):
        raise ConfigError(f"bad webhook URL {url!r}: an http:// or https:// URL with a host")
    if len(secret) < 16:
        raise ConfigError("a webhook secret must have at least 16 characters")
    if not 1 <= max_attempts <= 100:
        raise ConfigError("max_attempts must be between 1 and 100")
    if backoff_base_ms < 1 or backoff_max_ms < backoff_base_ms:
        raise ConfigError("backoff: base_ms must be >= 1 and max_ms >= base_ms")
    if not 1 <= timeout_ms <= 120_000:
        raise ConfigError("timeout_ms must be between 1 and 120000")
    return Webhook(
        name=name,
        url=u.geturl(),
        secret=secret,
        on=check_states(on),
        types=check_types(types),
        max_attempts=max_attempts,
        backoff_base_ms=backoff_base_ms,
        backoff_max_ms=backoff_max_ms,
        timeout_ms=timeout_ms,
    )


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The ``Rsjobs-Signature`` header value of ``body`` sent at ``timestamp`` (s)."""
    return signing.signature(secret.encode(), body, timestamp)


def verify(
    secret: str,
    body: bytes,
    header: str,
    *,
    tolerance_s: int = signing.DEFAULT_TOLERANCE_S,
    clock: Callable[[], float] = time.time,
) -> bool:
    """Whether ``header`` signs ``body`` with ``secret`` and is at most ``tolerance_s``
    from ``clock()`` either way (a receiver's check, :func:`rsjobs.signing.check`:
    constant-time, any of several ``v1`` values)."""
    try:
        signing.check(secret.encode(), body, header, tolerance_s=tolerance_s, clock=clock)
    except BadSignature:
        return False
    return True


_body = msgspec.json.Encoder()


def body_of(event: HookEvent) -> bytes:
    """The JSON a webhook receives for ``event``."""
    task = event.task
    return _body.encode(
        {
            "delivery": event.delivery,
            "task_id": event.task_id,
            "queue": event.queue,
            "type": event.type,
            "state": event.state,
            "event": event.event,
            "hid": event.hid,
            "attempt": event.attempt,
            "result": task.result if task is not None else None,
            "error": task.error if task is not None else "",
        }
    )
