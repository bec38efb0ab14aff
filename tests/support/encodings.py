"""Redis's compact encodings by version: a small hash is a ``listpack`` since Redis 7 and a
``ziplist`` before (Redis 6.2, which rsjobs still runs on: ``RSJOBS_REDIS_SERVER`` runs the
suite there). Both are one allocation of packed entries."""

from __future__ import annotations

#: OBJECT ENCODING of a small hash on Redis 7 and on Redis 6.2
COMPACT_HASH = ("listpack", "ziplist")
