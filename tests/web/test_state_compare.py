"""The tests' "nothing was written" check compares what keys hold, not their DUMPs: a
hashtable-encoded hash or set DUMPs in its table order, which follows insertion order and
rehashing, so the same content can DUMP differently."""

from __future__ import annotations

import redis as sync_redis

from tests.support.web import redis_state


def test_same_content_in_another_order_compares_equal_and_a_change_does_not(
    redis_url: str,
) -> None:
    r = sync_redis.Redis.from_url(redis_url)
    try:
        long = "x" * 100  # past a listpack value: hashtable encoding
        fields = {f"f{i}": f"{long}{i}" for i in range(200)}
        r.delete("cmp:a", "cmp:s")
        r.hset("cmp:a", mapping=fields)
        r.sadd("cmp:s", *[f"{long}{i}" for i in range(200)])
        before = redis_state(r)
        r.delete("cmp:a", "cmp:s")
        r.hset("cmp:a", mapping=dict(reversed(list(fields.items()))))
        r.sadd("cmp:s", *[f"{long}{i}" for i in reversed(range(200))])
        assert redis_state(r) == before
        r.hset("cmp:a", "f0", "changed")
        assert redis_state(r) != before
        r.hset("cmp:a", "f0", fields["f0"])
        r.srem("cmp:s", f"{long}0")
        assert redis_state(r) != before
    finally:
        r.delete("cmp:a", "cmp:s")
        r.close()
