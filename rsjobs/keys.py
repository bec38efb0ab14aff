"""Alias of :mod:`rsjobs.store.keys`, where the key layout now lives (kept for code that
still imports ``rsjobs.keys``)."""

from .store.keys import GROUP, Keys, member, split_member, validate_name

__all__ = ["GROUP", "Keys", "member", "split_member", "validate_name"]
