"""Hooks and webhooks: side effects of a task's changes of state (notices, callbacks to a
frontend), run by ``rsjobs hooks run`` outside the transitions (see ``docs/hooks.md``)."""

from __future__ import annotations

from .registry import Backoff, Hook, HookEvent, Hooks
from .runner import HookRunner
from .webhooks import SIGNATURE_HEADER, Delivery, Webhook, make_webhook, sign, verify

__all__ = [
    "SIGNATURE_HEADER",
    "Backoff",
    "Delivery",
    "Hook",
    "HookEvent",
    "HookRunner",
    "Hooks",
    "Webhook",
    "make_webhook",
    "sign",
    "verify",
]
