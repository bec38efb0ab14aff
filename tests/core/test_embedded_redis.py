"""EmbeddedRedis.start returns once its own server answers with its data loaded."""

from __future__ import annotations

from pathlib import Path

import redis

from rsjobs.server import EmbeddedRedis

FILL = """
for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
  redis.call('SET', 'k' .. i, string.rep('x', 100))
end
return 1
"""


def test_a_restart_returns_after_the_aof_is_loaded(tmp_path: Path) -> None:
    """INFO answers while an AOF loads and every data command fails with LOADING: a
    start that counted INFO's answer handed out a server its callers could not use."""
    server = EmbeddedRedis(appendonly=True, data_dir=str(tmp_path))
    server.start()
    try:
        # enough for the load to take a while; in chunks, each well within the timeout even
        # on a busy machine
        r = redis.Redis.from_url(server.url, socket_timeout=60)
        for first in range(1, 300_000, 20_000):
            r.eval(FILL, 0, first, first + 19_999)
        r.close()
        for _ in range(2):
            server.restart(kill=True)
            r = redis.Redis.from_url(server.url, socket_timeout=60)
            try:
                assert r.get("k300000") == b"x" * 100  # no LOADING: the data is there
                assert int(r.info("persistence")["loading"]) == 0
            finally:
                r.close()
    finally:
        server.cleanup()
